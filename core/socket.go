package core

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/text"
)

// closeGrace is how long a closing connection waits for the peer's close
// reply before the TCP connection is cut.
const closeGrace = 2 * time.Second

func (c *conn) readLoop() {
	defer c.e.wg.Done()
	defer c.teardown()
	cfg := &c.e.cfg
	c.ws.SetReadLimit(-1) // frame size is enforced below, with an error frame instead of a close
	_ = c.ws.SetReadDeadline(time.Now().Add(cfg.HelloTimeout))
	c.ws.SetPongHandler(func(string) error {
		return c.ws.SetReadDeadline(time.Now().Add(cfg.IdleTimeout))
	})
	c.limiter = newFrameLimiter(cfg.FrameRate, cfg.FrameBurst, time.Now())
	for {
		mt, r, err := c.ws.NextReader()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !c.isClosing() {
				c.closeWith(protocol.CloseIdle, "idle timeout")
			}
			return
		}
		// The frame buffer is borrowed only while a frame is handled, so an
		// idle connection holds none.
		bp := frameBuffers.Get().(*[]byte)
		buf, tooBig, err := readFrame(r, (*bp)[:0], cfg.MaxFrameBytes)
		if err != nil {
			return
		}
		if c.helloDone {
			_ = c.ws.SetReadDeadline(time.Now().Add(cfg.IdleTimeout))
		}
		switch {
		case c.isEnding():
			// Draining the peer's frames until its close reply arrives.
		case !c.limiter.allow(time.Now()):
			// Before the size check: an oversized frame costs the server
			// its read and an answer, so it counts like any other.
			// One error per refused run, not one per frame: the answer
			// must not become a flood of its own. A mutation is the
			// exception: its client waits for an answer to its key, so it
			// is told to resend that one later (at most 4×FrameBurst such
			// answers before the connection is closed).
			limited := presentReject(protocol.Errorf(protocol.CodeRateLimited, "more than %d frames per second; resend later with the same key", cfg.FrameRate))
			if !c.rejectByKey(buf, limited) && c.limiter.refused == 1 {
				c.sendError("", protocol.Errorf(protocol.CodeRateLimited, "more than %d frames per second; frames are being dropped", cfg.FrameRate))
			}
			if c.limiter.refused > 4*cfg.FrameBurst {
				c.closeAfterFlush(protocol.ClosePolicy, "rate limit")
			}
		case tooBig:
			c.refuseTooBig(buf)
		case mt != websocket.TextMessage:
			c.sendError("", protocol.Errorf(protocol.CodeBadFrame, "frames are JSON text messages"))
		default:
			c.handleOffStack(buf)
		}
		if cap(buf) <= 64<<10 { // do not pool what an oversized frame grew
			*bp = buf[:0]
			frameBuffers.Put(bp)
		}
	}
}

// frameBuffers holds buffers for reading client frames. Handlers copy what
// they keep (encoding/json copies strings and RawMessages), so a buffer is
// free again once its frame is handled.
var frameBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// readFrame reads one message into buf, up to max bytes. A longer message is
// reported as tooBig with its first max bytes in buf (refuseTooBig reads
// them); the rest is discarded, up to 16 times max (beyond that the
// connection is dropped).
func readFrame(r io.Reader, buf []byte, max int) ([]byte, bool, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > max {
			buf = buf[:max]
			rest, derr := io.Copy(io.Discard, io.LimitReader(r, 16*int64(max)))
			if derr != nil {
				return buf, true, derr
			}
			if rest == 16*int64(max) {
				return buf, true, errors.New("tide: frame far beyond the size limit")
			}
			return buf, true, nil
		}
		if err == io.EOF {
			return buf, false, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
}

// refuseTooBig answers a frame above MaxFrameBytes, of which prefix holds
// the first MaxFrameBytes bytes. A mutate frame whose key prefix shows (a
// client writes key right after type) is answered by a reject for that
// key, so that the client settles the mutation instead of resending it
// forever; any other frame by a connection-level error.
func (c *conn) refuseTooBig(prefix []byte) {
	limit := fmt.Sprintf("frames are limited to %d bytes", c.e.cfg.MaxFrameBytes)
	if !c.rejectByKey(prefix, &protocol.Error{Code: protocol.CodeFrameTooLarge, Message: rejectMessage(protocol.CodeFrameTooLarge), Detail: limit}) {
		c.sendError("", &protocol.Error{Code: protocol.CodeFrameTooLarge, Message: limit})
	}
}

// rejectByKey answers a mutate frame the server does not read in full (too
// large, or over the frame rate) with a reject carrying err for its key,
// read from the frame's first bytes, so that its client learns the fate of
// that mutation. It reports false, sending nothing, for any other frame, a
// key it cannot read, or a connection not yet welcomed.
func (c *conn) rejectByKey(prefix []byte, err *protocol.Error) bool {
	typ, key, ok := protocol.ScanFrameKey(prefix)
	if !ok || key == "" || typ != protocol.FrameMutate || !c.helloDone {
		return false
	}
	c.e.stats.mutationsRejected.Add(1)
	c.e.cfg.Observer.Mutated("", "", err.Code, 0)
	c.sendFrame(protocol.Reject(text.Truncate(key, protocol.MaxKeyLen), err))
	return true
}

// handleOffStack handles a frame on a short-lived goroutine and waits for
// it. Decoding and policy calls need deep stacks; run on the reader they
// would grow its stack for good, and an idle connection would keep paying
// for it. The reader's own stack stays at its minimum.
func (c *conn) handleOffStack(frame []byte) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.handle(frame)
	}()
	<-done
}

// closeWith starts the close handshake: it discards queued frames, sends a
// close frame with code, and gives the peer closeGrace to answer before the
// reader gives up. Only the first call has an effect. The close frame may
// wait behind everything the kernel already holds for the peer (a client
// closed for backpressure is behind by definition), so it gets what any
// write gets, WriteTimeout; a peer that takes nothing for that long is cut.
func (c *conn) closeWith(code protocol.CloseCode, reason string) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.out.discard()
	c.mu.Unlock()
	c.e.cfg.Observer.CloseSent(code)
	deadline := time.Now().Add(c.e.cfg.WriteTimeout)
	if err := c.writeControl(websocket.CloseMessage, websocket.FormatCloseMessage(int(code), reason), deadline); err != nil {
		c.kill()
		return
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(closeGrace))
}

// kill cuts the TCP connection; the reader then tears everything down.
func (c *conn) kill() {
	c.killOnce.Do(func() { _ = c.ws.NetConn().Close() })
}

// teardown runs when the reader ends: every subscription ends and the engine
// forgets the connection.
func (c *conn) teardown() {
	c.mu.Lock()
	c.closing = true
	c.out.discard()
	subs := make([]*subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	n := len(c.subs)
	c.subs = map[string]*subscription{}
	c.mu.Unlock()
	c.e.stats.subscriptions.Add(int64(-n))
	c.e.bounds.dropSubs(c.pid, n)
	for _, s := range subs {
		s.observeEnded()
		s.close()
	}
	c.kill()
	c.e.auth.forget(c)
	c.e.chans.dropConn(c)
	c.e.mu.Lock()
	delete(c.e.conns, c)
	c.e.mu.Unlock()
	if c.counted {
		c.e.bounds.dropConn(c.pid)
	}
	c.e.stats.connections.Add(-1)
	c.e.cfg.Observer.ConnClosed()
}

// writeLoop drains the queue and returns when it is empty, so an idle
// connection has no writer goroutine (hub.writer runs it). It first
// finishes any frames a direct write (flushDirect) left half written.
func (c *conn) writeLoop() {
	if !c.finishRest() {
		return
	}
	for {
		c.mu.Lock()
		ping := c.out.pingDue
		c.out.pingDue = false
		items := c.out.items
		c.out.items = c.out.spare[:0]
		var resync []*subscription
		if c.out.bytes <= c.out.limit/2 && c.out.resyncDue {
			c.out.resyncDue = false
			resync = make([]*subscription, 0, len(c.subs))
			for _, s := range c.subs {
				resync = append(resync, s) // resync skips those not desynced
			}
		}
		if len(items) == 0 && !ping && resync == nil {
			c.out.writing = false
			c.out.spare = items
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()

		for _, s := range resync {
			s.resync()
		}
		err := c.writeItems(items, ping)
		c.written(items)
		if err != nil {
			c.kill()
			c.mu.Lock()
			c.out.writing = false
			c.mu.Unlock()
			return
		}
	}
}

// written frees the queue space of items once they are written (or
// failed), and keeps their slice for the next drain.
func (c *conn) written(items []outItem) {
	n := 0
	for i := range items {
		n += items[i].size()
	}
	clear(items)
	c.mu.Lock()
	c.out.spare = items[:0]
	if !c.closing {
		c.out.bytes -= n
	}
	c.out.wake()
	c.mu.Unlock()
}

// writeItems writes queued items in order, merging each run of live entries
// into one changes frame per subscription. On a direct socket every frame
// of the drain goes out in one write system call.
func (c *conn) writeItems(items []outItem, ping bool) error {
	if ping {
		if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.e.cfg.WriteTimeout)); err != nil {
			return err
		}
	}
	f := c.newFrames()
	defer f.release()
	return c.writeFrames(&f, items)
}

// writeFrames is writeItems after the ping.
func (c *conn) writeFrames(f *frames, items []outItem) error {
	deadline := time.Now().Add(c.e.cfg.WriteTimeout)
	if f.direct {
		_ = c.ws.NetConn().SetWriteDeadline(deadline)
	} else {
		_ = c.ws.SetWriteDeadline(deadline)
	}
	for i := 0; i < len(items); {
		if items[i].closeCode != 0 {
			if err := f.flush(); err != nil {
				return err
			}
			c.closeWith(items[i].closeCode, string(items[i].data))
			return nil
		}
		if items[i].sub == nil {
			if c.isClosing() {
				break
			}
			if err := f.add(items[i].data); err != nil {
				return err
			}
			i++
			continue
		}
		j := i
		for j < len(items) && items[j].sub != nil && items[j].closeCode == 0 {
			j++
		}
		if err := c.writeEntries(f, items[i:j]); err != nil {
			return err
		}
		i = j
	}
	return f.flush()
}

// writeEntries writes a run of live entries, one changes frame per
// subscription (a new frame once PageSize entries are reached), in each
// subscription's order. It consumes the run: written items have sub set to
// nil. Each frame is assembled in one buffer and written as one WebSocket
// message (gorilla sends it with a single write system call whatever its
// size), or, on a direct socket, appended to the drain's frames.
func (c *conn) writeEntries(f *frames, run []outItem) error {
	for i := range run {
		s := run[i].sub
		if s == nil {
			continue
		}
		if s.isClosed() || c.isClosing() {
			for k := i; k < len(run); k++ {
				if run[k].sub == s {
					run[k].sub = nil
				}
			}
			continue
		}
		// The cursor precedes the entries, so find the frame's extent first:
		// whole batches of s, while they fit in a page.
		var last feed.Position
		n, end := 0, i
		for k := i; k < len(run); k++ {
			if run[k].sub != s {
				continue
			}
			if n > 0 && n+run[k].live.len() > c.e.cfg.PageSize {
				break
			}
			last, n, end = run[k].live.last(), n+run[k].live.len(), k+1
		}
		b, at := f.begin()
		b = protocol.AppendLiveChangesStart(b, s.idJSON, c.e.epoch, uint64(last))
		sep := false
		for k := i; k < end; k++ {
			if run[k].sub != s {
				continue
			}
			for _, e := range run[k].live.entries {
				if sep {
					b = append(b, ',')
				}
				b = append(b, e...)
				sep = true
			}
			run[k].sub = nil
		}
		b = protocol.AppendChangesEnd(b)
		size := len(b) - at
		if err := f.end(b, at); err != nil {
			return err
		}
		c.e.stats.delivered.Add(int64(n))
		c.e.cfg.Observer.Delivered(n, size)
		// Batches of s beyond the page still carry s and get the next frame
		// when the loop reaches them.
	}
	return nil
}

// writeBuffers hold live changes frames while they are written; buffers
// grown past maxPooledWrite are left to the collector.
var writeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledWrite = 1 << 20

// Socket is an upgraded WebSocket connection, the engine's side of one
// client. Message types are RFC 6455's (1 text, 8 close, 9 ping, 10 pong).
// gorilla/websocket's *Conn satisfies it as it is; package middleware
// upgrades HTTP requests and hands the result to Engine.Accept, so an app
// rarely meets this type. The engine calls NextReader from one goroutine
// and the write methods from one other, as gorilla requires.
type Socket interface {
	NextReader() (messageType int, r io.Reader, err error)
	WriteMessage(messageType int, data []byte) error
	WriteControl(messageType int, data []byte, deadline time.Time) error
	SetReadLimit(limit int64)
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	SetPongHandler(h func(appData string) error)
	// NetConn returns the underlying connection, closed to end a
	// connection at once.
	NetConn() net.Conn
	Close() error
}
