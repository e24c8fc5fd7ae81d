package core

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// A direct socket: for a gorilla/websocket connection over TCP (or a Unix
// socket), the engine frames its text messages itself (RFC 6455 server
// frames: unmasked, one frame per message) and writes them to the socket
// without going through gorilla's writer. That lets the fan-out write a
// connection's frames from its own goroutine with one non-blocking system
// call (flushDirect), instead of waking a writer goroutine per connection
// and wave of changes, and lets a writer send every frame of a drain in
// one system call. Anything a non-blocking write cannot finish goes to a
// writer goroutine, which sends the rest (blocking, with the write
// deadline) before anything else. Other sockets (TLS, test doubles) keep
// the writer-goroutine path with one WriteMessage per frame.
//
// The byte stream stays whole because only one party writes data frames
// at a time (the connection's writing flag), every write through net.Conn
// or gorilla's WriteControl holds the socket's own write lock for the
// whole buffer, and the one write that may stop halfway, the non-blocking
// one, holds wmu until it has recorded what it left: control frames
// written from other goroutines (close, pong, the close reply) take wmu
// and wait for that rest first (writeControl).
type directSocket struct {
	rc  syscall.RawConn // nil: not a direct socket
	wmu sync.Mutex      // see above
	// rest is the unwritten end of a non-blocking write, until a writer
	// has sent it. Guarded by the connection's mu.
	rest *unwritten
}

// unwritten is what a non-blocking write left; done is closed once it is
// sent.
type unwritten struct {
	b    *[]byte // a pooled buffer (writeBuffers)
	done chan struct{}
}

// initDirect makes c's socket direct if it is a gorilla connection whose
// net.Conn exposes its file descriptor. gorilla answers pings and close
// frames from the reader goroutine with WriteControl; those answers go
// through writeControl instead, so they never land inside a half-written
// frame.
func (c *conn) initDirect() {
	wc, ok := c.ws.(*websocket.Conn)
	if !ok {
		return
	}
	sc, ok := wc.NetConn().(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	c.out.direct.rc = rc
	wc.SetPingHandler(func(data string) error { // gorilla's default, through writeControl
		err := c.writeControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		var ne net.Error
		if err == nil || errors.Is(err, websocket.ErrCloseSent) || errors.Is(err, errRestTimeout) || errors.As(err, &ne) {
			return nil
		}
		return err
	})
	wc.SetCloseHandler(func(code int, _ string) error {
		_ = c.writeControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
		return nil
	})
}

// errRestTimeout: a control frame could not be sent before its deadline
// because a half-written frame was still being finished.
var errRestTimeout = errors.New("tide: socket write timed out")

// writeControl writes a control frame from outside the connection's
// writer, after any half-written frame has been finished.
func (c *conn) writeControl(messageType int, data []byte, deadline time.Time) error {
	d := &c.out.direct
	if d.rc == nil {
		return c.ws.WriteControl(messageType, data, deadline)
	}
	for {
		d.wmu.Lock()
		c.mu.Lock()
		var done chan struct{}
		if d.rest != nil {
			done = d.rest.done
		}
		c.mu.Unlock()
		if done == nil {
			err := c.ws.WriteControl(messageType, data, deadline)
			d.wmu.Unlock()
			return err
		}
		d.wmu.Unlock()
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-done:
			t.Stop()
		case <-t.C:
			return errRestTimeout
		}
	}
}

// finishRest sends what a non-blocking write left unwritten, blocking up to
// the write timeout; the writer calls it first. It reports whether the
// connection may go on (a failed write kills it).
func (c *conn) finishRest() bool {
	d := &c.out.direct
	c.mu.Lock()
	rest := d.rest
	c.mu.Unlock()
	if rest == nil {
		return true
	}
	nc := c.ws.NetConn()
	_ = nc.SetWriteDeadline(time.Now().Add(c.e.cfg.WriteTimeout))
	_, err := nc.Write(*rest.b)
	if cap(*rest.b) <= maxPooledWrite {
		*rest.b = (*rest.b)[:0]
		writeBuffers.Put(rest.b)
	}
	c.mu.Lock()
	d.rest = nil
	close(rest.done)
	if err != nil {
		c.out.writing = false
	}
	c.mu.Unlock()
	if err != nil {
		c.kill()
		return false
	}
	return true
}

// frames collects the frames of one drain. On a direct socket they are
// framed into one buffer and written together (flush); otherwise each is
// written through the Socket as it is finished.
type frames struct {
	c      *conn
	direct bool
	// blocking: the frames are written by blocking writes (the writer's
	// drain, not flushDirect), so add may write a large payload at once.
	blocking bool
	out      io.Writer // where a direct socket's frames go; nil: c's socket
	bp       *[]byte   // pooled buffer
	buf      []byte
}

func (c *conn) newFrames() frames {
	bp := writeBuffers.Get().(*[]byte)
	return frames{c: c, direct: c.out.direct.rc != nil, blocking: true, bp: bp, buf: (*bp)[:0]}
}

// writer returns where a direct socket's frames are written.
func (f *frames) writer() io.Writer {
	if f.out != nil {
		return f.out
	}
	return f.c.ws.NetConn()
}

// release returns the buffer to the pool.
func (f *frames) release() {
	if f.bp != nil && cap(f.buf) <= maxPooledWrite {
		*f.bp = f.buf[:0]
		writeBuffers.Put(f.bp)
	}
	f.bp, f.buf = nil, nil
}

// maxFrameHeader is the longest RFC 6455 server frame header (no mask).
const maxFrameHeader = 10

// begin starts a text message: append its payload to b, then call end with
// b and at, the payload's start.
func (f *frames) begin() (b []byte, at int) {
	if !f.direct {
		return f.buf[:0], 0
	}
	b = append(f.buf, make([]byte, maxFrameHeader)...)
	return b, len(b)
}

// end finishes the message begun at at.
func (f *frames) end(b []byte, at int) error {
	if !f.direct {
		f.buf = b
		return f.c.ws.WriteMessage(websocket.TextMessage, b)
	}
	f.buf = frameText(b, at)
	return nil
}

// add adds a whole text message. On a direct socket written by blocking
// writes, a payload of at least directPayload bytes (a replay or snapshot
// page) is not copied: it is written from where it is, after the frames
// collected before it and its header, in one vectored write.
func (f *frames) add(payload []byte) error {
	if f.direct && f.blocking && len(payload) >= directPayload {
		var h [maxFrameHeader]byte
		bufs := net.Buffers{f.buf, textHeader(h[:0], len(payload)), payload}
		if len(f.buf) == 0 {
			bufs = bufs[1:]
		}
		_, err := bufs.WriteTo(f.writer())
		f.buf = f.buf[:0]
		return err
	}
	b, at := f.begin()
	return f.end(append(b, payload...), at)
}

// directPayload is the size from which frames.add writes a payload
// without copying it.
const directPayload = 16 << 10

// flush writes the collected frames (blocking, under the deadline the
// writer set) and empties the buffer.
func (f *frames) flush() error {
	if !f.direct || len(f.buf) == 0 {
		return nil
	}
	_, err := f.writer().Write(f.buf)
	f.buf = f.buf[:0]
	return err
}

// frameText writes the header of the text frame whose payload is b[at:]
// into the maxFrameHeader bytes reserved before it, moving the payload
// down to close the gap, and returns b.
func frameText(b []byte, at int) []byte {
	var h [maxFrameHeader]byte
	hdr := textHeader(h[:0], len(b)-at)
	start := at - maxFrameHeader
	copy(b[start+len(hdr):], b[at:])
	b = b[:len(b)-(maxFrameHeader-len(hdr))]
	copy(b[start:], hdr)
	return b
}

// textHeader appends the header of a final text frame (unmasked) of n
// payload bytes to b.
func textHeader(b []byte, n int) []byte {
	switch {
	case n < 126:
		return append(b, 0x81, byte(n)) // FIN, text
	case n <= 0xffff:
		return append(b, 0x81, 126, byte(n>>8), byte(n))
	}
	b = append(b, 0x81, 127)
	for i := range 8 {
		b = append(b, byte(uint64(n)>>(56-8*i)))
	}
	return b
}

// flushDirect writes c's queued items from the calling goroutine (the
// fan-out's) with one non-blocking write system call, when c's socket is
// direct and nothing else is being written; otherwise, and for whatever
// the call cannot finish, it starts c's writer (kickLocked). It never
// waits for the socket. buf is the caller's scratch buffer.
func (c *conn) flushDirect(buf *[]byte) {
	d := &c.out.direct
	c.mu.Lock()
	c.out.kickQueued = false
	if c.out.writing || len(c.out.items) == 0 {
		c.mu.Unlock()
		return
	}
	if d.rc == nil || c.closing || c.out.closeQueued || c.out.pingDue || c.out.resyncDue || !d.wmu.TryLock() {
		c.kickLocked()
		c.mu.Unlock()
		return
	}
	c.out.writing = true
	items := c.out.items
	c.out.items = c.out.spare[:0]
	c.mu.Unlock()

	// No close item is queued (closeQueued was false), so every item is a
	// frame or live entries.
	f := frames{c: c, direct: true, buf: (*buf)[:0]}
	var err error
	for i := 0; i < len(items) && err == nil; {
		if items[i].sub == nil {
			err = f.add(items[i].data)
			i++
			continue
		}
		j := i
		for j < len(items) && items[j].sub != nil {
			j++
		}
		err = c.writeEntries(&f, items[i:j])
		i = j
	}
	wrote := 0
	if err == nil && len(f.buf) > 0 {
		wrote, err = writeNonBlocking(d.rc, f.buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// A deadline a blocking write set (a writer's drain, a control
			// frame) has passed; no such write is running now (this
			// connection is not writing and wmu is held), and a
			// non-blocking write needs none.
			_ = c.ws.NetConn().SetWriteDeadline(time.Time{})
			wrote, err = writeNonBlocking(d.rc, f.buf)
		}
	}
	c.written(items)
	c.mu.Lock()
	c.out.writing = false
	if err == nil && wrote < len(f.buf) {
		bp := writeBuffers.Get().(*[]byte)
		*bp = append((*bp)[:0], f.buf[wrote:]...)
		d.rest = &unwritten{b: bp, done: make(chan struct{})}
	}
	if err == nil && (d.rest != nil || len(c.out.items) > 0 || c.out.pingDue || c.out.resyncDue) {
		c.kickLocked()
	}
	c.mu.Unlock()
	d.wmu.Unlock()
	if cap(f.buf) <= maxPooledWrite {
		*buf = f.buf[:0]
	}
	if err != nil {
		c.kill()
	}
}

// writeNonBlocking writes as much of b as the socket takes now.
func writeNonBlocking(rc syscall.RawConn, b []byte) (int, error) {
	n := 0
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := syscall.Write(int(fd), b[n:])
			if m > 0 {
				n += m
			}
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return true
			case err != nil:
				werr = os.NewSyscallError("write", err)
				return true
			case m == 0:
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}
