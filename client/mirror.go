package client

import (
	"context"
	"encoding/json"
	"maps"
	"sync"
)

// Mirror is a Handler that keeps an in-memory copy of one scope: its rows
// by primary key. It is safe for concurrent use: the client applies batches
// while other goroutines read. The zero value is an empty Mirror.
//
// A Mirror starts empty, so it only works with a CursorStore that starts
// empty too: Subscribe refuses a Mirror with any Store but a MemoryStore
// (ErrMirrorPersisted), since resuming from a persisted cursor delivers
// only what changed since, which an empty Mirror cannot complete.
//
// Deprecated: use Client.Sync, which keeps the rows in the client's store
// (persisted with their cursor when the store is a FileStore), shows
// optimistic mutations, and notifies through Subscription.Changed.
type Mirror struct {
	mu      sync.Mutex
	rows    map[string]json.RawMessage
	changed chan struct{} // closed and replaced after every apply
}

// NewMirror returns an empty Mirror.
func NewMirror() *Mirror { return &Mirror{} }

func (m *Mirror) initLocked() {
	if m.rows == nil {
		m.rows = map[string]json.RawMessage{}
	}
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
}

// Apply implements Handler: a reset clears the copy, an upsert stores the
// row under its key, a delete removes the key.
func (m *Mirror) Apply(_ context.Context, b Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.initLocked()
	if b.Reset {
		clear(m.rows)
	}
	for _, e := range b.Entries {
		switch e.Op {
		case "upsert":
			m.rows[e.Key] = e.Row
		case "delete":
			delete(m.rows, e.Key)
		}
	}
	close(m.changed)
	m.changed = make(chan struct{})
	return nil
}

// Rows returns a copy of the rows by key.
func (m *Mirror) Rows() map[string]json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.rows)
}

// Len returns the number of rows.
func (m *Mirror) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

// Wait blocks until ok holds for the rows: it checks them now and after
// every apply, and returns nil once ok returns true, or ctx's error. ok runs
// with the Mirror locked: it must not keep or modify rows, nor call the
// Mirror's methods.
func (m *Mirror) Wait(ctx context.Context, ok func(rows map[string]json.RawMessage) bool) error {
	for {
		m.mu.Lock()
		m.initLocked()
		if ok(m.rows) {
			m.mu.Unlock()
			return nil
		}
		changed := m.changed
		m.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
