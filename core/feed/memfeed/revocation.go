package memfeed

import (
	"context"
	"sync"

	"github.com/tidesync/tide/core/feed"
)

var _ feed.Revocations = (*Feed)(nil)

// revocations are the feed's stored revocations and the doorbell of their
// watchers. They are kept for the feed's lifetime (they are few).
type revocations struct {
	mu   sync.Mutex
	list []feed.Revocation
	wake chan struct{} // closed and replaced on every publication
}

// PublishRevocation implements feed.Revocations: it stores r in memory and
// wakes every watcher of the feed at once, so the engines sharing the feed
// receive it without delay.
func (f *Feed) PublishRevocation(ctx context.Context, r feed.Revocation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rv := &f.revs
	rv.mu.Lock()
	defer rv.mu.Unlock()
	r.Seq = uint64(len(rv.list)) + 1
	rv.list = append(rv.list, r)
	if rv.wake != nil {
		close(rv.wake)
		rv.wake = nil
	}
	return nil
}

// WatchRevocations implements feed.Revocations.
func (f *Feed) WatchRevocations(ctx context.Context, fn func(r feed.Revocation, initial bool)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stored, wake := f.revs.since(0)
	for _, r := range stored {
		fn(r, true)
	}
	next := len(stored)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			var rs []feed.Revocation
			rs, wake = f.revs.since(next)
			for _, r := range rs {
				fn(r, false)
			}
			next += len(rs)
		}
	}()
	return nil
}

// since returns the revocations after the first n and the channel the next
// publication closes.
func (rv *revocations) since(n int) ([]feed.Revocation, <-chan struct{}) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.wake == nil {
		rv.wake = make(chan struct{})
	}
	return append([]feed.Revocation(nil), rv.list[n:]...), rv.wake
}
