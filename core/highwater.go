package core

import (
	"context"
	"sync"

	"github.com/tidesync/tide/core/feed"
)

// headBatcher shares feed head queries between callers that ask at about
// the same time. A caller waits for a query that starts after it asked, so
// the answer is at least the head at the moment of asking (what a replay
// high-water needs), yet a reconnect storm costs one query per wave, not
// one per client, and every client of a wave gets the same high-water, so
// their replays of a scope coalesce.
type headBatcher struct {
	mu      sync.Mutex
	next    *headWave // the wave that the next query will answer
	running bool      // a query loop is running
}

type headWave struct {
	done chan struct{}
	pos  feed.Position
	err  error
}

// head returns the feed's head as of a query that started after the call.
func (e *Engine) head(ctx context.Context) (feed.Position, error) {
	b := &e.heads
	b.mu.Lock()
	if b.next == nil {
		b.next = &headWave{done: make(chan struct{})}
	}
	w := b.next
	if !b.running {
		b.running = true
		e.wg.Add(1)
		go e.headLoop()
	}
	b.mu.Unlock()
	select {
	case <-w.done:
		return w.pos, w.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// headLoop answers waves until none is waiting.
func (e *Engine) headLoop() {
	defer e.wg.Done()
	b := &e.heads
	for {
		b.mu.Lock()
		w := b.next
		b.next = nil
		if w == nil {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		w.pos, w.err = e.feed.Head(e.ctx)
		close(w.done)
	}
}
