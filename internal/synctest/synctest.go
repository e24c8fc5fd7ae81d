// Package synctest holds what tide's own tests use to watch a Go client's
// subscriptions batch by batch; apps use client.Client.Sync instead.
package synctest

import (
	"context"
	"encoding/json"
	"maps"
	"sync"

	"github.com/tidesync/tide/client"
)

// Rows is a client.Handler that keeps an in-memory copy of one scope: its
// rows by primary key. It is safe for concurrent use: the client applies
// batches while other goroutines read. The zero value is an empty Rows.
// It starts empty, so it only works with a store that starts empty too
// (the client's default MemoryStore).
type Rows struct {
	mu      sync.Mutex
	rows    map[string]json.RawMessage
	changed chan struct{} // closed and replaced after every apply
}

// NewRows returns an empty Rows.
func NewRows() *Rows { return &Rows{} }

func (m *Rows) initLocked() {
	if m.rows == nil {
		m.rows = map[string]json.RawMessage{}
	}
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
}

// Apply implements client.Handler: a reset clears the copy, an upsert stores the
// row under its key, a delete removes the key.
func (m *Rows) Apply(_ context.Context, b client.Batch) error {
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
func (m *Rows) Rows() map[string]json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.rows)
}

// Len returns the number of rows.
func (m *Rows) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

// Wait blocks until ok holds for the rows: it checks them now and after
// every apply, and returns nil once ok returns true, or ctx's error. ok runs
// with the Rows locked: it must not keep or modify rows, nor call the
// Rows's methods.
func (m *Rows) Wait(ctx context.Context, ok func(rows map[string]json.RawMessage) bool) error {
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
