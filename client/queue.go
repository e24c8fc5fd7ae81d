package client

import (
	"context"
	"sync"

	"github.com/tidesync/tide/core/protocol"
)

// frameQueue carries decoded frames from a connection's reader to the
// goroutine that applies them. It is unbounded so the reader never waits
// for a slow handler (it must keep answering pings); order is kept.
type frameQueue struct {
	mu      sync.Mutex
	items   []protocol.ServerFrame
	head    int
	closed  bool          // the reader ended: queued frames are still delivered
	aborted bool          // the session was dropped: queued frames are discarded
	ready   chan struct{} // capacity 1: signalled on every push and close
}

func newFrameQueue() *frameQueue { return &frameQueue{ready: make(chan struct{}, 1)} }

func (q *frameQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *frameQueue) push(f protocol.ServerFrame) {
	q.mu.Lock()
	if !q.closed && !q.aborted {
		q.items = append(q.items, f)
	}
	q.mu.Unlock()
	q.signal()
}

// close says no more frames will come.
func (q *frameQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// abort discards the queued frames and ends pop.
func (q *frameQueue) abort() {
	q.mu.Lock()
	q.aborted, q.closed = true, true
	clear(q.items)
	q.items, q.head = nil, 0
	q.mu.Unlock()
	q.signal()
}

// pop returns the next frame, waiting for one; false once the queue is
// aborted, closed and empty, or ctx has ended.
func (q *frameQueue) pop(ctx context.Context) (protocol.ServerFrame, bool) {
	for {
		if ctx.Err() != nil {
			return protocol.ServerFrame{}, false
		}
		q.mu.Lock()
		switch {
		case q.aborted:
			q.mu.Unlock()
			return protocol.ServerFrame{}, false
		case q.head < len(q.items):
			f := q.items[q.head]
			q.items[q.head] = protocol.ServerFrame{}
			q.head++
			if q.head == len(q.items) {
				q.items, q.head = q.items[:0], 0
			}
			q.mu.Unlock()
			return f, true
		case q.closed:
			q.mu.Unlock()
			return protocol.ServerFrame{}, false
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-ctx.Done():
		}
	}
}
