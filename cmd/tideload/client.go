package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// The load client shares the machine's cores with the server, so it stays
// lean: it reads each message with NextReader into a buffer the connection
// reuses, counts entries by searching for `{"op":` instead of decoding
// JSON, parses keys only where latency needs them, and updates its
// counters once per message.

var clockBase = time.Now()

// clock is this process's monotonic clock in nanoseconds. The writer and
// the clients of a run live in this one process, so latencies are
// differences of one clock.
func clock() int64 { return int64(time.Since(clockBase)) }

var (
	patEntry  = []byte(`{"op":`)
	patKey    = []byte(`"key":"`)
	patCursor = []byte(`"cursor":"`)
	// patMessage counts app channel messages: one per message frame.
	patMessage = []byte(`"type":"message"`)
)

const frameTypeOffset = len(`{"v":1,"type":"`)

// frame kinds the client tells apart.
const (
	kindOther = iota
	kindChanges
	kindCaughtUp
	kindBad     // error or reset
	kindMessage // an app channel message
	kindReset   // a reset, with dialOpts.resetOK
)

// loadConn is one load-client connection and the counters of its reader
// goroutine.
type loadConn struct {
	i  int
	ws *websocket.Conn

	entries  atomic.Int64 // entries received (upserts and deletes)
	frames   atomic.Int64 // changes frames received
	bytes    atomic.Int64 // bytes of changes frames
	caught   atomic.Int64 // caught-up frames received
	caughtAt atomic.Int64 // clock() when the first caught-up arrived
	replayed atomic.Int64 // entries received before the first caught-up
	bad      atomic.Int64 // error and reset frames
	resets   atomic.Int64 // reset frames, with dialOpts.resetOK
	resetOK  bool
	badMsg   atomic.Pointer[string]
	dups     atomic.Int64 // latency: keys received twice

	// Owned by the reader goroutine; read by others only after done.
	cursor  []byte  // newest cursor received (changes or caught-up)
	recv    []int64 // latency: clock() at arrival, indexed by key; nil unless tracking
	readErr error
	done    chan struct{}
}

// dialOpts says how a load connection connects and what it subscribes to.
type dialOpts struct {
	path    string // "/tide/ws" (tide: hello + subscribe) or "/ws" (baseline: nothing to send)
	tide    bool
	auth    bool   // send the principal headers the server child reads
	scope   string // tide: the scope to subscribe to
	topic   string // tide: subscribe to this app channel topic instead of a scope
	cursor  string // tide: resume after this cursor ("" for a snapshot)
	limit   int    // tide: page size asked for (0: server default)
	round   int    // picks the source addresses, so a second wave of connections does not reuse the first wave's ports
	readBuf int    // read chunk size
	track   int    // latency: track arrival of keys 0..track-1
	// resetOK counts reset frames (resets) instead of failing on them: a
	// replay of a backlog large for its scope is a reset and a snapshot.
	resetOK bool
}

// sourceAddr spreads connections over loopback source addresses
// 127.0.<round>.2…, 32 of them, so no address comes near its ~28k
// ephemeral ports even past 100k connections or across runs.
func sourceAddr(round, i int) *net.TCPAddr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, byte(round), byte(2+i%32))}
}

// dialLoad opens connection i and, for tide, sends hello and subscribe.
// Its reader goroutine starts at once.
func dialLoad(ctx context.Context, addr string, i int, o dialOpts) (*loadConn, error) {
	d := websocket.Dialer{
		NetDialContext:   (&net.Dialer{LocalAddr: sourceAddr(o.round, i), Timeout: 30 * time.Second}).DialContext,
		HandshakeTimeout: 30 * time.Second,
		ReadBufferSize:   1024,
		WriteBufferSize:  512,
	}
	h := http.Header{}
	if o.auth {
		h.Set(hdrUser, "u"+strconv.Itoa(i))
		h.Set(hdrScopes, o.scope)
		h.Set(hdrTenant, tenant)
	}
	ws, _, err := d.DialContext(ctx, "ws://"+addr+o.path, h)
	if err != nil {
		return nil, err
	}
	c := &loadConn{i: i, ws: ws, done: make(chan struct{}), resetOK: o.resetOK}
	c.caughtAt.Store(-1)
	if o.track > 0 {
		c.recv = make([]int64, o.track)
	}
	if o.tide {
		sub := []byte(`{"v":1,"type":"subscribe","id":"1","resource":"items","conditions":{"scope":`)
		sub = strconv.AppendQuote(sub, o.scope)
		sub = append(sub, '}')
		if o.topic != "" {
			sub = append([]byte(`{"v":1,"type":"topic-subscribe","topic":`), strconv.Quote(o.topic)...)
		}
		if o.cursor != "" {
			sub = append(sub, `,"cursor":`...)
			sub = strconv.AppendQuote(sub, o.cursor)
		}
		if o.limit > 0 {
			sub = append(sub, `,"limit":`...)
			sub = strconv.AppendInt(sub, int64(o.limit), 10)
		}
		sub = append(sub, '}')
		_ = ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"hello","build":"tideload"}`)); err != nil {
			ws.Close()
			return nil, err
		}
		if err := ws.WriteMessage(websocket.TextMessage, sub); err != nil {
			ws.Close()
			return nil, err
		}
	}
	go c.readLoop(max(o.readBuf, 512))
	return c, nil
}

// readLoop reads messages until the connection fails or is closed.
func (c *loadConn) readLoop(bufSize int) {
	defer close(c.done)
	buf := make([]byte, bufSize)
	var whole []byte // latency: the whole message, reused
	for {
		_, r, err := c.ws.NextReader()
		if err != nil {
			c.readErr = err
			return
		}
		now := clock()
		n, err := io.ReadAtLeast(r, buf, min(len(buf), 256))
		eof := false
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			eof = true
		case err != nil:
			c.readErr = err
			return
		}
		head := buf[:n]
		kind := frameKind(head)
		if kind == kindBad && c.resetOK && bytes.HasPrefix(head[frameTypeOffset:], []byte(`reset"`)) {
			kind = kindReset
			c.resets.Add(1)
		}
		switch kind {
		case kindChanges, kindCaughtUp:
			if i := bytes.Index(head, patCursor); i >= 0 {
				v := head[i+len(patCursor):]
				if j := bytes.IndexByte(v, '"'); j >= 0 {
					c.cursor = append(c.cursor[:0], v[:j]...)
				}
			}
		case kindBad:
			s := string(head)
			c.badMsg.Store(&s)
			c.bad.Add(1)
		}
		if kind == kindCaughtUp {
			if c.caught.Add(1) == 1 {
				c.replayed.Store(c.entries.Load())
				c.caughtAt.Store(now)
			}
		}
		if kind != kindChanges && kind != kindMessage {
			if !eof {
				if _, err := io.Copy(io.Discard, r); err != nil {
					c.readErr = err
					return
				}
			}
			continue
		}
		var entries, size int
		pat := patEntry
		if kind == kindMessage {
			pat = patMessage
		}
		if c.recv != nil || kind == kindMessage {
			whole = append(whole[:0], head...)
			if !eof {
				var err error
				if whole, err = readRest(r, whole); err != nil {
					c.readErr = err
					return
				}
			}
			entries, size = bytes.Count(whole, pat), len(whole)
			if c.recv != nil {
				c.noteKeys(whole, now)
			}
		} else {
			entries, size, err = countStream(r, buf, n, eof)
			if err != nil {
				c.readErr = err
				return
			}
		}
		c.entries.Add(int64(entries))
		c.frames.Add(1)
		c.bytes.Add(int64(size))
	}
}

// countStream counts patEntry in a message whose first n bytes are in
// buf, reading the rest through buf. A match may straddle two reads: the
// last len(pat)-1 bytes of each read are joined with the first
// len(pat)-1 of the next, and any match in that join crosses the seam
// (each side is shorter than the pattern), so nothing is counted twice.
func countStream(r io.Reader, buf []byte, n int, eof bool) (count, size int, err error) {
	const keep = 5 // len(patEntry) - 1
	var tail [keep]byte
	var join [2 * keep]byte
	chunk := buf[:n]
	tl := 0
	for {
		size += len(chunk)
		count += bytes.Count(chunk, patEntry)
		if tl > 0 {
			j := copy(join[:], tail[:tl])
			j += copy(join[j:], chunk[:min(len(chunk), keep)])
			count += bytes.Count(join[:j], patEntry)
		}
		// tail = the last keep bytes of tail+chunk
		if len(chunk) >= keep {
			tl = copy(tail[:], chunk[len(chunk)-keep:])
		} else {
			all := append(tail[:tl:tl], chunk...)
			tl = copy(tail[:], all[max(0, len(all)-keep):])
		}
		if eof {
			return count, size, nil
		}
		m, rerr := r.Read(buf)
		chunk = buf[:m]
		if rerr == io.EOF {
			eof = true
		} else if rerr != nil {
			return count, size, rerr
		}
	}
}

// noteKeys records the arrival time of every entry key of a changes frame.
func (c *loadConn) noteKeys(frame []byte, now int64) {
	for {
		i := bytes.Index(frame, patKey)
		if i < 0 {
			return
		}
		frame = frame[i+len(patKey):]
		k, j := 0, 0
		for j < len(frame) && frame[j] >= '0' && frame[j] <= '9' && j < 12 {
			k = k*10 + int(frame[j]-'0')
			j++
		}
		if j == 0 || j >= len(frame) || frame[j] != '"' || k >= len(c.recv) {
			continue
		}
		if c.recv[k] != 0 {
			c.dups.Add(1)
			continue
		}
		c.recv[k] = max(now, 1)
	}
}

func frameKind(head []byte) int {
	if len(head) <= frameTypeOffset || !bytes.HasPrefix(head, []byte(`{"v":1,"type":"`)) {
		return kindOther
	}
	t := head[frameTypeOffset:]
	switch {
	case bytes.HasPrefix(t, []byte(`changes"`)):
		return kindChanges
	case bytes.HasPrefix(t, []byte(`caught-up"`)), bytes.HasPrefix(t, []byte(`topic-subscribed"`)):
		return kindCaughtUp
	case bytes.HasPrefix(t, []byte(`message"`)):
		return kindMessage
	case bytes.HasPrefix(t, []byte(`error"`)), bytes.HasPrefix(t, []byte(`reset"`)):
		return kindBad
	}
	return kindOther
}

// close cuts the connection (no close handshake: the server sees the TCP
// connection end, as when a network drops) and waits for the reader.
func (c *loadConn) close() {
	_ = c.ws.Close()
	<-c.done
}

// fleet is a set of load connections.
type fleet []*loadConn

// openFleet opens n connections, at most conc at a time, calling dial for
// each. On error it closes what it opened.
func openFleet(ctx context.Context, n, conc int, dial func(ctx context.Context, i int) (*loadConn, error)) (fleet, error) {
	conns := make(fleet, n)
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, max(conc, 1))
	var wg sync.WaitGroup
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := dial(ctx, i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("connection %d: %w", i, err)
			}
			conns[i] = c
		}(i)
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		conns.close()
		return nil, firstErr
	}
	return conns, nil
}

// close closes every connection at once and waits for the readers.
func (f fleet) close() {
	for _, c := range f {
		if c != nil {
			_ = c.ws.Close()
		}
	}
	for _, c := range f {
		if c != nil {
			<-c.done
		}
	}
}

func (f fleet) sum(get func(*loadConn) int64) int64 {
	var s int64
	for _, c := range f {
		s += get(c)
	}
	return s
}

func (f fleet) entries() int64 { return f.sum(func(c *loadConn) int64 { return c.entries.Load() }) }
func (f fleet) frames() int64  { return f.sum(func(c *loadConn) int64 { return c.frames.Load() }) }
func (f fleet) bytes() int64   { return f.sum(func(c *loadConn) int64 { return c.bytes.Load() }) }

// caughtUp returns how many connections have received caught-up.
func (f fleet) caughtUp() int {
	n := 0
	for _, c := range f {
		if c.caught.Load() > 0 {
			n++
		}
	}
	return n
}

// failure returns the first error or reset frame received, or a reader
// that ended, as an error.
func (f fleet) failure() error {
	for _, c := range f {
		if c.bad.Load() > 0 {
			return fmt.Errorf("connection %d received %s", c.i, *c.badMsg.Load())
		}
		select {
		case <-c.done:
			return fmt.Errorf("connection %d ended: %v", c.i, c.readErr)
		default:
		}
	}
	return nil
}

// waitUntil polls cond every poll until it holds, the fleet fails, or ctx
// ends.
func waitUntil(ctx context.Context, f fleet, poll time.Duration, what string, cond func() bool) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for !cond() {
		if err := f.failure(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		}
	}
	return nil
}

var errTimeout = errors.New("the mode's -timeout expired")

// readRest appends the rest of a message from r to buf, growing it in
// place (a reused buffer keeps its capacity across messages).
func readRest(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
