package feed

import (
	"context"
	"time"
)

// RevocationKind says what a Revocation asks every node to do.
type RevocationKind uint8

// Revocation kinds.
const (
	// RevokeAccess refuses the principal's tokens issued at or before At
	// and ends its connections (core's Engine.Revoke).
	RevokeAccess RevocationKind = iota + 1
	// RevokeTokens refuses the principal's tokens issued at or before At
	// and leaves its connections open (a keyring's own RevokePrincipal).
	RevokeTokens
	// Reauthorize runs the policies of the principal's subscriptions again
	// (core's Engine.Reauthorize).
	Reauthorize
)

// String returns the kind's name.
func (k RevocationKind) String() string {
	switch k {
	case RevokeAccess:
		return "revoke"
	case RevokeTokens:
		return "revoke-tokens"
	case Reauthorize:
		return "reauthorize"
	}
	return "invalid"
}

// Revocation is one change of a principal's access that every node of a
// cluster applies.
type Revocation struct {
	// Seq is set by the store: it increases in the order revocations were
	// stored, and watchers receive them in that order.
	Seq       uint64
	Kind      RevocationKind
	Principal string    // the principal's id; "" is the anonymous principal
	At        time.Time // tokens issued at or before it are refused; nanosecond precision
	// Node identifies the engine that made the revocation, which applied it
	// already and skips it when it comes back.
	Node string
}

// Revocations is implemented by feeds (or buses) that carry revocations
// between the nodes of a cluster and store them for the nodes that start
// later. The engine publishes every Revoke, Reauthorize and keyring
// revocation through it and applies what it watches. The Postgres feed
// stores them in a table and announces them with NOTIFY on a connection of
// its own; the in-memory feed delivers them in process, to the engines
// sharing it.
type Revocations interface {
	// PublishRevocation stores r durably, outside any transaction of the
	// app, and delivers it to the watchers of every node, this one
	// included. When it returns nil, r is stored: a watch started later
	// receives it among the stored ones. r.Seq is ignored.
	PublishRevocation(ctx context.Context, r Revocation) error

	// WatchRevocations calls fn with every stored revocation, in Seq
	// order, before it returns; then, on a goroutine of the feed, with
	// each one stored afterwards, in Seq order, each once, until ctx ends
	// or the feed closes. The stored calls have initial set. A watcher
	// that loses its connection to the store resumes after the last Seq it
	// delivered, so nothing stored is skipped. It returns an error, and
	// leaves no goroutine, only when the stored revocations cannot be
	// read. fn runs on one goroutine at a time and must not block for
	// long. An implementation documents how long a revocation takes to
	// reach the watchers.
	WatchRevocations(ctx context.Context, fn func(r Revocation, initial bool)) error
}
