package client

import (
	"context"
	"encoding/json"
	"maps"
	"sync"
)

// testRows is a Handler that keeps an in-memory copy of one scope: its
// rows by primary key, for tests that watch batches as they are applied.
// It is safe for concurrent use. The zero value is empty.
type testRows struct {
	mu      sync.Mutex
	rows    map[string]json.RawMessage
	changed chan struct{} // closed and replaced after every apply
}

// newTestRows returns an empty testRows.
func newTestRows() *testRows { return &testRows{} }

func (m *testRows) initLocked() {
	if m.rows == nil {
		m.rows = map[string]json.RawMessage{}
	}
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
}

// Apply implements Handler: a reset clears the copy, an upsert stores the
// row under its key, a delete removes the key.
func (m *testRows) Apply(_ context.Context, b Batch) error {
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
func (m *testRows) Rows() map[string]json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.rows)
}

// Len returns the number of rows.
func (m *testRows) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

// Wait blocks until ok holds for the rows: it checks them now and after
// every apply, and returns nil once ok returns true, or ctx's error. ok runs
// with the testRows locked: it must not keep or modify rows, nor call the
// testRows's methods.
func (m *testRows) Wait(ctx context.Context, ok func(rows map[string]json.RawMessage) bool) error {
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
