package pgfeed

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed/logrepl"
)

// Broken returns opts with the deliberately unsound capture: positions are
// taken when a row is written (a plain AFTER trigger calling nextval, no
// commit-order lock), so transactions that commit out of order expose holes.
// The torture test shows that its checks catch it.
func Broken(opts Options) Options {
	opts.brokenCapture = true
	return opts
}

// LogicalTuning returns opts with tune applied to the logical capture
// consumer's configuration.
func LogicalTuning(opts Options, tune func(*logrepl.Config)) Options {
	opts.tuneLogical = tune
	return opts
}

// LogicalFault returns opts with fault called by the logical capture
// before ("commit") and after ("committed") each batch's local commit,
// with the changes the batch wrote: an error it returns fails the batch
// there, as a crash would. With rewrite, the capture writes again what it
// wrote before instead of skipping it.
func LogicalFault(opts Options, fault func(stage string, changes int) error, rewrite bool) Options {
	opts.logicalFault, opts.logicalRewrite = fault, rewrite
	return opts
}

// Doorbell returns the channel that the feed's next wake-up closes: a
// notification, or a step of its own sequencer, which rings once it has
// counted the step in Stats.
func (f *Feed) Doorbell() (<-chan struct{}, error) { return f.doorbell() }

// OrderedRead is what Replay runs before its statement, in the same
// transaction.
const OrderedRead = orderedRead

// ReplaySQL returns the replay statement of q and its arguments.
func (f *Feed) ReplaySQL(q feed.ReplayQuery) (string, []any) { return f.replaySQL(q) }

// SnapshotSQL returns the snapshot statement of q and its arguments.
func (f *Feed) SnapshotSQL(ctx context.Context, q feed.SnapshotQuery) (string, []any, error) {
	p, err := f.planFor(ctx, q.Scope.Schema)
	if err != nil {
		return "", nil, err
	}
	return f.snapshotSQL(p, q, true, false, true)
}

// ListenerPID returns the backend pid of the listening connection, 0 before
// the first connection.
func (f *Feed) ListenerPID() uint32 { return f.listenerPID.Load() }

// RevocationWatcherPID returns the backend PID of the latest revocation
// watcher's connection (0 before one connected).
func (f *Feed) RevocationWatcherPID() uint32 { return f.revWatchPID.Load() }

// RevocationsTable returns the qualified name of the revocation table.
func (f *Feed) RevocationsTable() string { return f.n.revocations().table }

// SequencerPID returns the backend pid of the sequencer's connection while
// this feed holds the role, 0 otherwise.
func (f *Feed) SequencerPID() uint32 { return f.sequencerPID.Load() }

// PendingSQL is a statement returning 1 while a committed change has no
// position yet, else 0.
func (f *Feed) PendingSQL() string { return "SELECT " + f.n.pendingExpr() }

// LogSQL is a FROM item (alias c) of every change with a position: pos,
// resource, op, key, scope, data, origin, prev, committed_at and xid.
func (f *Feed) LogSQL() string { return f.n.schema + ".log c" }

// TicksTable returns the qualified ticks table.
func (f *Feed) TicksTable() string { return f.n.ticks }

// OnListen sets a hook called after every LISTEN; set it before the first
// Tail.
func (f *Feed) OnListen(hook func()) { f.onConnect = hook }

// Names exposes SQL names for tests.
func (f *Feed) ChangesTable() string { return f.n.changes }
func (f *Feed) MetaTable() string    { return f.n.meta }
func (f *Feed) TriggerName(resource string) string {
	return f.triggerName(resource)
}

// InstallVersion creates tide's schema exactly as the given version of
// this package did, with that version's capture of each of schemas:
// version 1's a deferred trigger that takes the commit-order lock, appends
// to the change log with the next position and notifies; later versions'
// the outbox capture. The upgrade tests start from it.
func (f *Feed) InstallVersion(ctx context.Context, version int, schemas ...*feed.Schema) error {
	n := f.n
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, stmt := range []string{"CREATE SCHEMA " + n.schema,
		`CREATE TABLE ` + n.migrations + ` (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, m := range migrations[:version] {
			for _, stmt := range m.stmts(n) {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+n.migrations+" (version) VALUES ($1)", m.version); err != nil {
				return err
			}
			if m.version == 1 {
				if _, err := tx.Exec(ctx, "INSERT INTO "+n.meta+" (id, epoch) VALUES (1, $1)", newEpoch()); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range schemas {
		types, err := f.columnTypes(ctx, conn, s)
		if err != nil {
			return err
		}
		p := newPlan(s, types)
		ddl := f.captureDDL(p)
		switch {
		case version == 1:
			ddl = f.captureDDLv1(p)
		case version < 8:
			ddl = f.captureDDLv7(p)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, stmt := range ddl {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			head := n.headExpr
			if version < 8 {
				head = `(SELECT greatest(coalesce((SELECT max(pos) FROM ` + n.changes + `), 0), m.floor) FROM ` + n.meta + ` m)`
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+n.resources+` (name, tbl, layout, install, floor) VALUES ($1, $2, $3, $4, `+head+`)`,
				s.Name, s.Table, p.layout, installHash(ddl))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// captureDDLv1 is version 1's captureDDL, verbatim but for the broken
// variant.
func (f *Feed) captureDDLv1(p *plan) []string {
	n := f.n
	fn := n.schema + "." + pgx.Identifier{captureFunc(p.s.Name)}.Sanitize()
	insert := func(op int, alias string) string {
		return "INSERT INTO " + n.changes + " (pos, resource, op, key, scope, data, origin) VALUES (pg_catalog.nextval(" + n.seqLit + "), " +
			p.resLit + ", " + strconv.Itoa(op) + ", " + p.keyExpr(alias) + ", " + p.scopeExpr(alias) + ", " + p.rowExpr(alias) + ", o);"
	}
	lock := "PERFORM pg_catalog.pg_advisory_xact_lock(" + strconv.Itoa(int(n.lockA)) + ", " + strconv.Itoa(int(n.key)) + ");"
	body := `
DECLARE
  o text := nullif(pg_catalog.current_setting('tide.origin', true), '');
BEGIN
  -- Serialize position assignment: the lock is held until this transaction
  -- is visible, so positions become visible in order (see package pgfeed).
  ` + lock + `
  IF TG_OP = 'DELETE' THEN
    ` + insert(int(feed.OpDelete), "OLD") + `
  ELSIF TG_OP = 'UPDATE' THEN
    IF ` + p.keyExpr("OLD") + ` IS DISTINCT FROM ` + p.keyExpr("NEW") + ` OR ` + p.scopeExpr("OLD") + ` IS DISTINCT FROM ` + p.scopeExpr("NEW") + ` THEN
      ` + insert(int(feed.OpDelete), "OLD") + `
    END IF;
    ` + insert(int(feed.OpUpsert), "NEW") + `
  ELSE
    ` + insert(int(feed.OpUpsert), "NEW") + `
  END IF;
  -- An empty payload: Postgres folds it into one notification per transaction.
  PERFORM pg_catalog.pg_notify(` + quoteLit(n.channel) + `, '');
  RETURN NULL;
END`
	trig := pgx.Identifier{f.triggerName(p.s.Name)}.Sanitize()
	stmts := []string{
		"CREATE OR REPLACE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $tide$" + body + "\n$tide$",
		"DROP TRIGGER IF EXISTS " + trig + " ON " + p.table,
		"CREATE CONSTRAINT TRIGGER " + trig + " AFTER INSERT OR UPDATE OR DELETE ON " + p.table +
			" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + fn + "()",
		"CREATE OR REPLACE TRIGGER " + pgx.Identifier{f.truncateTrigger()}.Sanitize() + " BEFORE TRUNCATE ON " + p.table +
			" FOR EACH STATEMENT EXECUTE FUNCTION " + n.schema + ".refuse_truncate()",
	}
	for i := range p.scope {
		idx := pgx.Identifier{shortIdent("changes_" + p.s.Name + "_s" + strconv.Itoa(i+1))}.Sanitize()
		stmts = append(stmts, "CREATE INDEX IF NOT EXISTS "+idx+" ON "+n.changes+" ((scope["+strconv.Itoa(i+1)+"]), pos) WHERE resource = "+p.resLit)
	}
	return stmts
}

// captureDDLv7 is the outbox capture of versions 2 to 7, verbatim but for
// the broken variant.
func (f *Feed) captureDDLv7(p *plan) []string {
	n := f.n
	fn := n.schema + "." + pgx.Identifier{captureFunc(p.s.Name)}.Sanitize()
	prevs := len(p.s.PrevColumns) > 0
	cols := "resource, op, key, scope, data, origin"
	if prevs {
		cols += ", prev"
	}
	target := n.outbox + " (" + cols + ") VALUES ("
	// prev is the previous version of an upserted row in its scope, for a
	// resource with a row filter: the columns the filter reads, JSON null
	// for none (NULL for a delete).
	insert := func(op int, alias, prev string) string {
		if !prevs {
			prev = ""
		} else if op == int(feed.OpDelete) {
			prev = ", NULL"
		} else {
			prev = ", " + prev
		}
		return "INSERT INTO " + target + p.resLit + ", " + strconv.Itoa(op) + ", " + p.keyExpr(alias) + ", " + p.scopeExpr(alias) + ", " + p.rowExpr(alias) + ", o" + prev + ");"
	}
	const none = "'null'::jsonb"
	body := `
DECLARE
  o text := nullif(pg_catalog.current_setting('tide.origin', true), '');
BEGIN
  IF TG_OP = 'DELETE' THEN
    ` + insert(int(feed.OpDelete), "OLD", "") + `
  ELSIF TG_OP = 'UPDATE' THEN
    IF ` + p.keyExpr("OLD") + ` IS DISTINCT FROM ` + p.keyExpr("NEW") + ` OR ` + p.scopeExpr("OLD") + ` IS DISTINCT FROM ` + p.scopeExpr("NEW") + ` THEN
      ` + insert(int(feed.OpDelete), "OLD", "") + `
      ` + insert(int(feed.OpUpsert), "NEW", none) + `
    ELSE
      ` + insert(int(feed.OpUpsert), "NEW", p.prevExpr("OLD")) + `
    END IF;
  ELSE
    ` + insert(int(feed.OpUpsert), "NEW", none) + `
  END IF;
  RETURN NULL;
END`
	trig := pgx.Identifier{f.triggerName(p.s.Name)}.Sanitize()
	create := "CREATE CONSTRAINT TRIGGER " + trig + " AFTER INSERT OR UPDATE OR DELETE ON " + p.table +
		" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + fn + "()"
	stmts := []string{
		"CREATE OR REPLACE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $tide$" + body + "\n$tide$",
		"DROP TRIGGER IF EXISTS " + trig + " ON " + p.table,
		create,
		"CREATE OR REPLACE TRIGGER " + pgx.Identifier{f.truncateTrigger()}.Sanitize() + " BEFORE TRUNCATE ON " + p.table +
			" FOR EACH STATEMENT EXECUTE FUNCTION " + n.schema + ".refuse_truncate()",
	}
	for i := range p.scope {
		idx := pgx.Identifier{shortIdent("changes_" + p.s.Name + "_s" + strconv.Itoa(i+1))}.Sanitize()
		stmts = append(stmts, "CREATE INDEX IF NOT EXISTS "+idx+" ON "+n.changes+" ((scope["+strconv.Itoa(i+1)+"]), pos) WHERE resource = "+p.resLit)
	}
	return stmts
}

// OnStreamWait sets a hook the sequencer calls each time it starts waiting
// for the WAL stream to ring (its poll interval away); set it before the
// first Tail.
func (f *Feed) OnStreamWait(hook func()) { f.onStreamWait = hook }

// OnWALRefused sets a hook called when the WAL stream fails for good (the
// role may not replicate); set it before the first Tail.
func (f *Feed) OnWALRefused(hook func()) { f.onWALRefused = hook }

// Channel returns the channel the sequencer notifies after each step.
func (f *Feed) Channel() string { return f.n.channel }

// CheckFloor runs the sequencer's check of the floor against the position
// sequence on a connection of the pool.
func (f *Feed) CheckFloor(ctx context.Context) error {
	c, err := f.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	return f.checkFloor(ctx, c.Conn())
}

// StepRowsSQL is the statement of one sequencing step that returns the
// changes it gave positions to.
func (f *Feed) StepRowsSQL() string { return f.n.stepRowsSQL }
