package memfeed

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// keyring records the idempotency keys of applied mutations, with their
// results, for as long as the retention says.
type keyring struct {
	retention time.Duration

	mu        sync.Mutex
	recs      map[feed.MutationID]*keyRecord // At is zeroed in the map key
	prunedLen int                            // len(recs) after the last prune
}

// keyRecord is one key: in flight (done open) or applied (result set).
type keyRecord struct {
	done    chan struct{} // closed when the first Transact for the key ends
	applied bool
	result  []byte
	at      time.Time
}

func newKeyring(retention time.Duration) keyring {
	if retention <= 0 {
		retention = feed.DefaultKeyRetention
	}
	return keyring{retention: retention, recs: map[feed.MutationID]*keyRecord{}}
}

// tx buffers a mutator's writes; they are applied, all at once, when the
// mutator returns nil.
type tx struct {
	f    *Feed
	muts []feed.Mutation
	done bool

	// listed is what Written last returned, for the first listedN
	// mutations: the commit checks that they still write exactly that.
	listed  []feed.Written
	listedN int
}

var _ feed.WriteLister = (*tx)(nil)

// Written implements feed.WriteLister: the changes the buffered mutations
// would make if they committed now. A row deleted or moved by another
// commit in between would make them write something else: the commit then
// fails (feed.ErrTransient) rather than apply writes nobody listed.
func (t *tx) Written(ctx context.Context) ([]feed.Written, error) {
	if t.done {
		return nil, fmt.Errorf("memfeed: Tx used after its mutator returned")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.f.mu.RLock()
	w := t.f.writtenLocked(t.muts)
	t.f.mu.RUnlock()
	t.listed, t.listedN = w, len(t.muts)
	return slices.Clone(w), nil
}

// writtenLocked returns the changes muts would write on the current
// tables, as apply makes them. The caller holds f.mu.
func (f *Feed) writtenLocked(muts []feed.Mutation) []feed.Written {
	type rowKey struct{ res, key string }
	now := map[rowKey][]string{} // the scope of rows muts wrote; nil: deleted
	var out []feed.Written
	for _, m := range muts {
		k := rowKey{m.Schema.Name, m.Key}
		old, seen := now[k]
		if !seen {
			if r := f.tables[k.res][k.key]; r != nil {
				old = r.scope
			}
		}
		switch m.Op {
		case feed.OpUpsert:
			if old != nil && !slices.Equal(old, m.Scope) {
				out = append(out, feed.Written{Resource: k.res, Op: feed.OpDelete, Scope: old})
			}
			out = append(out, feed.Written{Resource: k.res, Op: feed.OpUpsert, Scope: m.Scope})
			now[k] = m.Scope
		case feed.OpDelete:
			if old != nil {
				out = append(out, feed.Written{Resource: k.res, Op: feed.OpDelete, Scope: old})
			}
			now[k] = nil
		}
	}
	return out
}

// sameWrites reports whether two listings hold the same changes in the
// same order.
func sameWrites(a, b []feed.Written) bool {
	return slices.EqualFunc(a, b, func(x, y feed.Written) bool {
		return x.Resource == y.Resource && x.Op == y.Op && slices.Equal(x.Scope, y.Scope)
	})
}

// Apply validates and buffers muts.
func (t *tx) Apply(ctx context.Context, muts ...feed.Mutation) error {
	if t.done {
		return fmt.Errorf("memfeed: Tx used after its mutator returned")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, m := range muts {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%w %d of %d: %s", feed.ErrInvalidMutation, i+1, len(muts), err)
		}
		if m.Op == feed.OpUpsert {
			m.Scope, m.Row = slices.Clone(m.Scope), bytes.Clone(m.Row)
		} else {
			m.Scope, m.Row = nil, nil
		}
		t.muts = append(t.muts, m)
	}
	return nil
}

// Transact runs fn and applies what it wrote atomically, recording id with
// fn's result; see feed.Transactor. A key is kept for Options.KeyRetention
// after the mutation's At.
func (f *Feed) Transact(ctx context.Context, id feed.MutationID, fn func(ctx context.Context, tx feed.Tx) ([]byte, error)) ([]byte, bool, error) {
	k := &f.keys
	if time.Since(id.At) > k.retention {
		return nil, false, fmt.Errorf("%w: made %s ago, keys are kept %s", feed.ErrKeyExpired, time.Since(id.At).Round(time.Second), k.retention)
	}
	at := id.At
	id.At = time.Time{}
	k.mu.Lock()
	for {
		rec := k.recs[id]
		if rec == nil {
			break
		}
		if rec.applied {
			k.mu.Unlock()
			return rec.result, true, nil
		}
		done := rec.done
		k.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		k.mu.Lock()
	}
	rec := &keyRecord{done: make(chan struct{}), at: at}
	k.recs[id] = rec
	k.mu.Unlock()

	t := &tx{f: f}
	result, err := fn(ctx, t)
	t.done = true
	if err == nil {
		err = f.commit(ctx, id.Origin, t)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		delete(k.recs, id)
	} else {
		rec.applied, rec.result = true, result
		k.pruneLocked()
	}
	close(rec.done)
	return result, false, err
}

// commit applies t's validated, copied mutations atomically, unless what
// t listed (Written) is no longer what its mutations write.
func (f *Feed) commit(ctx context.Context, origin string, t *tx) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.listedN > 0 {
		if !sameWrites(t.listed, f.writtenLocked(t.muts[:t.listedN])) {
			return fmt.Errorf("%w: a row the mutation writes changed scope after its writes were listed", feed.ErrTransient)
		}
	}
	f.applyLocked(origin, t.muts)
	return nil
}

// pruneLocked drops applied keys past retention, when the map has doubled
// since the last prune (so pruning costs O(1) per key, amortized).
func (k *keyring) pruneLocked() {
	if len(k.recs) < 1024 || len(k.recs) < 2*k.prunedLen {
		return
	}
	cut := time.Now().Add(-k.retention)
	for id, rec := range k.recs {
		if rec.applied && rec.at.Before(cut) {
			delete(k.recs, id)
		}
	}
	k.prunedLen = len(k.recs)
}
