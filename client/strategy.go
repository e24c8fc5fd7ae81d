package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Strategy decides which row lands in the local copy when the server
// acknowledges a mutation that changed the row optimistically. Resolve gets
// the row as the mutation's Local function left it (local), the row before
// that optimistic change (base) and the row the server wrote (server); any
// of them is nil when the row is absent (deleted, or never held). It returns
// the row to keep, nil to keep none (accept a delete), or an error: a
// conflict, reported to the mutation's Wait as a *ConflictError and to
// Config.OnEvent, after which the server's row lands.
//
// Resolve is called only for rows both the mutation's Local function and
// the server's ack touched; other rows of the ack land as the server sent
// them. It runs with the client's local store locked: it must not call the
// Client.
type Strategy interface {
	Resolve(local, base, server json.RawMessage) (json.RawMessage, error)
}

// ServerWins is the default Strategy: the server's row lands, whatever the
// local change was. It is also used for an ack whose mutation the client no
// longer knows (for example one answered after its record was lost).
type ServerWins struct{}

// Resolve returns server.
func (ServerWins) Resolve(_, _, server json.RawMessage) (json.RawMessage, error) { return server, nil }

// LastWriteWins keeps the local row only if its clock field is strictly
// newer than the server's: Field holds a number (typically milliseconds
// since the Unix epoch, set by the app and by the server on every write).
// A row without the field, or with a value that is not a number, loses; so
// does a local delete (it has no clock), and a server delete wins.
type LastWriteWins struct {
	// Field is the clock column. Zero value: "updatedAt".
	Field string
}

// Resolve returns local if local[Field] > server[Field], otherwise server.
func (s LastWriteWins) Resolve(local, _, server json.RawMessage) (json.RawMessage, error) {
	if local == nil || server == nil {
		return server, nil
	}
	field := s.Field
	if field == "" {
		field = "updatedAt"
	}
	lc, lok := clockOf(local, field)
	sc, sok := clockOf(server, field)
	if lok && (!sok || lc > sc) {
		return local, nil
	}
	return server, nil
}

func clockOf(row json.RawMessage, field string) (float64, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(row, &m) != nil {
		return 0, false
	}
	var n float64
	if json.Unmarshal(m[field], &n) != nil || m[field] == nil {
		return 0, false
	}
	return n, true
}

// Merge is a Strategy written by the app: it combines the local, base and
// server rows into the row to keep, returns nil to accept a delete, or an
// error to report a conflict (the server's row then lands).
type Merge func(local, base, server json.RawMessage) (json.RawMessage, error)

// Resolve calls m.
func (m Merge) Resolve(local, base, server json.RawMessage) (json.RawMessage, error) {
	if m == nil {
		return server, nil
	}
	return m(local, base, server)
}

// ConflictError is the error a mutation's Wait returns when its Strategy
// reported a conflict on a row: the server applied the mutation, and its
// row landed in the local copy in place of the local one.
type ConflictError struct {
	Key      string // the mutation's idempotency key
	Resource string
	RowKey   string // the row's primary key
	Err      error  // what the Strategy returned
}

// Error describes the conflict.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("client: mutation %s: conflict on %s %q: %v", e.Key, e.Resource, e.RowKey, e.Err)
}

// Unwrap returns the Strategy's error.
func (e *ConflictError) Unwrap() error { return e.Err }

// strategyName is how a mutation's Strategy is persisted with the offline
// queue. A Merge (or any other custom Strategy) cannot be persisted: after a
// restart its mutation is reconciled with ServerWins.
func strategyName(s Strategy) string {
	switch s := s.(type) {
	case nil, ServerWins:
		return "server-wins"
	case LastWriteWins:
		f := s.Field
		if f == "" {
			f = "updatedAt"
		}
		return "last-write-wins:" + f
	}
	return "custom"
}

func strategyFromName(name string) Strategy {
	if f, ok := strings.CutPrefix(name, "last-write-wins:"); ok {
		return LastWriteWins{Field: f}
	}
	return ServerWins{}
}

var errNotObject = errors.New("a row is a JSON object")

// normRow checks that raw is a JSON object and returns it compacted.
func normRow(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return nil, errNotObject
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
