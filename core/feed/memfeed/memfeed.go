package memfeed

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// DefaultMaxChanges is the retention limit used when Options.MaxChanges is
// zero.
const DefaultMaxChanges = 1_000_000

// Options configures a Feed. The zero value is ready to use.
type Options struct {
	// MaxChanges is the most changes the log retains. When a commit takes the
	// log past it, the oldest changes are dropped and Floor moves up; reading
	// after a position below Floor yields feed.ErrCursorExpired. Zero value
	// means 1,000,000 (DefaultMaxChanges); a negative value is treated as
	// zero.
	MaxChanges int
	// KeyRetention is how long idempotency keys of mutations are kept
	// (see Transact). Zero value: feed.DefaultKeyRetention (7 days).
	KeyRetention time.Duration
}

// Feed is an in-memory change feed. It implements feed.Feed and feed.Writer
// and is safe for concurrent use. Create it with New.
type Feed struct {
	epoch     string
	cursorKey [feed.CursorKeySize]byte // see CursorKey
	max       int

	mu     sync.RWMutex
	head   feed.Position
	floor  feed.Position              // changes at or below it are dropped
	log    []feed.Change              // positions floor+1 … head, ascending
	tables map[string]map[string]*row // resource → key → current row
	wake   chan struct{}              // closed and replaced after every commit

	tx   uint64      // Change.Tx of the commit being applied: its first position
	keys keyring     // idempotency keys of mutations (transact.go)
	revs revocations // revocation.go
	cast broadcasts  // broadcast.go
}

// row is the current state of one row.
type row struct {
	scope []string
	data  json.RawMessage
}

var (
	_ feed.Feed        = (*Feed)(nil)
	_ feed.Writer      = (*Feed)(nil)
	_ feed.Transactor  = (*Feed)(nil)
	_ feed.Counter     = (*Feed)(nil)
	_ feed.CursorKeyer = (*Feed)(nil)
)

// New returns an empty feed with a fresh random epoch.
func New(opts Options) *Feed {
	limit := opts.MaxChanges
	if limit <= 0 {
		limit = DefaultMaxChanges
	}
	f := &Feed{
		epoch:  newEpoch(),
		max:    limit,
		keys:   newKeyring(opts.KeyRetention),
		tables: make(map[string]map[string]*row),
		wake:   make(chan struct{}),
	}
	rand.Read(f.cursorKey[:]) // never returns an error (crypto/rand, Go 1.24+)
	return f
}

const epochAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newEpoch returns 16 random characters of [A-Za-z0-9], without modulo bias.
func newEpoch() string {
	const n = 16
	out := make([]byte, 0, n)
	var buf [32]byte
	for len(out) < n {
		rand.Read(buf[:]) // never returns an error (crypto/rand, Go 1.24+)
		for _, b := range buf {
			// 248 = 4*62: reject the top bytes so every letter is equally likely.
			if b < 248 && len(out) < n {
				out = append(out, epochAlphabet[int(b)%len(epochAlphabet)])
			}
		}
	}
	return string(out)
}

// Epoch returns the feed's random 16-character identifier, fixed for the
// lifetime of f.
func (f *Feed) Epoch() string { return f.epoch }

// Head returns the newest committed position, 0 before the first change.
func (f *Feed) Head(ctx context.Context) (feed.Position, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.head, nil
}

// Floor returns the position at or below which changes are no longer
// retained; 0 while nothing has been dropped. Reading after a position below
// it yields feed.ErrCursorExpired.
func (f *Feed) Floor() feed.Position {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.floor
}

// Prune drops every change at or below through (clamped to the head), moving
// Floor up to it; Floor never moves back. Current rows are unaffected. A
// blocked Tail is never below the head, so it is unaffected too.
func (f *Feed) Prune(through feed.Position) {
	f.mu.Lock()
	defer f.mu.Unlock()
	through = min(through, f.head)
	if through <= f.floor {
		return
	}
	f.dropThrough(through)
}

// dropThrough drops the changes at or below p. The caller holds f.mu.
func (f *Feed) dropThrough(p feed.Position) {
	k := sort.Search(len(f.log), func(i int) bool { return f.log[i].Pos > p })
	clear(f.log[:k]) // let dropped rows be collected before the array is
	f.log = f.log[k:]
	f.floor = p
}

// signal wakes every blocked Tail. The caller holds f.mu for writing.
func (f *Feed) signal() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// Apply writes muts atomically and in order, tagged with origin. Every
// mutation is validated first; if one is invalid Apply returns an error
// wrapping feed.ErrInvalidMutation and writes nothing. Scope and Row of a delete
// are ignored. Rows and scope values are copied, so the caller may reuse its
// buffers.
func (f *Feed) Apply(ctx context.Context, origin string, muts ...feed.Mutation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	prepared := make([]feed.Mutation, len(muts))
	for i, m := range muts {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%w %d of %d: %s", feed.ErrInvalidMutation, i+1, len(muts), err)
		}
		if m.Op == feed.OpUpsert {
			m.Scope = slices.Clone(m.Scope)
			m.Row = bytes.Clone(m.Row)
		} else {
			m.Scope, m.Row = nil, nil
		}
		prepared[i] = m
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	f.applyLocked(origin, prepared)
	return nil
}

// applyLocked applies validated mutations as one commit. The caller holds
// f.mu.
func (f *Feed) applyLocked(origin string, muts []feed.Mutation) {
	before := f.head
	f.tx = uint64(before) + 1
	for _, m := range muts {
		f.apply(origin, m)
	}
	if f.head == before {
		return
	}
	if len(f.log) > f.max {
		f.dropThrough(f.log[len(f.log)-f.max-1].Pos)
	}
	f.signal()
}

// apply applies one validated mutation. The caller holds f.mu.
func (f *Feed) apply(origin string, m feed.Mutation) {
	res := m.Schema.Name
	table := f.tables[res]
	old := table[m.Key]
	switch m.Op {
	case feed.OpUpsert:
		if table == nil {
			table = make(map[string]*row)
			f.tables[res] = table
		}
		var prev json.RawMessage // the row before, in the new scope
		if old != nil && !slices.Equal(old.scope, m.Scope) {
			f.append(feed.Change{Resource: res, Op: feed.OpDelete, Key: m.Key, Scope: old.scope, Row: old.data, Origin: origin})
		} else if old != nil {
			prev = old.data
		}
		table[m.Key] = &row{scope: m.Scope, data: m.Row}
		f.append(feed.Change{Resource: res, Op: feed.OpUpsert, Key: m.Key, Scope: m.Scope, Row: m.Row, Origin: origin, PrevKnown: true, Prev: prev})
	case feed.OpDelete:
		if old == nil {
			return
		}
		delete(table, m.Key)
		f.append(feed.Change{Resource: res, Op: feed.OpDelete, Key: m.Key, Scope: old.scope, Row: old.data, Origin: origin})
	}
}

// append assigns c the next position and logs it. The caller holds f.mu.
func (f *Feed) append(c feed.Change) {
	f.head++
	c.Pos, c.Tx = f.head, f.tx
	f.log = append(f.log, c)
}

// Tail blocks until a change after `after` is committed, then returns up to
// limit changes after it in position order. It returns ctx.Err() when ctx is
// done first, and feed.ErrCursorExpired if after is below Floor.
func (f *Feed) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("memfeed: Tail limit must be positive, got %d", limit)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f.mu.RLock()
		if after < f.floor {
			f.mu.RUnlock()
			return nil, feed.ErrCursorExpired
		}
		if f.head > after {
			i := f.index(after)
			out := make([]feed.Change, min(limit, len(f.log)-i))
			copy(out, f.log[i:])
			f.mu.RUnlock()
			return out, nil
		}
		wake := f.wake
		f.mu.RUnlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// index returns the index in f.log of the first change after p. The caller
// holds f.mu.
func (f *Feed) index(p feed.Position) int {
	return sort.Search(len(f.log), func(i int) bool { return f.log[i].Pos > p })
}

// Replay returns up to q.Limit changes of q.Scope with q.After < Pos <=
// q.Until in position order. It returns feed.ErrCursorExpired if q.After is
// below Floor, and an error if q.Limit is not positive or q.Scope has no
// schema.
func (f *Feed) Replay(ctx context.Context, q feed.ReplayQuery) ([]feed.Change, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		return nil, fmt.Errorf("memfeed: Replay limit must be positive, got %d", q.Limit)
	}
	if q.Scope.Schema == nil {
		return nil, errors.New("memfeed: Replay scope has no schema")
	}
	res := q.Scope.Schema.Name
	f.mu.RLock()
	defer f.mu.RUnlock()
	if q.After < f.floor {
		return nil, feed.ErrCursorExpired
	}
	var out []feed.Change
	for _, c := range f.log[f.index(q.After):] {
		if c.Pos > q.Until || len(out) == q.Limit {
			break
		}
		if c.Resource == res && q.Scope.Match(c.Scope) {
			out = append(out, c)
		}
	}
	return out, nil
}

var _ feed.Sampler = (*Feed)(nil)

// SampleChanges returns how many of the positions q.At hold a change of
// q.Scope, looking each up in the log under the lock. It returns
// feed.ErrCursorExpired if q.After is below Floor.
func (f *Feed) SampleChanges(ctx context.Context, q feed.SampleQuery) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := feed.CheckSample(q); err != nil {
		return 0, err
	}
	at := slices.Compact(slices.Sorted(slices.Values(q.At)))
	res := q.Scope.Schema.Name
	f.mu.RLock()
	defer f.mu.RUnlock()
	if q.After < f.floor {
		return 0, feed.ErrCursorExpired
	}
	n := 0
	for _, p := range at {
		if i := f.index(p - 1); i < len(f.log) && f.log[i].Pos == p && f.log[i].Resource == res && q.Scope.Match(f.log[i].Scope) {
			n++
		}
	}
	return n, nil
}

// Count returns how many changes of q.Scope lie in (q.After, q.Until] and
// how many rows the scope holds now, each up to its cap. It reads under the
// lock, walking the log from q.After and the resource's rows, and stops at
// a cap. It returns feed.ErrCursorExpired if q.MaxChanges is positive and
// q.After is below Floor.
func (f *Feed) Count(ctx context.Context, q feed.CountQuery) (feed.Counts, error) {
	if err := ctx.Err(); err != nil {
		return feed.Counts{}, err
	}
	if q.Scope.Schema == nil {
		return feed.Counts{}, errors.New("memfeed: Count scope has no schema")
	}
	res := q.Scope.Schema.Name
	f.mu.RLock()
	defer f.mu.RUnlock()
	var n feed.Counts
	if q.MaxChanges > 0 {
		if q.After < f.floor {
			return feed.Counts{}, feed.ErrCursorExpired
		}
		for _, c := range f.log[f.index(q.After):] {
			if c.Pos > q.Until || n.Changes == q.MaxChanges {
				break
			}
			if c.Resource == res && q.Scope.Match(c.Scope) {
				n.Changes++
			}
		}
	}
	if q.MaxRows > 0 {
		for _, r := range f.tables[res] {
			if n.Rows == q.MaxRows {
				break
			}
			if q.Scope.Match(r.scope) {
				n.Rows++
			}
		}
	}
	return n, nil
}

// Snapshot returns up to q.Limit of the scope's current rows with keys after
// q.After (when q.HasAfter), in bytewise key order, as upsert changes. The
// page is read under the lock at the current head, which is its Pos and the
// Pos of every row in it. A page costs O(n log Limit) for n rows of the
// resource.
func (f *Feed) Snapshot(ctx context.Context, q feed.SnapshotQuery) (feed.SnapshotPage, error) {
	if err := ctx.Err(); err != nil {
		return feed.SnapshotPage{}, err
	}
	if q.Limit <= 0 {
		return feed.SnapshotPage{}, fmt.Errorf("memfeed: Snapshot limit must be positive, got %d", q.Limit)
	}
	if q.Scope.Schema == nil {
		return feed.SnapshotPage{}, errors.New("memfeed: Snapshot scope has no schema")
	}
	res := q.Scope.Schema.Name
	f.mu.RLock()
	defer f.mu.RUnlock()
	table := f.tables[res]
	// Keep the Limit smallest qualifying keys in a max-heap.
	h := &maxHeap{}
	for k, r := range table {
		if q.HasAfter && k <= q.After {
			continue
		}
		if h.Len() == q.Limit && k >= h.keys[0] {
			continue
		}
		if !q.Scope.Match(r.scope) {
			continue
		}
		if h.Len() == q.Limit {
			h.keys[0] = k
			heap.Fix(h, 0)
		} else {
			heap.Push(h, k)
		}
	}
	slices.Sort(h.keys)
	page := feed.SnapshotPage{Pos: f.head, Rows: make([]feed.Change, len(h.keys))}
	for i, k := range h.keys {
		r := table[k]
		page.Rows[i] = feed.Change{Pos: f.head, Resource: res, Op: feed.OpUpsert, Key: k, Scope: r.scope, Row: r.data}
	}
	return page, nil
}

// maxHeap is a heap of keys with the largest on top.
type maxHeap struct{ keys []string }

func (h *maxHeap) Len() int           { return len(h.keys) }
func (h *maxHeap) Less(i, j int) bool { return h.keys[i] > h.keys[j] }
func (h *maxHeap) Swap(i, j int)      { h.keys[i], h.keys[j] = h.keys[j], h.keys[i] }
func (h *maxHeap) Push(x any)         { h.keys = append(h.keys, x.(string)) }
func (h *maxHeap) Pop() any {
	k := h.keys[len(h.keys)-1]
	h.keys = h.keys[:len(h.keys)-1]
	return k
}
