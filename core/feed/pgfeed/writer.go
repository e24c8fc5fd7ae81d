package pgfeed

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidesync/tide/core/feed"
)

// Execer is what SetClientOrigin needs: pgx.Tx, *pgx.Conn, *pgxpool.Conn and
// *pgxpool.Pool all satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SetClientOrigin tags the writes of the current transaction with origin,
// the client origin (the id of the device they are made for), so that
// device can skip their echo. Apps call tide.Begin or tide.BeginFunc with
// the request's context, which calls it; this is the piece for setups that
// start their transactions otherwise. It runs `SET LOCAL tide.origin =
// origin` (as set_config, so the value is a bound parameter); call it
// inside the transaction, before it commits:
//
//	tx, _ := pool.Begin(ctx)
//	_ = pgfeed.SetClientOrigin(ctx, tx, core.OriginFrom(r.Context()))
//	_, _ = tx.Exec(ctx, "UPDATE todos SET done = true WHERE id = $1", id)
//	_ = tx.Commit(ctx)
//
// For the logical capture (CaptureLogical), which runs outside the
// transaction, the same statement also writes the origin into the WAL as a
// transactional logical decoding message (pg_logical_emit_message(true,
// 'tide.origin', origin)), which the replication stream delivers inside
// the transaction; it does so only on a server with wal_level logical and
// when origin or the setting it replaces is not empty, so untagged
// transactions, and every transaction of a server no logical capture can
// read, write nothing more. One statement serves both capture modes.
//
// The capture reads the setting when the transaction commits, so the last
// value set in the transaction tags all its changes. Outside a transaction
// the setting lasts only for the one statement and tags nothing.
func SetClientOrigin(ctx context.Context, tx Execer, origin string) error {
	_, err := tx.Exec(ctx, setOriginSQL, origin)
	return err
}

// setOriginSQL sets tide.origin and, when it or the value it replaces is
// not empty and the server decodes its WAL logically (only then can a
// logical capture read it), emits it as a message; the fenced subquery
// (OFFSET 0) runs first, reading the value before it is replaced.
const setOriginSQL = `SELECT pg_catalog.set_config('tide.origin', $1, true)
FROM (SELECT CASE WHEN ($1 <> '' OR coalesce(pg_catalog.current_setting('tide.origin', true), '') <> '')
  AND pg_catalog.current_setting('wal_level') = 'logical'
  THEN pg_catalog.pg_logical_emit_message(true, '` + originPrefix + `', $1) END AS m OFFSET 0) m`

// Apply writes the mutations in one transaction, in order, tagged with
// origin: an upsert is INSERT … ON CONFLICT (key) DO UPDATE from the JSON
// row, a delete is DELETE by key. The capture triggers record the changes as
// for any other write. Every mutation is validated first; an invalid one
// makes Apply return an error wrapping feed.ErrInvalidMutation without
// writing anything. A resource whose capture Migrate has not installed is
// refused (an error wrapping feed.ErrNotCaptured or feed.ErrNotInstalled)
// rather than written uncaptured. When Apply returns nil the changes are
// committed and Head covers them.
func (f *Feed) Apply(ctx context.Context, origin string, muts ...feed.Mutation) error {
	for i, m := range muts {
		if err := validate(m); err != nil {
			return fmt.Errorf("%w %d of %d: %s", feed.ErrInvalidMutation, i+1, len(muts), err)
		}
	}
	if len(muts) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if err := SetClientOrigin(ctx, tx, origin); err != nil {
			return err
		}
		return f.applyIn(ctx, tx, muts)
	})
	return f.wrap("apply", err)
}

// applyIn writes validated-or-not muts in tx: an upsert is INSERT … ON
// CONFLICT (key) DO UPDATE from the JSON row, a delete is DELETE by key.
func (f *Feed) applyIn(ctx context.Context, tx pgx.Tx, muts []feed.Mutation) error {
	for i, m := range muts {
		if err := validate(m); err != nil {
			return fmt.Errorf("%w %d of %d: %s", feed.ErrInvalidMutation, i+1, len(muts), err)
		}
	}
	for i, m := range muts {
		if i == 0 || m.Schema != muts[i-1].Schema {
			// A write Migrate set no capture up for would reach the table
			// and no subscriber.
			if err := f.CheckCapture(ctx, m.Schema); err != nil {
				return err
			}
		}
		p, err := f.planFor(ctx, m.Schema)
		if err != nil {
			return err
		}
		if m.Op == feed.OpUpsert {
			_, err = tx.Exec(ctx, p.upsert, string(m.Row))
		} else {
			var parts []string
			if parts, err = m.Schema.KeyParts(m.Key); err == nil {
				_, err = tx.Exec(ctx, p.delete, anys(parts)...)
			}
		}
		if err != nil {
			return fmt.Errorf("%s %s %q: %w", m.Schema.Name, m.Op, m.Key, err)
		}
	}
	return nil
}

// anys returns ss as arguments of a statement.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// validate reports what is wrong with m for this feed, or nil.
func validate(m feed.Mutation) error {
	if err := m.Validate(); err != nil {
		return err
	}
	return validSchema(m.Schema)
}
