package pgfeed

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/internal/backoff"
)

var _ feed.Revocations = (*Feed)(nil)

// lockClassRevoke ("tidv") serializes the storing of revocations, so their
// sequence numbers are given in commit order and a watcher reading "after
// the last one I saw" never skips one that committed late.
const lockClassRevoke = 0x74696476

// MinRevocationAge is the least time Prune keeps a revocation, whatever
// Options.MaxAge says: the longest token lifetime authz.Keyring accepts by
// default plus its default clock skew (a revocation covers tokens issued up
// to a minute after it), after which every token a revocation refused has
// expired.
const MinRevocationAge = 24*time.Hour + time.Minute

// revocationNames are the SQL names of the revocation table and channel.
type revocationNames struct {
	table, channel string
}

func (n names) revocations() revocationNames {
	return revocationNames{
		table:   pgx.Identifier{unquoted(n.schema), "revocations"}.Sanitize(),
		channel: shortIdent(unquoted(n.schema) + "_revocations"),
	}
}

// unquoted returns the schema name n.schema quotes.
func unquoted(quoted string) string {
	if len(quoted) >= 2 && quoted[0] == '"' {
		return quoted[1 : len(quoted)-1]
	}
	return quoted
}

// revocationMigration creates the revocation table (schema version 4).
func revocationMigration(n names) []string {
	r := n.revocations()
	return []string{
		`CREATE TABLE ` + r.table + ` (
  seq bigserial PRIMARY KEY,
  kind smallint NOT NULL,
  principal text NOT NULL,
  at_ns bigint NOT NULL,
  node text NOT NULL,
  made_at timestamptz NOT NULL DEFAULT now())`,
		`CREATE INDEX revocations_made_at ON ` + r.table + ` (made_at)`,
	}
}

// PublishRevocation implements feed.Revocations: it stores r in the
// revocation table and notifies every watcher, in one transaction of its
// own on a pool connection (never one of the app's).
func (f *Feed) PublishRevocation(ctx context.Context, r feed.Revocation) error {
	rn := f.n.revocations()
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock("+lockArgs(lockClassRevoke, f.n.key)+")"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+rn.table+" (kind, principal, at_ns, node) VALUES ($1, $2, $3, $4)",
			int16(r.Kind), r.Principal, r.At.UnixNano(), r.Node); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_catalog.pg_notify($1, '')", rn.channel)
		return err
	})
	return f.wrap("publish revocation", err)
}

// WatchRevocations implements feed.Revocations. New revocations reach the
// watcher through NOTIFY on a connection of its own: a few milliseconds
// after they are stored. The watcher also reads the table every
// Options.PollInterval and after each reconnect, so a lost notification
// delays a revocation by at most PollInterval (1 s by default), and one
// stored while the watcher was disconnected arrives when it reconnects.
func (f *Feed) WatchRevocations(ctx context.Context, fn func(r feed.Revocation, initial bool)) error {
	last, err := f.readRevocations(ctx, f.pool, 0, func(r feed.Revocation) { fn(r, true) })
	if err != nil {
		return f.notInstalled("read revocations", err)
	}
	return f.goWatch(ctx, func(wctx context.Context) { f.watchRevocations(wctx, last, fn) })
}

// readRevocations calls fn with each stored revocation after seq, in order,
// and returns the last seq read.
func (f *Feed) readRevocations(ctx context.Context, q querier, after uint64, fn func(feed.Revocation)) (uint64, error) {
	rows, err := q.Query(ctx, "SELECT seq, kind, principal, at_ns, node FROM "+f.n.revocations().table+" WHERE seq > $1 ORDER BY seq", int64(after))
	if err != nil {
		return after, err
	}
	var got []feed.Revocation
	for rows.Next() {
		var seq, atNS int64
		var kind int16
		var r feed.Revocation
		if err := rows.Scan(&seq, &kind, &r.Principal, &atNS, &r.Node); err != nil {
			rows.Close()
			return after, err
		}
		r.Seq, r.Kind, r.At = uint64(seq), feed.RevocationKind(kind), time.Unix(0, atNS)
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return after, err
	}
	for _, r := range got {
		fn(r)
		after = r.Seq
	}
	return after, nil
}

// watchRevocations listens for new revocations until ctx ends,
// reconnecting with backoff.
func (f *Feed) watchRevocations(ctx context.Context, last uint64, fn func(feed.Revocation, bool)) {
	deliver := func(r feed.Revocation) { fn(r, false) }
	for attempt := 0; ; attempt++ {
		err := f.watchOnce(ctx, &last, deliver, func() { attempt = 0 })
		if ctx.Err() != nil {
			return
		}
		f.log.Warn("pgfeed: revocation listener connection lost; reconnecting", "schema", f.opts.Schema, "err", err, "attempt", attempt)
		if !backoff.Sleep(ctx, backoff.Delay(attempt, 50*time.Millisecond, 5*time.Second)) {
			return
		}
	}
}

// watchOnce connects, listens, and reads the table after LISTEN, on every
// notification and every PollInterval, until the connection fails.
func (f *Feed) watchOnce(ctx context.Context, last *uint64, deliver func(feed.Revocation), connected func()) error {
	conn, err := f.connect(ctx, "revocation listener", f.pool.Config().ConnConfig.Copy(), 0)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{f.n.revocations().channel}.Sanitize()); err != nil {
		return err
	}
	f.revWatchPID.Store(conn.PgConn().PID())
	connected()
	for {
		// Read first: what was stored before LISTEN took effect is read here.
		if *last, err = f.readRevocations(ctx, conn, *last, deliver); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, f.opts.PollInterval)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// pruneRevocations drops the revocations older than Options.MaxAge, but
// never one younger than MinRevocationAge.
func (f *Feed) pruneRevocations(ctx context.Context) error {
	if f.opts.MaxAge < 0 {
		return nil
	}
	age := max(f.opts.MaxAge, MinRevocationAge)
	_, err := f.pool.Exec(ctx, "DELETE FROM "+f.n.revocations().table+" WHERE made_at < clock_timestamp() - $1::interval", age.String())
	return f.wrap("prune revocations", err)
}
