package core

import (
	"context"
	"sync"

	"github.com/tidesync/tide/core/feed"
)

// coalescer shares identical feed reads between subscriptions: when many
// clients of one scope catch up at once (a reconnect storm, a deploy), they
// resume from the same cursor with the same high-water (see Engine.head),
// so their replay pages are the same query. One of them runs it; the others
// wait for its result. The database then runs replay queries per page in
// proportion to the scopes, not the clients.
//
// Results are shared read-only: changes are never modified after a feed
// returns them.
type coalescer struct {
	mu        sync.Mutex
	replays   map[replayKey]*flight[[]feed.Change]
	snapshots map[snapshotKey]*flight[feed.SnapshotPage]
}

type replayKey struct {
	scope        string
	after, until feed.Position
	limit        int
}

type snapshotKey struct {
	scope    string
	after    string
	hasAfter bool
	limit    int
}

// flight is one read in progress and, once done is closed, its result.
type flight[T any] struct {
	done    chan struct{}
	val     T
	err     error
	waiters int // callers waiting for this read; guarded by coalescer.mu
}

// share runs read once for all callers asking for key at the same time. The
// read runs under the engine's context, so a caller that gives up (its
// client left) does not fail the others; a caller whose ctx ends stops
// waiting. led reports whether this caller ran the read.
func share[K comparable, T any](ctx context.Context, e *Engine, m *map[K]*flight[T], key K, read func(context.Context) (T, error)) (val T, led bool, err error) {
	c := &e.coalesce
	c.mu.Lock()
	if f, ok := (*m)[key]; ok {
		f.waiters++
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.val, false, f.err
		case <-ctx.Done():
			var zero T
			return zero, false, ctx.Err()
		}
	}
	if *m == nil {
		*m = map[K]*flight[T]{}
	}
	f := &flight[T]{done: make(chan struct{})}
	(*m)[key] = f
	c.mu.Unlock()

	f.val, f.err = read(e.ctx)
	c.mu.Lock()
	delete(*m, key)
	c.mu.Unlock()
	close(f.done)
	return f.val, true, f.err
}

// sharedReplay is Feed.Replay, coalesced.
func (e *Engine) sharedReplay(ctx context.Context, q feed.ReplayQuery) ([]feed.Change, error) {
	key := replayKey{q.Scope.Key(), q.After, q.Until, q.Limit}
	changes, led, err := share(ctx, e, &e.coalesce.replays, key, func(ctx context.Context) ([]feed.Change, error) {
		return e.feed.Replay(ctx, q)
	})
	if led {
		e.stats.replayQueries.Add(1)
	} else {
		e.stats.replayShared.Add(1)
	}
	return changes, err
}

// sharedSnapshot is Feed.Snapshot, coalesced.
func (e *Engine) sharedSnapshot(ctx context.Context, q feed.SnapshotQuery) (feed.SnapshotPage, error) {
	key := snapshotKey{q.Scope.Key(), q.After, q.HasAfter, q.Limit}
	pg, led, err := share(ctx, e, &e.coalesce.snapshots, key, func(ctx context.Context) (feed.SnapshotPage, error) {
		return e.feed.Snapshot(ctx, q)
	})
	if led {
		e.stats.snapshotQueries.Add(1)
	} else {
		e.stats.snapshotShared.Add(1)
	}
	return pg, err
}
