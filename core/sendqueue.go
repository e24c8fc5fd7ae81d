package core

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/tidesync/tide/core/protocol"
)

// outItem is one queued write: a whole frame, or live entries of a
// subscription. Consecutive live entries are written as one changes frame
// per subscription, so a burst of changes costs one frame per socket, not
// one per change.
type outItem struct {
	sub       *subscription      // set for live entries
	live      liveBatch          // the live entries (shared: never modified)
	data      []byte             // the frame; the close reason for a close item
	closeCode protocol.CloseCode // nonzero: close the connection with this code after the items before it
}

func (it *outItem) size() int { return len(it.data) + it.live.bytes }

// outbound is a connection's bounded send queue. Its fields are guarded by
// the connection's mutex.
type outbound struct {
	limit    int
	items    []outItem
	spare    []outItem
	bytes    int
	writing  bool          // a writer goroutine is running
	pingDue  bool          // the pinger asked for a WebSocket ping
	welcomed bool          // welcome is queued: the heartbeat's ping frames may follow it
	room     chan struct{} // closed when bytes are freed; created by waiters
	// resyncDue: a subscription of this connection was desynced; once the
	// queue drains, the writer resyncs every subscription whose state says
	// so. Which ones is kept by the subscriptions alone.
	resyncDue   bool
	drops       int
	closeQueued bool         // a close item is queued: nothing more is accepted
	kickQueued  bool         // the fan-out writes (or starts the writer) after its batch: flushKicked
	direct      directSocket // the socket's direct write path, if it has one (socketdirect.go)
}

var errConnClosing = errors.New("tide: connection closing")

func (o *outbound) init(limit int) { o.limit = limit }

// fits reports whether n more bytes may be queued. An empty queue takes
// anything, so one large page can always be sent.
func (o *outbound) fits(n int) bool { return o.bytes == 0 || o.bytes+n <= o.limit }

func (o *outbound) push(it outItem) {
	o.items = append(o.items, it)
	o.bytes += it.size()
}

func (o *outbound) discard() {
	clear(o.items)
	o.items = o.items[:0]
	o.bytes = 0
	o.wake()
}

func (o *outbound) wake() {
	if o.room != nil {
		close(o.room)
		o.room = nil
	}
}

// sendFrame queues a small control frame regardless of the byte limit: such
// frames are bounded by the number of client requests, not by traffic.
func (c *conn) sendFrame(frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.out.closeQueued {
		return
	}
	c.out.push(outItem{data: frame})
	c.kickLocked()
}

// sendFrameWait queues a replay page, waiting while the queue is full. It is
// how replay is paced by the socket instead of by memory.
func (c *conn) sendFrameWait(ctx context.Context, frame []byte) error {
	for {
		c.mu.Lock()
		if c.closing || c.out.closeQueued {
			c.mu.Unlock()
			return errConnClosing
		}
		if c.out.fits(len(frame)) {
			c.out.push(outItem{data: frame})
			c.kickLocked()
			c.mu.Unlock()
			return nil
		}
		if c.out.room == nil {
			c.out.room = make(chan struct{})
		}
		room := c.out.room
		c.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// trySendBatch queues live entries if they fit. The caller holds s.mu.
//
// With kicks nil the writer is started at once. The fan-out passes a list
// instead: the connection is added to it (once) and written after the
// whole batch of changes is queued (hub.flushKicked), so a burst of
// changes goes out as one frame per subscription and one write per
// connection.
func (c *conn) trySendBatch(s *subscription, b liveBatch, kicks *[]*conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.out.closeQueued {
		return true // the connection is going away; nothing to resync
	}
	if !c.out.fits(b.bytes) {
		return false
	}
	c.out.push(outItem{sub: s, live: b})
	switch {
	case kicks == nil:
		c.kickLocked()
	case !c.out.writing && !c.out.kickQueued:
		c.out.kickQueued = true
		*kicks = append(*kicks, c)
	}
	return true
}

// flushKicked writes the queues of the connections a dispatch collected
// (trySendBatch): each from the fan-out's own goroutines with one
// non-blocking write where the socket allows it (flushDirect), else by
// starting its writer. Past flushPart connections the list is split
// between the dispatching goroutine and up to GOMAXPROCS-1 flushers, and
// flushKicked returns once every part is done, so the next batch is
// dispatched after this one's writes.
func (h *hub) flushKicked(kicks []*conn) {
	parts := min(runtime.GOMAXPROCS(0), (len(kicks)+flushPart-1)/flushPart)
	if parts <= 1 {
		for _, c := range kicks {
			c.flushDirect(&h.flushBuf)
		}
		return
	}
	h.startFlushers.Do(func() {
		h.flushJobs = make(chan flushJob)
		for range runtime.GOMAXPROCS(0) - 1 {
			h.e.wg.Add(1)
			go h.flusher()
		}
	})
	per := (len(kicks) + parts - 1) / parts
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Add(1)
		job := flushJob{conns: kicks[p*per : min(len(kicks), (p+1)*per)], wg: &wg}
		select {
		case h.flushJobs <- job:
		case <-h.e.ctx.Done():
			job.run(&h.flushBuf)
		}
	}
	for _, c := range kicks[:per] {
		c.flushDirect(&h.flushBuf)
	}
	wg.Wait()
}

// flushPart is the fewest connections a flusher is handed: below it,
// waking another goroutine costs more than it saves.
const flushPart = 128

// flushJob is a part of a dispatch's connections for a flusher.
type flushJob struct {
	conns []*conn
	wg    *sync.WaitGroup
}

func (j flushJob) run(buf *[]byte) {
	defer j.wg.Done()
	for _, c := range j.conns {
		c.flushDirect(buf)
	}
}

// flusher runs flush jobs until the engine stops.
func (h *hub) flusher() {
	defer h.e.wg.Done()
	var buf []byte
	for {
		select {
		case j := <-h.flushJobs:
			j.run(&buf)
		case <-h.e.ctx.Done():
			return
		}
	}
}

// noteDrop records that a live entry of s was dropped. Past MaxDrops the
// connection is closed with 1013. The caller holds s.mu.
func (c *conn) noteDrop(s *subscription) {
	c.e.stats.dropped.Add(1)
	c.e.cfg.Observer.Dropped()
	c.mu.Lock()
	c.out.drops++
	over := c.out.drops > c.e.cfg.MaxDrops
	c.out.resyncDue = true
	c.kickLocked()
	c.mu.Unlock()
	if over {
		go c.closeWith(protocol.CloseOverloaded, "backpressure")
	}
}

// closeAfterFlush queues a close with code after the frames already queued,
// so an error frame explaining the close reaches the client first.
func (c *conn) closeAfterFlush(code protocol.CloseCode, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.out.closeQueued {
		return
	}
	c.out.closeQueued = true
	c.out.items = append(c.out.items, outItem{closeCode: code, data: []byte(reason)})
	c.kickLocked()
}

// requestPing asks the writer to send a WebSocket ping and, once the
// connection is welcomed, queues a ping frame: a client that hears nothing
// for two heartbeats takes the connection for dead. The ping frame is
// queued like any frame, after those before it, so it never precedes
// welcome.
func (c *conn) requestPing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.out.pingDue = true
	if c.out.welcomed && !c.out.closeQueued {
		c.out.push(outItem{data: pingFrame})
	}
	c.kickLocked()
}

// pingFrame is the heartbeat's frame, shared by every connection (frames
// are never modified once queued).
var pingFrame = protocol.Ping()

// sendWelcome queues welcome; the heartbeat's ping frames may follow it.
func (c *conn) sendWelcome(frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.out.closeQueued {
		return
	}
	c.out.push(outItem{data: frame})
	c.out.welcomed = true
	c.kickLocked()
}

// kickLocked starts the writer goroutine if it is not running: a parked
// writer of the engine's pool takes the connection if one is waiting,
// else a new one starts.
func (c *conn) kickLocked() {
	if c.out.writing {
		return
	}
	c.out.writing = true
	select {
	case c.e.hub.writers <- c:
	default:
		c.e.wg.Add(1)
		go c.e.hub.writer(c)
	}
}

// writerPark is how long a writer goroutine waits for another connection
// to write for before it exits. A connection has no goroutine of its own
// for writing; the engine's writers drain one connection's queue at a
// time and then park, so the next wave of fan-out hands each connection
// to a goroutine that exists already, with its stack already grown,
// instead of starting (and growing) a goroutine per connection and wave.
// An idle server keeps none of them beyond this.
const writerPark = 2 * time.Second

// maxParkedWriters bounds the writers waiting for work; beyond it a
// writer with nothing to do exits at once.
const maxParkedWriters = 4096

// writer drains c's queue, then waits (parked, up to writerPark) for the
// next connection a kick hands it.
func (h *hub) writer(c *conn) {
	defer h.e.wg.Done()
	var t *time.Timer
	for {
		c.writeLoop()
		if h.parked.Add(1) > maxParkedWriters {
			h.parked.Add(-1)
			return
		}
		if t == nil {
			t = time.NewTimer(writerPark)
		} else {
			t.Reset(writerPark)
		}
		select {
		case c = <-h.writers:
			h.parked.Add(-1)
		case <-t.C:
			h.parked.Add(-1)
			return
		case <-h.e.ctx.Done():
			h.parked.Add(-1)
			t.Stop()
			return
		}
	}
}
