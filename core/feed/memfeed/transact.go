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
	muts []feed.Mutation
	done bool
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

	t := &tx{}
	result, err := fn(ctx, t)
	t.done = true
	if err == nil {
		err = f.commit(ctx, id.Origin, t.muts)
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

// commit applies validated, copied mutations atomically.
func (f *Feed) commit(ctx context.Context, origin string, muts []feed.Mutation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applyLocked(origin, muts)
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
