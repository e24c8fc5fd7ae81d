package pgfeed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidesync/tide/core/feed"
)

var _ feed.Transactor = (*Feed)(nil)

// Tx is the Postgres feed's transaction for a server-side mutation. A
// mutator reaches it through core.Tx.Feed; TxOf gives its pgx.Tx for any
// SQL. Rows written in it are captured like every other write, tagged with
// the mutation's origin.
type Tx struct {
	f  *Feed
	tx pgx.Tx
}

// Pgx returns the transaction itself.
func (t *Tx) Pgx() pgx.Tx { return t.tx }

// Apply writes muts in the transaction, as Feed.Apply does in one of its
// own.
func (t *Tx) Apply(ctx context.Context, muts ...feed.Mutation) error {
	return t.f.applyIn(ctx, t.tx, muts)
}

var _ feed.WriteLister = (*Tx)(nil)

// Written implements feed.WriteLister: the changes the transaction has
// written so far to the tables this feed captures, through Apply or any
// SQL, read from the change log. The capture triggers are deferred to the
// commit, so it first has them fire (SET CONSTRAINTS ALL IMMEDIATE): every
// deferred constraint of the transaction, the app's own included, is
// checked at that point instead of at the commit, and one that fails
// fails this call and the transaction. Writes after it are captured at
// once, and a later call lists them too. Changes of the moves of a row
// between scopes are listed as the capture logs them: a delete in the old
// scope and an upsert in the new.
func (t *Tx) Written(ctx context.Context) ([]feed.Written, error) {
	if _, err := t.tx.Exec(ctx, "SET CONSTRAINTS ALL IMMEDIATE"); err != nil {
		return nil, err
	}
	rows, err := t.tx.Query(ctx, "SELECT resource, op, scope FROM "+t.f.n.changes+" WHERE xid = pg_catalog.pg_current_xact_id() ORDER BY ord")
	if err != nil {
		return nil, err
	}
	var out []feed.Written
	var scope []*string
	for rows.Next() {
		var w feed.Written
		var op int16
		if err := rows.Scan(&w.Resource, &op, &scope); err != nil {
			rows.Close()
			return nil, err
		}
		w.Op = feed.Op(op)
		w.Scope = make([]string, len(scope))
		for i, v := range scope {
			if v == nil {
				if w.Null == nil {
					w.Null = make([]bool, len(scope))
				}
				w.Null[i] = true
				continue
			}
			w.Scope[i] = *v
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// TxOf returns the pgx.Tx of a mutator's transaction (core.Tx.Feed()), or
// nil when tx is not one of this package's (another feed runs the engine).
func TxOf(tx feed.Tx) pgx.Tx {
	switch t := tx.(type) {
	case *Tx:
		return t.tx
	case logicalTx:
		return t.t.tx
	}
	return nil
}

// logicalTx is the transaction of a server-side mutation under the
// logical capture. Its changes reach the change log only after it commits
// (the replication stream carries committed transactions), so it cannot
// list them: it is no feed.WriteLister, and a principal with token grants
// may not run mutations (core refuses them, failing closed).
type logicalTx struct{ t *Tx }

// Apply writes muts in the transaction.
func (l logicalTx) Apply(ctx context.Context, muts ...feed.Mutation) error {
	return l.t.Apply(ctx, muts...)
}

// keyRetention is how long idempotency keys are kept: as long as changes
// (Options.MaxAge); forever when changes are never dropped for age.
func (f *Feed) keyRetention() time.Duration { return f.opts.MaxAge }

// keyPruneSlack is how much longer than the retention a key stays in the
// table: the expiry check uses this node's clock and pruning the
// database's, so a key is never pruned while a node would still accept it.
const keyPruneSlack = time.Hour

// fnError carries the mutator's own error out of the transaction, to be
// returned as is.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// Transact runs fn in one transaction tagged with id.Origin and records
// id in tide's keys table in that same transaction; see feed.Transactor.
// The key's row is inserted first, so a second Transact of the same key on
// any node waits on it until the first commits (then returns its recorded
// result) or rolls back (then runs fn itself). Keys are kept as long as
// changes (Options.MaxAge) and dropped by Prune.
func (f *Feed) Transact(ctx context.Context, id feed.MutationID, fn func(ctx context.Context, tx feed.Tx) ([]byte, error)) ([]byte, bool, error) {
	if r := f.keyRetention(); r > 0 && time.Since(id.At) > r {
		return nil, false, fmt.Errorf("%w: made %s ago, keys are kept %s", feed.ErrKeyExpired, time.Since(id.At).Round(time.Second), r)
	}
	n := f.n
	var result []byte
	var replayed bool
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO "+n.keys+" (principal, origin, key, made_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
			id.Principal, id.Origin, id.Key, id.At)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			replayed = true
			return tx.QueryRow(ctx, "SELECT result FROM "+n.keys+" WHERE principal = $1 AND origin = $2 AND key = $3",
				id.Principal, id.Origin, id.Key).Scan(&result)
		}
		if err := SetClientOrigin(ctx, tx, id.Origin); err != nil {
			return err
		}
		var ftx feed.Tx = &Tx{f: f, tx: tx}
		if f.logical() {
			ftx = logicalTx{ftx.(*Tx)}
		}
		r, err := fn(ctx, ftx)
		if err != nil {
			if transient(err) || tx.Conn().IsClosed() {
				err = fmt.Errorf("%w: %w", feed.ErrTransient, err)
			}
			return fnError{err}
		}
		result = r
		_, err = tx.Exec(ctx, "UPDATE "+n.keys+" SET result = $4 WHERE principal = $1 AND origin = $2 AND key = $3",
			id.Principal, id.Origin, id.Key, result)
		return err
	})
	var fe fnError
	if errors.As(err, &fe) {
		return nil, false, fe.err
	}
	if err != nil {
		return nil, false, f.wrap("transact", err)
	}
	return result, replayed, nil
}

// pruneKeys drops idempotency keys past the retention.
func (f *Feed) pruneKeys(ctx context.Context) error {
	r := f.keyRetention()
	if r <= 0 {
		return nil
	}
	_, err := f.pool.Exec(ctx, "DELETE FROM "+f.n.keys+" WHERE made_at < clock_timestamp() - $1::interval", (r + keyPruneSlack).String())
	return f.wrap("prune keys", err)
}

// transient reports whether err is a Postgres error that aborts the
// transaction it happens in whatever the statement was: the connection
// lost or refused (class 08), the server shutting down or not yet up
// (57P01, 57P02, 57P03), a serialization failure (40001) or a deadlock
// (40P01).
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "57P01", "57P02", "57P03", "40001", "40P01":
		return true
	}
	return strings.HasPrefix(pgErr.Code, "08")
}
