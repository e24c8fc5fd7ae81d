package core

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// replayCache is what catch-up reads through instead of the feed: the
// recent changes the tailer dispatched (served from memory), and the feed
// reads in progress that other subscriptions join. The fan-out feeds it;
// catch-up reads from it.
type replayCache struct {
	recent *history
	coalescer
}

func newReplayCache(size int) replayCache { return replayCache{recent: newHistory(size)} }

// coalescer shares feed reads between subscriptions: when many clients of
// one scope catch up at once (a reconnect storm, a deploy), their replay
// pages are mostly the same rows. A replay read in progress for a scope is
// joined by any subscription whose cursor lies inside the range it reads:
// it takes the rows after its own cursor and up to its own high-water, and
// continues from where the read ended. Pages then converge: the database
// runs replay queries per page in proportion to the scopes, not the
// clients. Identical snapshot page reads are shared the same way.
//
// Results are shared read-only: changes are never modified after a feed
// returns them.
type coalescer struct {
	mu        sync.Mutex
	replays   map[replayKey][]*replayFlight
	snapshots map[snapshotKey]*flight[feed.SnapshotPage]
}

type replayKey struct {
	scope string
	limit int
}

// replayFlight is one replay read in progress of (after, until].
type replayFlight struct {
	after, until feed.Position
	done         chan struct{}
	changes      []feed.Change
	err          error
	waiters      int // guarded by coalescer.mu
}

// replaySlice is what one subscription takes from a replay read.
type replaySlice struct {
	changes []feed.Change // the rows in (after, until] of the subscription
	next    feed.Position // every change at or below next has been read
	done    bool          // nothing more up to the subscription's until
}

// sliceFor cuts the read's result for a subscription reading (after,
// until]. ok is false if the read cannot serve it (its rows end before
// after).
func (f *replayFlight) sliceFor(after, until feed.Position, limit int) (replaySlice, bool) {
	full := len(f.changes) == limit
	covered := f.until // a short page read everything up to its until
	if full {
		covered = f.changes[len(f.changes)-1].Pos
	}
	if covered <= after && !(covered == f.until && covered >= until) {
		return replaySlice{}, false
	}
	lo := 0
	for lo < len(f.changes) && f.changes[lo].Pos <= after {
		lo++
	}
	hi := lo
	for hi < len(f.changes) && f.changes[hi].Pos <= until {
		hi++
	}
	next := min(max(covered, after), until)
	return replaySlice{changes: f.changes[lo:hi], next: next, done: next >= until}, true
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
	c := &e.cache.coalescer
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

// sharedReplay reads the changes of q.Scope in (q.After, q.Until], at most
// q.Limit, joining a read of the same scope already in progress when that
// read covers q.After. The read runs under the engine's context, so a caller
// that gives up does not fail the others.
func (e *Engine) sharedReplay(ctx context.Context, q feed.ReplayQuery) (replaySlice, error) {
	c := &e.cache.coalescer
	key := replayKey{q.Scope.Key(), q.Limit}
	c.mu.Lock()
	for _, f := range c.replays[key] {
		if f.after > q.After || f.until <= q.After {
			continue
		}
		f.waiters++
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return replaySlice{}, ctx.Err()
		}
		if f.err != nil && (q.After == f.after || !errors.Is(f.err, feed.ErrCursorExpired)) {
			return replaySlice{}, f.err
		}
		// A read that started below the retained floor says nothing of a
		// cursor above it: that one reads on its own.
		if sl, ok := f.sliceFor(q.After, q.Until, q.Limit); ok && f.err == nil {
			e.stats.replayShared.Add(1)
			return sl, nil
		}
		c.mu.Lock()
		break // it ended before our cursor: read on our own
	}
	f := &replayFlight{after: q.After, until: q.Until, done: make(chan struct{})}
	if c.replays == nil {
		c.replays = map[replayKey][]*replayFlight{}
	}
	c.replays[key] = append(c.replays[key], f)
	c.mu.Unlock()

	e.stats.replayQueries.Add(1)
	f.changes, f.err = e.feed.Replay(e.ctx, q)
	c.mu.Lock()
	fs := c.replays[key]
	if i := slices.Index(fs, f); i >= 0 {
		fs = slices.Delete(fs, i, i+1)
	}
	if len(fs) == 0 {
		delete(c.replays, key)
	} else {
		c.replays[key] = fs
	}
	c.mu.Unlock()
	close(f.done)
	if f.err != nil {
		return replaySlice{}, f.err
	}
	sl, _ := f.sliceFor(q.After, q.Until, q.Limit)
	return sl, nil
}

// sharedSnapshot is Feed.Snapshot, coalesced.
func (e *Engine) sharedSnapshot(ctx context.Context, q feed.SnapshotQuery) (feed.SnapshotPage, error) {
	key := snapshotKey{q.Scope.Key(), q.After, q.HasAfter, q.Limit}
	pg, led, err := share(ctx, e, &e.cache.snapshots, key, func(ctx context.Context) (feed.SnapshotPage, error) {
		return e.feed.Snapshot(ctx, q)
	})
	if led {
		e.stats.snapshotQueries.Add(1)
	} else {
		e.stats.snapshotShared.Add(1)
	}
	return pg, err
}

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

// read returns the changes of the scopes of ts in (after, until], or false
// if they are not all held.
func (h *history) read(ts targets, after, until feed.Position) ([]feed.Change, bool) {
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
		if ts.match(c) {
			out = append(out, *c)
		}
	}
	return out, true
}
