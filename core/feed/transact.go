package feed

import (
	"context"
	"errors"
	"time"
)

// Transactor is implemented by feeds that can run an app's server-side
// mutation (a mutator) in one transaction, recording its idempotency key in
// that same transaction so that no key is ever applied twice.
type Transactor interface {
	// Transact runs fn in one transaction whose writes are tagged with
	// id.Origin, and records id with the result fn returns, unless id was
	// recorded before: then it returns the recorded result with
	// replayed=true and does not call fn. Two calls with the same id at
	// once, on one node or several, run fn at most once: the second waits
	// for the first and then sees its record (or, if the first failed,
	// runs fn itself).
	//
	// If fn returns an error, nothing fn wrote is committed, nothing is
	// recorded, and Transact returns that error as is, unless the
	// transaction itself failed under fn (its connection was lost, the
	// database shut down, a serialization failure or a deadlock): then the
	// error wraps ErrTransient as well as fn's. A commit failure is
	// returned as an error that does not wrap fn's.
	//
	// It returns an error wrapping ErrKeyExpired, without running fn, when
	// id.At is older than the feed keeps idempotency keys: the feed can no
	// longer tell whether the key was applied. When Transact returns nil,
	// the writes are committed and Head covers them.
	Transact(ctx context.Context, id MutationID, fn func(ctx context.Context, tx Tx) ([]byte, error)) (result []byte, replayed bool, err error)
}

// MutationID identifies one client mutation: its idempotency key, scoped to
// the principal and the client device (origin) that sent it.
type MutationID struct {
	Principal string
	Origin    string
	Key       string
	At        time.Time // when the client made the mutation
}

// Tx is one transaction of a Transactor. Writes through it commit together
// when the function given to Transact returns nil. A Tx must not be used
// after that function returns. Feeds may offer more through their own type
// (the Postgres feed's Tx gives the pgx.Tx, for any SQL).
type Tx interface {
	// Apply writes muts in this transaction, as Writer.Apply does, tagged
	// with the transaction's origin.
	Apply(ctx context.Context, muts ...Mutation) error
}

// Written is one change a transaction has written so far: its resource,
// its op, and the canonical text of the row's scope values in Schema.Scope
// order (for a delete, the deleted row's). A row moved between scopes is
// two changes, the delete in the old scope and the upsert in the new.
type Written struct {
	Resource string // Schema.Name
	Op       Op
	Scope    []string // canonical text of the scope values; "" where Null says NULL
	// Null, when not nil, marks the scope values that are SQL NULL (a row
	// written with raw SQL may hold one): Scope's text there is "" and
	// stands for no value at all.
	Null []bool
}

// WriteLister is implemented by a Tx that can list the changes written
// through it so far, whichever way they were written: with Apply, and on
// Postgres with any SQL on the transaction, every row of a captured table
// included. core checks a mutation against the token grants of its
// principal with it before the transaction commits; a Tx without it cannot
// run the mutations of a principal with grants (they are refused).
type WriteLister interface {
	// Written returns the changes of the transaction so far, in no
	// particular order. It may fail as any statement of the transaction
	// can; the transaction then cannot commit.
	Written(ctx context.Context) ([]Written, error)
}

// ErrKeyExpired means a mutation is older than the feed keeps idempotency
// keys: it is refused, never run, since it may have been applied already.
var ErrKeyExpired = errors.New("feed: the mutation is older than the retained idempotency keys")

// ErrTransient means a Transact call's function failed because its
// transaction could not go on, not because of what the function did:
// nothing was committed or recorded, and the same call made again may
// succeed.
var ErrTransient = errors.New("feed: the transaction failed under the function; it may be run again")

// DefaultKeyRetention is how long feeds keep idempotency keys unless
// configured otherwise: as long as the Postgres feed keeps changes by
// default.
const DefaultKeyRetention = 7 * 24 * time.Hour
