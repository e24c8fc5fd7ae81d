package core

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// history keeps the most recent changes the tailer dispatched, so a replay
// of a recent range (clients resuming after a network blip, a deploy, a
// reconnect storm) is served from memory instead of the database. It holds
// every change after floor up to top, in position order; changes are the
// tailer's own (shared, never modified).
type history struct {
	mu    sync.RWMutex
	ring  []feed.Change
	first int // index in ring of the oldest change
	n     int // changes held
	floor feed.Position
	top   feed.Position

	progress chan struct{} // closed and replaced whenever top advances; guarded by mu
}

func newHistory(size int) *history {
	return &history{ring: make([]feed.Change, size), progress: make(chan struct{})}
}

// add appends a dispatched batch; the oldest changes make room.
func (h *history) add(cs []feed.Change) {
	if len(cs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	size := len(h.ring)
	for _, c := range cs {
		if h.n == size {
			h.floor = h.ring[h.first].Pos
			h.ring[h.first] = feed.Change{}
			h.first = (h.first + 1) % size
			h.n--
		}
		h.ring[(h.first+h.n)%size] = c
		h.n++
	}
	h.top = max(h.top, cs[len(cs)-1].Pos)
	h.signal()
}

// reset forgets everything: changes up to pos count as dispatched without
// being held (the tailer's start, a jump over changes it did not see).
func (h *history) reset(pos feed.Position) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.ring)
	h.first, h.n = 0, 0
	h.floor, h.top = max(h.top, pos), max(h.top, pos)
	h.signal()
}

func (h *history) signal() {
	close(h.progress)
	h.progress = make(chan struct{})
}

// holds reports whether changes after pos are still held.
func (h *history) holds(pos feed.Position) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return pos >= h.floor
}

// await waits until the tailer has dispatched up to pos, at most wait long.
func (h *history) await(ctx context.Context, pos feed.Position, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		h.mu.RLock()
		top, ch := h.top, h.progress
		h.mu.RUnlock()
		if top >= pos {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// read returns the changes of sc in (after, until], or false if they are
// not all held.
func (h *history) read(sc feed.Scope, after, until feed.Position) ([]feed.Change, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if after < h.floor || until > h.top {
		return nil, false
	}
	var out []feed.Change
	size := len(h.ring)
	at := func(i int) *feed.Change { return &h.ring[(h.first+i)%size] }
	start := sort.Search(h.n, func(i int) bool { return at(i).Pos > after })
	for i := start; i < h.n; i++ {
		c := at(i)
		if c.Pos > until {
			break
		}
		if c.Resource == sc.Schema.Name && sc.Match(c.Scope) {
			out = append(out, *c)
		}
	}
	return out, true
}
