package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
)

// Record is the persisted state of one scope: the client keeps exactly one
// per scope it has subscribed to, keyed by the scope's digest.
type Record struct {
	// Digest is the scope's stable identity (Scope.Digest).
	Digest string `json:"digest"`
	// Resource and Conditions describe the scope, the conditions as
	// normalized JSON (absent when the scope has none).
	Resource   string          `json:"resource"`
	Conditions json.RawMessage `json:"conditions,omitempty"`
	// State is informational: one of the State constants.
	State string `json:"state"`
	// Cursor is the applied cursor: every change up to it has been applied
	// by the scope's handler. Empty when nothing has been applied yet or
	// after a reset.
	Cursor string `json:"cursor,omitempty"`
}

// Values of Record.State.
const (
	StateNew          = "new"          // declared; nothing applied yet
	StateSyncing      = "syncing"      // catching up (snapshot or replay)
	StateLive         = "live"         // caught up at least once; live changes flow
	StateFailed       = "failed"       // the server refused the subscription (see the OnEvent report)
	StateUnsubscribed = "unsubscribed" // the app unsubscribed; the cursor is kept for a later subscribe
)

// CursorStore persists one Record per scope. Implementations must be safe
// for concurrent use. A store belongs to one Client at a time.
type CursorStore interface {
	// Load returns the record of the scope with the digest, and whether
	// there is one.
	Load(ctx context.Context, digest string) (Record, bool, error)
	// Save creates or replaces the record with r.Digest.
	Save(ctx context.Context, r Record) error
	// Delete removes the record; deleting a missing record is not an error.
	Delete(ctx context.Context, digest string) error
}

// errNoDigest is returned by the stores for a record without a digest.
var errNoDigest = errors.New("client: record has no digest")

// MemoryStore is a CursorStore that keeps records in memory, for the
// lifetime of the process. It is the Client's default.
type MemoryStore struct {
	mu   sync.RWMutex
	recs map[string]Record
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{recs: map[string]Record{}} }

// Load implements CursorStore.
func (s *MemoryStore) Load(_ context.Context, digest string) (Record, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.recs[digest]
	return cloneRecord(r), ok, nil
}

// Save implements CursorStore.
func (s *MemoryStore) Save(_ context.Context, r Record) error {
	if r.Digest == "" {
		return errNoDigest
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recs == nil {
		s.recs = map[string]Record{}
	}
	s.recs[r.Digest] = cloneRecord(r)
	return nil
}

// Delete implements CursorStore.
func (s *MemoryStore) Delete(_ context.Context, digest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, digest)
	return nil
}

func cloneRecord(r Record) Record {
	r.Conditions = bytes.Clone(r.Conditions)
	return r
}
