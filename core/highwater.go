package core

import (
	"context"
	"errors"
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

var errCursorAhead = errors.New("tide: cursor beyond the feed's head")

// highWater pins the high-water of a catch-up round that starts at from:
// the feed's head, read after the subscription registered its live interest with the fan-out, so
// every later change reaches it live. Subscriptions that ask at about the
// same time share one head query (head) and therefore the same
// high-water, so their replays of one scope are the same query and
// coalesce in the replay cache. A start beyond the head is a cursor from a
// database restored from a backup, which would skip every change up to it.
func (e *Engine) highWater(ctx context.Context, from feed.Position) (feed.Position, error) {
	head, err := e.head(ctx)
	if err != nil {
		return 0, err
	}
	if from > head {
		return 0, errCursorAhead
	}
	return head, nil
}
