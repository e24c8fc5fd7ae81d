package memfeed

import (
	"context"
	"sync"

	"github.com/tidesync/tide/core/feed"
)

var _ feed.Broadcaster = (*Feed)(nil)

// maxPendingBroadcasts bounds the broadcasts queued for one watcher that
// does not keep up; past it new ones are dropped for that watcher, as a
// network bus would lose them.
const maxPendingBroadcasts = 1 << 16

// broadcasts are the feed's broadcast watchers.
type broadcasts struct {
	mu       sync.Mutex
	watchers map[*castWatcher]struct{}
}

// castWatcher is one WatchBroadcasts call: its queue and the goroutine
// draining it.
type castWatcher struct {
	mu      sync.Mutex
	pending []feed.Broadcast
	wake    chan struct{} // capacity 1
}

// Broadcast implements feed.Broadcaster: it queues b for every watcher of
// the feed, in process. b is checked against feed.MaxBroadcastBytes like a
// network bus would check it.
func (f *Feed) Broadcast(ctx context.Context, b feed.Broadcast) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := feed.EncodeBroadcast(b); err != nil {
		return err
	}
	cs := &f.cast
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for w := range cs.watchers {
		w.mu.Lock()
		if len(w.pending) < maxPendingBroadcasts {
			w.pending = append(w.pending, b)
		}
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// WatchBroadcasts implements feed.Broadcaster.
func (f *Feed) WatchBroadcasts(ctx context.Context, fn func(feed.Broadcast)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := &castWatcher{wake: make(chan struct{}, 1)}
	cs := &f.cast
	cs.mu.Lock()
	if cs.watchers == nil {
		cs.watchers = map[*castWatcher]struct{}{}
	}
	cs.watchers[w] = struct{}{}
	cs.mu.Unlock()
	go func() {
		defer func() {
			cs.mu.Lock()
			delete(cs.watchers, w)
			cs.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
			w.mu.Lock()
			batch := w.pending
			w.pending = nil
			w.mu.Unlock()
			for _, b := range batch {
				if ctx.Err() != nil {
					return
				}
				fn(b)
			}
		}
	}()
	return nil
}
