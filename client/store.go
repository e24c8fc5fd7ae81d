package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/tidesync/tide/core/protocol"
)

// Record is the persisted state of one scope: the client keeps exactly one
// per scope it has subscribed to, keyed by the scope's digest.
type Record struct {
	// Digest is the scope's stable identity (Scope.Digest).
	Digest string `json:"digest"`
	// Resource and Conditions describe the scope, the conditions as
	// normalized JSON (absent when the scope has none).
	Resource   string          `json:"resource"`
	Resources  []string        `json:"resources,omitempty"` // a scope of several resources: all of them, sorted
	Conditions json.RawMessage `json:"conditions,omitempty"`
	// State is informational: one of the State constants.
	State string `json:"state"`
	// Cursor is the applied cursor: every change up to it has been applied
	// by the scope's handler, or to Rows. Empty when nothing has been
	// applied yet or after a reset.
	Cursor string `json:"cursor,omitempty"`
	// Copy says Rows is the scope's complete copy at Cursor, kept by the
	// client (a scope opened with Client.Sync). Rows and Cursor are saved
	// together, in one Save, so a restart resumes a complete copy. A record
	// with a Cursor but without Copy is never used to resume a synced
	// scope: the client starts it over from a snapshot.
	Copy bool `json:"copy,omitempty"`
	// Rows are the server's rows of the scope at Cursor, by primary key
	// (when Copy is set).
	Rows map[string]json.RawMessage `json:"rows,omitempty"`
	// Synced says the scope was opened with Client.Sync (the client keeps
	// its rows), so a restarted client resumes it with Sync.
	Synced bool `json:"synced,omitempty"`
	// Refusal is the code of the server's refusal when State is failed
	// (forbidden, unauthenticated, ...). A scope refused for access
	// (forbidden, unauthenticated) has no Cursor and no Rows: its data
	// left the store when access ended.
	Refusal protocol.Code `json:"refusal,omitempty"`
}

// RecordLister is implemented by a CursorStore that can list its records:
// MemoryStore and FileStore do. The client lists them to resume the scopes
// an app followed before a restart (Client.Followed, Client.Resume).
type RecordLister interface {
	// List returns every record, in no particular order.
	List(ctx context.Context) ([]Record, error)
}

// MetaStore is implemented by a CursorStore that also keeps what the
// client must know about the store itself (Meta): MemoryStore and
// FileStore do. With a Store that does not, every Client gets a random
// origin, the store is bound to no principal, and the frame limit is
// learnt again on every start.
type MetaStore interface {
	// LoadMeta returns the stored Meta; the zero Meta if none.
	LoadMeta(ctx context.Context) (Meta, error)
	// SaveMeta replaces the stored Meta.
	SaveMeta(ctx context.Context, m Meta) error
}

// Meta is what a store records about itself, beside its records and its
// queue.
type Meta struct {
	// Origin is the client device's origin id, sent in hello. The first
	// Client on the store generates it and saves it; every later Client on
	// the store reuses it (unless Config.Origin overrides it). The server
	// keeps idempotency keys per principal and origin, so a mutation
	// restored from the queue after a restart must be resent under the
	// origin it was first sent under: that is why the origin lives beside
	// the queue.
	Origin string `json:"origin,omitempty"`
	// Principal is the id of the principal the store's data belongs to,
	// from the first welcome (protocol.ServerFrame.Principal), when Bound
	// is set: "" is the anonymous caller. A Client whose welcome names
	// another principal stops with ErrOtherPrincipal.
	Principal string `json:"principal,omitempty"`
	// Bound says the store belongs to Principal. A new store is bound by
	// its first welcome.
	Bound bool `json:"bound,omitempty"`
	// MaxFrameBytes is the frame limit the server announced in its last
	// welcome, 0 before any: Mutate refuses a mutation whose frame would
	// exceed it (65536 bytes when it is 0).
	MaxFrameBytes int `json:"max_frame_bytes,omitempty"`
}

// QueueStore is implemented by a CursorStore that also persists the
// client's mutation log (the offline queue): MemoryStore and FileStore do.
// With a Store that does not, the queue lives in memory only and is lost
// with the process. A QueueStore is a MetaStore too: a queue is resent
// after a restart under the origin its Meta records, and under no other.
type QueueStore interface {
	MetaStore
	// LoadQueue returns the stored queue; the zero Queue if none.
	LoadQueue(ctx context.Context) (Queue, error)
	// SaveQueue replaces the stored queue.
	SaveQueue(ctx context.Context, q Queue) error
}

// Queue is the persisted mutation log of a client.
type Queue struct {
	// Seq is the last client sequence number handed out; the next
	// mutation gets Seq+1.
	Seq int64 `json:"seq"`
	// Mutations are the mutations not yet settled, in log order.
	Mutations []QueuedMutation `json:"mutations,omitempty"`
}

// QueuedMutation is one persisted mutation.
type QueuedMutation struct {
	Key      string          `json:"key"`
	Seq      int64           `json:"seq"`
	Resource string          `json:"resource"`
	Name     string          `json:"name"`
	Args     json.RawMessage `json:"args,omitempty"`
	At       int64           `json:"at"` // Unix milliseconds
	// Strategy names the conflict strategy: "server-wins",
	// "last-write-wins:<field>" or "custom" (reconciled as server-wins
	// after a restart: a function cannot be persisted).
	Strategy string `json:"strategy"`
	// Ops are the row changes the mutation puts on the local copy: its
	// optimistic changes, or once acknowledged the rows that landed.
	Ops []protocol.Entry `json:"ops,omitempty"`
	// Acked says the server acknowledged the mutation; Cursor is the ack's
	// cursor, which the subscriptions have not all reached yet.
	Acked  bool   `json:"acked,omitempty"`
	Cursor string `json:"cursor,omitempty"`
	// TraceParent is the caller's trace context (Mutation.TraceParent),
	// sent again with the mutation after a restart.
	TraceParent string `json:"traceparent,omitempty"`
	// Closes counts the connections the mutation was sent on that the
	// server closed before answering it; at maxCloses it is settled as
	// rejected (CodeUndeliverable).
	Closes int `json:"closes,omitempty"`
}

// Values of Record.State.
const (
	StateNew          = "new"          // declared; nothing applied yet
	StateSyncing      = "syncing"      // catching up (snapshot or replay)
	StateLive         = "live"         // caught up at least once; live changes flow
	StateFailed       = "failed"       // the server refused the subscription (Record.Refusal, and the OnEvent report)
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
	mu    sync.RWMutex
	recs  map[string]Record
	queue Queue
	meta  Meta
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

// List implements RecordLister.
func (s *MemoryStore) List(context.Context) ([]Record, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return listRecords(s.recs), nil
}

func listRecords(recs map[string]Record) []Record {
	out := make([]Record, 0, len(recs))
	for _, r := range recs {
		out = append(out, cloneRecord(r))
	}
	return out
}

// LoadQueue implements QueueStore.
func (s *MemoryStore) LoadQueue(context.Context) (Queue, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return cloneQueue(s.queue), nil
}

// SaveQueue implements QueueStore.
func (s *MemoryStore) SaveQueue(_ context.Context, q Queue) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = cloneQueue(q)
	return nil
}

// LoadMeta implements MetaStore.
func (s *MemoryStore) LoadMeta(context.Context) (Meta, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.meta, nil
}

// SaveMeta implements MetaStore.
func (s *MemoryStore) SaveMeta(_ context.Context, m Meta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meta = m
	return nil
}

func cloneRecord(r Record) Record {
	r.Conditions = bytes.Clone(r.Conditions)
	r.Resources = slices.Clone(r.Resources)
	if r.Rows != nil {
		r.Rows = maps.Clone(r.Rows) // row contents are never modified in place
	}
	return r
}

func cloneQueue(q Queue) Queue {
	q.Mutations = slices.Clone(q.Mutations)
	for i := range q.Mutations {
		q.Mutations[i].Ops = slices.Clone(q.Mutations[i].Ops)
	}
	return q
}
