package pgfeed

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/internal/backoff"
)

// migration is one versioned step of tide's own schema. Steps are applied in
// order, each in its own transaction together with its row in
// schema_migrations, and never edited once released: a change is a new step.
type migration struct {
	version int
	stmts   func(n names) []string
}

var migrations = []migration{
	{1, func(n names) []string {
		return []string{
			`CREATE TABLE ` + n.meta + ` (
  id int PRIMARY KEY CHECK (id = 1),
  epoch text NOT NULL,
  floor bigint NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now())`,
			`CREATE SEQUENCE ` + n.seq + ` AS bigint`,
			`CREATE TABLE ` + n.changes + ` (
  pos bigint PRIMARY KEY,
  resource text NOT NULL,
  op smallint NOT NULL,
  key text NOT NULL,
  scope text[] NOT NULL,
  data jsonb,
  origin text,
  committed_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
			`CREATE INDEX changes_resource_pos ON ` + n.changes + ` (resource, pos)`,
			`CREATE TABLE ` + n.resources + ` (
  name text PRIMARY KEY,
  tbl text NOT NULL,
  layout text NOT NULL,
  install text NOT NULL,
  floor bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now())`,
			`CREATE FUNCTION ` + n.schema + `.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $tide$
BEGIN
  RAISE EXCEPTION 'tide: TRUNCATE of %.% is not captured; delete the rows with DELETE instead', TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'feature_not_supported';
END
$tide$`,
		}
	}},
	// Version 2: capture without contention. The capture functions append
	// to an unordered outbox (reinstalled by Migrate, whose DDL hash
	// changes); the sequencer function moves committed outbox rows into
	// the change log, giving them positions. Positions already in the log
	// are kept, so cursors from version 1 keep working.
	{2, func(n names) []string {
		return []string{
			`CREATE TABLE ` + n.outbox + ` (
  id bigserial NOT NULL,
  xid xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
  resource text NOT NULL,
  op smallint NOT NULL,
  key text NOT NULL,
  scope text[] NOT NULL,
  data jsonb,
  origin text)`,
			sequenceFunction(n, false),
		}
	}},
	// Version 3: the idempotency keys of mutations, recorded in the
	// mutation's own transaction (see Transact) and pruned with the changes.
	{3, func(n names) []string {
		return []string{
			`CREATE TABLE ` + n.keys + ` (
  principal text NOT NULL,
  origin text NOT NULL,
  key text NOT NULL,
  made_at timestamptz NOT NULL,
  result bytea,
  PRIMARY KEY (principal, origin, key))`,
			`CREATE INDEX mutation_keys_made_at ON ` + n.keys + ` (made_at)`,
		}
	}},
	// Version 4: revocations, stored for the nodes that start later and
	// announced with NOTIFY (see PublishRevocation).
	{4, revocationMigration},
	// Version 5: steps commit without waiting for their WAL flush, within a
	// durably reserved block of positions that a restarted server skips
	// past (see sequenceFunction); changes carry the previous version of
	// the rows of resources with a row filter, and the writer's
	// transaction id.
	{5, func(n names) []string {
		return []string{
			// Tables in the order a sequencing step locks them (the outbox,
			// then the log, then meta), so a step running meanwhile finishes
			// instead of deadlocking with this version.
			// The previous version of an upserted row in its scope, for
			// resources with a row filter (feed.Schema.PrevColumns): a JSON object,
			// JSON null for none (an insert, or the upsert half of a move),
			// NULL where not recorded.
			`ALTER TABLE ` + n.outbox + ` ADD COLUMN prev jsonb`,
			// The writer's transaction, so a commit group is exactly one
			// transaction.
			`ALTER TABLE ` + n.changes + ` ADD COLUMN prev jsonb, ADD COLUMN xid xid8`,
			`ALTER TABLE ` + n.meta + ` ADD COLUMN reserved bigint NOT NULL DEFAULT 0, ADD COLUMN boot timestamptz`,
			`CREATE FUNCTION ` + n.stepFn + `() RETURNS bigint LANGUAGE plpgsql AS $tide$
DECLARE
  r bigint;
  b timestamptz;
BEGIN
  -- One step at a time, database-wide; taken before the step's statement,
  -- so its snapshot sees every earlier step.
  PERFORM pg_catalog.pg_advisory_xact_lock(` + lockArgs(n.lockA, n.key) + `);
  SELECT m.reserved, m.boot INTO r, b FROM ` + n.meta + ` m;
  IF b IS DISTINCT FROM pg_catalog.pg_postmaster_start_time() THEN
    -- The server restarted since the last step: a step that had committed
    -- without its flush may be lost, and the sequence with it, but every
    -- position such a step gave is within the reservation. Continue above it.
    IF r > (SELECT s.last_value FROM ` + n.seq + ` s) THEN
      PERFORM pg_catalog.setval(` + n.seqLit + `, r);
    END IF;
    UPDATE ` + n.meta + ` SET boot = pg_catalog.pg_postmaster_start_time();
  END IF;
  RETURN r;
END
$tide$`,
			sequenceFunction(n, true),
		}
	}},
	// Version 6: a step that returns the changes it gave positions to, so
	// the sequencer hands them to its own node's tailers without their
	// reading the log again.
	{6, func(n names) []string { return []string{stepRowsFunction(n)} }},
	// Version 7: the secret that seals snapshot cursors (see CursorKey), 32
	// bytes drawn by the database from its strong random source
	// (gen_random_uuid uses pg_strong_random; two of them hold 244 random
	// bits), so every node of the change log has the same one and none
	// has to send it.
	{7, func(n names) []string {
		return []string{
			`ALTER TABLE ` + n.meta + ` ADD COLUMN cursor_key bytea`,
			`UPDATE ` + n.meta + ` SET cursor_key = pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text, '-', ''), 'hex')`,
			`ALTER TABLE ` + n.meta + ` ALTER COLUMN cursor_key SET NOT NULL,
  ADD CONSTRAINT meta_cursor_key_size CHECK (pg_catalog.octet_length(cursor_key) = ` + strconv.Itoa(feed.CursorKeySize) + `)`,
		}
	}},
	// Version 8: each change written once (see ticks.go): the capture
	// writes the change log itself, and sequencing steps write ticks.
	{8, ticksMigration},
	// Version 9: a step reads the changes it ticked through the
	// transaction index, never by a scan of the change log.
	{9, func(n names) []string { return []string{tickStepRowsFunction(n)} }},
	// Version 10: steps read the change log through its index whatever its
	// size when their plans were made (see stepSettings).
	{10, func(n names) []string { return []string{tickSequenceFunction(n), tickStepRowsFunction(n)} }},
	// Version 11: one index of the change log, (xid, ord, resource,
	// scope[1]), serves what (xid, ord) and each resource's (scope[1],
	// xid) served (see txIndexMigration).
	{11, txIndexMigration},
}

// positionBlock is how many positions a durable reservation covers: a
// step whose positions stay within the reservation commits without waiting
// for its WAL flush; one that passes it extends it and waits.
const positionBlock = 1 << 20

// sequenceFunction returns the statement creating the sequence function,
// whose step gives committed outbox rows their positions (see sequencer.go).
// Version 2 of the schema created it with steps that commit like any
// transaction; version 5 (reserve) replaces it with one that also moves
// the rows' previous versions and whose steps commit
// asynchronously while their positions stay within meta.reserved, a bound
// committed durably beforehand, so a server that restarts (and may lose the
// last such steps, which readers may have seen) gives new positions only
// above every position a reader can have seen.
func sequenceFunction(n names, reserve bool) string {
	create, decl, lock, commit := "CREATE FUNCTION", "", "PERFORM pg_catalog.pg_advisory_xact_lock("+lockArgs(n.lockA, n.key)+");", ""
	if reserve {
		create = "CREATE OR REPLACE FUNCTION"
		decl = "\n  reserved bigint;\n  hi bigint;"
		lock = "reserved := " + n.stepFn + "();"
		commit = reservationCommit(n)
	}
	return create + ` ` + n.seqFn + `(max_txs integer, wait_ms integer, idle_ms integer, max_pause_ms integer)
RETURNS TABLE (moved bigint, head bigint) LANGUAGE plpgsql AS $tide$
#variable_conflict use_column
DECLARE
  started timestamptz := pg_catalog.clock_timestamp();
  deadline timestamptz := started + pg_catalog.make_interval(secs => wait_ms / 1000.0);
  pause double precision;` + decl + `
BEGIN
  moved := 0;
  LOOP
    -- Each statement of this (volatile) function reads a fresh snapshot.
    IF EXISTS (SELECT 1 FROM ` + n.outbox + `) THEN
      ` + lock + `
      IF max_txs <= 0 OR (SELECT count(*) FROM (SELECT 1 FROM ` + n.outbox + ` LIMIT max_txs + 1) x) <= max_txs THEN
        -- Few enough rows for one step: every transaction this snapshot sees.
        WITH ` + n.move(reserve, "") + `
        SELECT count(*) INTO moved FROM i;
      ELSE
        -- A backlog: the max_txs transactions that finished writing first.
        WITH b AS (
          SELECT o.xid FROM ` + n.outbox + ` o GROUP BY o.xid ORDER BY max(o.id) LIMIT max_txs
        ), ` + n.move(reserve, "b") + `
        SELECT count(*) INTO moved FROM i;
      END IF;
      IF moved > 0 THEN` + commit + `
        PERFORM pg_catalog.pg_notify(` + quoteLit(n.channel) + `, '');
        EXIT;
      END IF;
    END IF;
    EXIT WHEN pg_catalog.clock_timestamp() >= deadline;
    -- Look again soon after changes arrived, less often the longer none did.
    pause := least(max_pause_ms / 1000.0, greatest(0.001,
      (idle_ms / 1000.0 + extract(epoch FROM pg_catalog.clock_timestamp() - started)) / 8));
    PERFORM pg_catalog.pg_sleep(least(pause, extract(epoch FROM deadline - pg_catalog.clock_timestamp())));
  END LOOP;
  SELECT greatest(coalesce((SELECT max(c.pos) FROM ` + n.changes + ` c), 0), m.floor) INTO head FROM ` + n.meta + ` m;
  RETURN NEXT;
END
$tide$`
}

// stepRowsFunction returns the statement creating the step_rows function:
// one sequencing step, exactly as the sequence function's (the same lock,
// reservation and batch bound), that waits for nothing and returns the
// changes it gave positions to, in position order, each with the last
// position given before the step (before). Steps are serialized and take
// their positions after every earlier step's, so the changes are exactly
// those in (before, their last position]: a tailer whose cursor is at
// before may take them as the log's next ones. Nothing moved, nothing
// returned.
func stepRowsFunction(n names) string {
	ret := "pos, resource, op, key, scope, data, origin, prev, xid"
	sel := "SELECT head_before, i.pos, i.resource, i.op, i.key, i.scope, i.data, i.origin, i.prev, i.xid::text::bigint FROM i ORDER BY i.pos"
	return `CREATE FUNCTION ` + n.stepRowsFn + `(max_txs integer)
RETURNS TABLE (before bigint, pos bigint, resource text, op smallint, key text, scope text[], data jsonb, origin text, prev jsonb, tx bigint)
LANGUAGE plpgsql AS $tide$
#variable_conflict use_column
DECLARE
  reserved bigint;
  hi bigint;
  head_before bigint;
  moved bigint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM ` + n.outbox + `) THEN
    RETURN;
  END IF;
  reserved := ` + n.stepFn + `();
  -- After the step lock: the last position any earlier step gave. Those
  -- of steps that failed are holes, so a cursor at the head may be below
  -- it, and then does not take these changes as its next ones.
  SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO head_before FROM ` + n.seq + ` s;
  IF max_txs <= 0 OR NOT EXISTS (SELECT 1 FROM ` + n.outbox + ` OFFSET max_txs) THEN
    -- Few enough rows for one step: every transaction this snapshot sees.
    RETURN QUERY WITH ` + n.moveReturning(true, "", ret) + `
    ` + sel + `;
  ELSE
    RETURN QUERY WITH b AS (
      SELECT o.xid FROM ` + n.outbox + ` o GROUP BY o.xid ORDER BY max(o.id) LIMIT max_txs
    ), ` + n.moveReturning(true, "b", ret) + `
    ` + sel + `;
  END IF;
  GET DIAGNOSTICS moved = ROW_COUNT;
  IF moved > 0 THEN` + reservationCommit(n) + `
    PERFORM pg_catalog.pg_notify(` + quoteLit(n.channel) + `, '');
  END IF;
END
$tide$`
}

// reservationCommit is the PL/pgSQL of a step of schema version 5 on, after
// it moved changes: past the reservation it extends it and commits
// waiting for the flush; within it, without (see sequenceFunction).
func reservationCommit(n names) string {
	return `
        hi := pg_catalog.currval(` + n.seqLit + `);
        IF hi > reserved THEN
          -- Past the reservation: extend it, durably, before these
          -- positions become visible.
          UPDATE ` + n.meta + ` SET reserved = hi + ` + strconv.Itoa(positionBlock) + `;
          IF pg_catalog.current_setting('synchronous_commit') = 'off' THEN
            PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
          END IF;
        ELSE
          PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
        END IF;`
}

// lockArgs renders the two keys of an advisory lock as SQL arguments.
func lockArgs(a, b int32) string { return strconv.Itoa(int(a)) + ", " + strconv.Itoa(int(b)) }

// Migrate creates or upgrades tide's schema (the change log, the outbox, its
// metadata and functions) and installs the capture of each resource: a deferred
// constraint trigger on its table, its capture function and the change log
// indexes its replays use. Pass the engine's schemas:
//
//	err := feed.Migrate(ctx, engine.Schemas()...)
//
// First it checks each declaration against its table and changes nothing if
// one does not fit (an error wrapping ErrMismatch names the resource, its Go
// type, the field, the column and both types): every declared column exists
// with a type its field's kind holds (string: text, varchar, char, uuid,
// enums; integers: smallint, integer, bigint, numeric(p,0); float: those and
// real, double precision, numeric; bool: boolean; time.Time: timestamptz,
// timestamp, date; []byte: bytea; json.RawMessage: json, jsonb, arrays), and
// the key column is the table's primary key or alone in a unique index.
//
// It is idempotent and cheap when nothing changed, so run it on every boot.
// A schema created by an earlier version is upgraded in place, keeping the
// positions of the changes already logged, so cursors issued before keep
// working; once a database is upgraded, nodes of the earlier version refuse
// to migrate it (upgrade them all), and the changes written after the
// upgrade get their positions only from nodes of this version.
// Nodes running it at once are serialized by a session-level advisory lock.
//
// A resource whose layout changed since the last Migrate (its table, key,
// scope or columns) gets a new floor at the current head: cursors from
// before it get a reset, since older changes no longer match the
// declaration. Installing or changing a capture briefly locks the table
// against writes (SHARE ROW EXCLUSIVE) and builds the change log index of a
// new scope column, which pauses synced commits for the duration of the
// build; adding a resource to a very large change log is best done when
// writes are quiet.
func (f *Feed) Migrate(ctx context.Context, schemas ...*feed.Schema) error {
	for _, s := range schemas {
		if err := validSchema(s); err != nil {
			return fmt.Errorf("pgfeed: migrate: %w", err)
		}
	}
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		return f.wrap("migrate: acquire", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", f.n.migrateA, f.n.key); err != nil {
		closeConn(conn) // the lock may or may not be held: drop the session
		return f.wrap("migrate: lock", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1, $2)", f.n.migrateA, f.n.key); err != nil {
			closeConn(conn) // ending the session releases the lock
		}
	}()

	// Every declaration is checked against its table before anything
	// changes.
	for _, s := range schemas {
		if err := f.checkDeclaration(ctx, conn, s); err != nil {
			return fmt.Errorf("pgfeed: migrate %w", err)
		}
	}
	if err := f.migrateBase(ctx, conn); err != nil {
		return err
	}
	if f.logical() {
		if err := f.migrateLogical(ctx, conn, schemas); err != nil {
			return err
		}
	}
	for _, s := range schemas {
		if err := f.installCapture(ctx, conn, s); err != nil {
			return err
		}
	}
	var epoch string
	if err := conn.QueryRow(ctx, "SELECT epoch FROM "+f.n.meta).Scan(&epoch); err != nil {
		return f.wrap("migrate: read epoch", err)
	}
	return f.setEpoch(epoch)
}

// closeConn closes a pooled connection so the pool discards it.
func closeConn(c *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Conn().Close(ctx)
}

// SchemaVersion is the version of tide's schema this package installs.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// migrateBase applies the versioned migrations not yet applied.
func (f *Feed) migrateBase(ctx context.Context, conn *pgxpool.Conn) error {
	n := f.n
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+n.schema); err != nil {
		return f.wrap("migrate: create schema", err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+n.migrations+` (
  version int PRIMARY KEY,
  applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return f.wrap("migrate: create schema_migrations", err)
	}
	var current int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+n.migrations).Scan(&current); err != nil {
		return f.wrap("migrate: read version", err)
	}
	if current > SchemaVersion() {
		return fmt.Errorf("pgfeed: schema %s is at version %d, newer than this build's %d: upgrade tide", f.opts.Schema, current, SchemaVersion())
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		apply := func(tx pgx.Tx) error {
			// A version altering tables that running nodes use waits for
			// their locks; bounded, so app writers queued behind it are
			// not held up for long, and retried below.
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+migrationLockTimeout+"'"); err != nil {
				return err
			}
			for _, stmt := range m.stmts(n) {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			if m.version == 1 {
				if _, err := tx.Exec(ctx, "INSERT INTO "+n.meta+" (id, epoch) VALUES (1, $1)", newEpoch()); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+n.migrations+" (version) VALUES ($1)", m.version)
			return err
		}
		var err error
		for attempt := 0; ; attempt++ {
			err = pgx.BeginFunc(ctx, conn, apply)
			if !isLockConflict(err) || attempt == migrationAttempts-1 {
				break
			}
			// A running node's statement held a table this version alters
			// and waited for another it had locked: the version rolled back
			// whole; try again.
			f.log.Info("pgfeed: migration waited for a lock; retrying", "schema", f.opts.Schema, "version", m.version, "err", err, "attempt", attempt)
			backoff.Sleep(ctx, backoff.Delay(attempt, 50*time.Millisecond, time.Second))
		}
		if err != nil {
			return f.wrap("migrate: version "+strconv.Itoa(m.version), err)
		}
		f.log.Info("pgfeed: migrated", "schema", f.opts.Schema, "version", m.version)
	}
	return nil
}

// installCapture installs or updates the capture of s, unless what is
// installed is already current.
func (f *Feed) installCapture(ctx context.Context, conn *pgxpool.Conn, s *feed.Schema) error {
	n := f.n
	types, err := f.columnTypes(ctx, conn, s)
	if err != nil {
		return err
	}
	p := newPlan(s, types)
	ddl := f.captureDDL(p)
	if f.logical() {
		ddl = f.logicalDDL(p)
	}
	install := installHash(ddl)

	var oldLayout, oldInstall string
	err = conn.QueryRow(ctx, "SELECT layout, install FROM "+n.resources+" WHERE name = $1", s.Name).Scan(&oldLayout, &oldInstall)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return f.wrap("migrate: read resource "+s.Name, err)
	}
	var hasTrigger bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2)`,
		p.table, f.triggerName(s.Name)).Scan(&hasTrigger)
	if err != nil {
		return f.wrap("migrate: find trigger of "+s.Name, err)
	}
	if exists && oldLayout == p.layout && oldInstall == install && hasTrigger != f.logical() {
		f.plans.Store(s, p)
		f.captured.Store(s, struct{}{})
		return nil
	}

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Wait for the table's writers to finish and hold new ones off, so
		// no change of the old layout commits after the new floor.
		if _, err := tx.Exec(ctx, "LOCK TABLE "+p.table+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			return err
		}
		// Give positions to every change already committed (the table's
		// writers have all finished), before the old capture goes and
		// before a new floor is read: no change of the old layout is
		// sequenced after it.
		if _, err := tx.Exec(ctx, "SELECT moved FROM "+n.seqFn+"(0, 0, 0, 0)"); err != nil {
			return err
		}
		for _, stmt := range ddl {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%w\n%s", err, stmt)
			}
		}
		// A new resource, or a new layout: older changes of the resource
		// are not readable with this declaration.
		_, err := tx.Exec(ctx, `INSERT INTO `+n.resources+` AS r (name, tbl, layout, install, floor)
VALUES ($1, $2, $3, $4, `+n.headExpr+`)
ON CONFLICT (name) DO UPDATE SET tbl = EXCLUDED.tbl, layout = EXCLUDED.layout, install = EXCLUDED.install, updated_at = now(),
  floor = CASE WHEN r.layout = EXCLUDED.layout THEN r.floor ELSE EXCLUDED.floor END`,
			s.Name, s.Table, p.layout, install)
		return err
	})
	if err != nil {
		return f.wrap("migrate: install capture of "+s.Name+" on "+s.Table, err)
	}
	f.plans.Store(s, p)
	f.captured.Store(s, struct{}{})
	f.log.Info("pgfeed: installed capture", "schema", f.opts.Schema, "resource", s.Name, "table", s.Table, "layout_changed", exists && oldLayout != p.layout)
	return nil
}

const epochLen = 16

const epochAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newEpoch returns 16 random characters of [A-Za-z0-9], without modulo bias.
func newEpoch() string {
	out := make([]byte, 0, epochLen)
	var buf [32]byte
	for len(out) < epochLen {
		rand.Read(buf[:]) // never returns an error (crypto/rand, Go 1.24+)
		for _, b := range buf {
			if b < 248 && len(out) < epochLen { // 248 = 4*62
				out = append(out, epochAlphabet[int(b)%len(epochAlphabet)])
			}
		}
	}
	return string(out)
}

// Bounds of a migration version's wait for the locks of running nodes.
const (
	migrationLockTimeout = "2s"
	migrationAttempts    = 8
)

// isLockConflict reports whether err is a deadlock or a lock timeout.
func isLockConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "55P03")
}

// isUndefinedTable reports whether err says a table or schema is missing.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}

// isUndefinedFunction reports whether err says a function is missing (tide's
// schema predates the sequencer).
func isUndefinedFunction(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42883"
}

// CheckCapture implements feed.CaptureChecker: it returns nil if s's
// capture is installed as declared (by this feed's Migrate, or by another
// node's with the same declaration), and otherwise an error wrapping
// feed.ErrNotCaptured saying to call Migrate with s, or feed.ErrNotInstalled
// if Migrate never ran. The engine calls it before each subscription
// starts; once it succeeded for s it answers from memory.
func (f *Feed) CheckCapture(ctx context.Context, s *feed.Schema) error {
	if _, ok := f.captured.Load(s); ok {
		return nil
	}
	p, err := f.planFor(ctx, s)
	if err != nil {
		return err
	}
	var layout string
	var hasTrigger bool
	err = f.pool.QueryRow(ctx, `SELECT coalesce((SELECT layout FROM `+f.n.resources+` WHERE name = $1), ''),
  EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = $2::regclass AND tgname = $3)`,
		s.Name, p.table, f.triggerName(s.Name)).Scan(&layout, &hasTrigger)
	if err != nil {
		return f.notInstalled("check the capture of "+s.Name, err)
	}
	switch {
	case layout == "" || hasTrigger == f.logical():
		return fmt.Errorf("pgfeed: resource %s: %w: Migrate has not installed its capture; register every resource before calling Migrate(ctx, engine.Schemas()...), or use tide.Open", s.Name, feed.ErrNotCaptured)
	case layout != p.layout:
		return fmt.Errorf("pgfeed: resource %s: %w as declared: its capture was installed for another declaration (table, key, scope or columns); run Migrate with the current schemas", s.Name, feed.ErrNotCaptured)
	}
	f.captured.Store(s, struct{}{})
	return nil
}
