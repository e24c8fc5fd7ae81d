package core

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core/feed"
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
	limit       int
	items       []outItem
	spare       []outItem
	bytes       int
	writing     bool            // a writer goroutine is running
	pingDue     bool            // the pinger asked for a ping
	room        chan struct{}   // closed when bytes are freed; created by waiters
	desynced    []*subscription // subscriptions to replay once the queue drains
	drops       int
	closeQueued bool // a close item is queued: nothing more is accepted
	kickQueued  bool // the fan-out starts the writer after its batch
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
// instead: the connection is added to it (once) and its writer is started
// after the whole batch of changes is queued, so a burst of changes goes
// out as one frame per subscription rather than racing the writer.
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

// kickQueued starts the writers of connections collected by trySendEntry.
func kickQueued(kicks []*conn) {
	for _, c := range kicks {
		c.mu.Lock()
		c.out.kickQueued = false
		if len(c.out.items) > 0 {
			c.kickLocked()
		}
		c.mu.Unlock()
	}
}

// noteDrop records that a live entry of s was dropped. Past MaxDrops the
// connection is closed with 1013. The caller holds s.mu.
func (c *conn) noteDrop(s *subscription) {
	c.e.stats.dropped.Add(1)
	c.mu.Lock()
	c.out.drops++
	over := c.out.drops > c.e.cfg.MaxDrops
	c.out.desynced = append(c.out.desynced, s)
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

// requestPing asks the writer to send a ping.
func (c *conn) requestPing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.out.pingDue = true
	c.kickLocked()
}

// kickLocked starts the writer goroutine if it is not running.
func (c *conn) kickLocked() {
	if c.out.writing {
		return
	}
	c.out.writing = true
	c.e.wg.Add(1)
	go c.writeLoop()
}

// writeLoop drains the queue and exits when it is empty, so an idle
// connection has no writer goroutine.
func (c *conn) writeLoop() {
	defer c.e.wg.Done()
	for {
		c.mu.Lock()
		ping := c.out.pingDue
		c.out.pingDue = false
		items := c.out.items
		c.out.items = c.out.spare[:0]
		var resync []*subscription
		if c.out.bytes <= c.out.limit/2 && len(c.out.desynced) > 0 {
			resync = c.out.desynced
			c.out.desynced = nil
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
		if err != nil {
			c.kill()
			c.mu.Lock()
			c.out.writing = false
			c.mu.Unlock()
			return
		}
	}
}

// writeItems writes queued items in order, merging each run of live entries
// into one changes frame per subscription.
func (c *conn) writeItems(items []outItem, ping bool) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.e.cfg.WriteTimeout))
	if ping {
		if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.e.cfg.WriteTimeout)); err != nil {
			return err
		}
	}
	for i := 0; i < len(items); {
		if items[i].closeCode != 0 {
			c.closeWith(items[i].closeCode, string(items[i].data))
			return nil
		}
		if items[i].sub == nil {
			if c.isClosing() {
				return nil
			}
			if err := c.ws.WriteMessage(websocket.TextMessage, items[i].data); err != nil {
				return err
			}
			i++
			continue
		}
		j := i
		for j < len(items) && items[j].sub != nil && items[j].closeCode == 0 {
			j++
		}
		if err := c.writeEntries(items[i:j]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// writeEntries writes a run of live entries, one changes frame per
// subscription (a new frame once PageSize entries are reached), in each
// subscription's order. It consumes the run: written items have sub set to
// nil. Each frame is assembled in one pooled buffer and written as one
// WebSocket message, which gorilla sends with a single write system call
// whatever its size.
func (c *conn) writeEntries(run []outItem) error {
	bp := writeBuffers.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledWrite {
			writeBuffers.Put(bp)
		}
	}()
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
		b := protocol.AppendLiveChangesStart((*bp)[:0], s.idJSON, c.e.epoch, uint64(last))
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
		*bp = b
		if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
			return err
		}
		c.e.stats.delivered.Add(int64(n))
		// Batches of s beyond the page still carry s and get the next frame
		// when the loop reaches them.
	}
	return nil
}

// writeBuffers hold live changes frames while they are written; buffers
// grown past maxPooledWrite are left to the collector.
var writeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledWrite = 1 << 20
