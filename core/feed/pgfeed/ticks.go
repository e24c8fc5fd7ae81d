package pgfeed

import (
	"strconv"
)

// The change log of schema version 8 on: each change written once.
//
// The capture writes each row event straight into the change log
// (changes), tagged with the writer's transaction (xid), its place in the
// transaction (ord, counted by the capture) and a capture sequence number
// (cseq) taken when it was written, and nothing else: no position, no
// lock, no shared row, so synced transactions never wait for one another,
// and the sequencer never copies or deletes a change.
//
// Positions come from ticks, written by sequencing steps, one at a time
// (the step lock). A step reads the last tick's snapshot and takes, in one
// statement, every transaction its own snapshot sees committed that the
// last tick's did not: those whose id is at or past that snapshot's xmax,
// or among the ones it listed in progress, and which wrote changes. It
// orders them by the last change each wrote (a transaction that wrote a
// row after another committed its write of that row wrote its own change
// later, so the order respects every write conflict), gives each a block
// of positions as long as its changes (first + ord), and writes them, with
// its snapshot, as ticks: rows of at most tickTxs transactions, with their
// ids and first positions in position order. A change's position is its
// transaction's first position plus its ord; ord may skip values (a
// subtransaction rolled back after its changes were captured), so
// positions may have holes, as a failed step's always could.
//
// Why no reader can skip a change: a transaction T with changes is taken
// by exactly one step, the first whose snapshot sees T committed (earlier
// steps do not see its rows; later ones find it visible in the snapshot of
// the tick before them, since snapshots of later steps see more). That
// step gives T's changes positions above every position given before it.
// Steps commit in the order they run, so a reader's snapshot sees a prefix
// of the ticks, and every change within them (T committed before the step
// that ticked it began). A reader at position p that reads the ticks after
// p therefore sees, in position order, every change it has not seen.
const tickTxs = 128

// pendingSQL is a FROM item of the change log rows that no tick covers yet
// (l: xid, cseq, ord): the rows of transactions the statement's snapshot
// sees committed and the last tick's did not. The log's index (changes_tx,
// led by xid and ord) serves both arms; a long transaction in progress
// costs nothing, since
// only the ids the last tick listed in progress are looked up one by one.
func (n names) pendingSQL(cols string) string {
	return `(SELECT ` + cols + ` FROM (SELECT t.snap FROM ` + n.ticks + ` t ORDER BY t.pos DESC LIMIT 1) p
  CROSS JOIN LATERAL (
    SELECT c.xid, c.cseq, c.ord FROM ` + n.changes + ` c WHERE c.xid >= pg_catalog.pg_snapshot_xmax(p.snap)
    UNION ALL
    SELECT c.xid, c.cseq, c.ord FROM ` + n.changes + ` c
     WHERE c.xid = ANY (ARRAY(SELECT pg_catalog.pg_snapshot_xip(p.snap)))
  ) l)`
}

// pendingExpr is a scalar subquery: 1 if the statement's snapshot sees a
// change no tick covers, else 0.
func (n names) pendingExpr() string {
	return `(SELECT count(*) FROM (SELECT 1 FROM ` + n.pendingSQL("l.xid") + ` x LIMIT 1) x)`
}

// tickCTEs returns the common table expressions of one sequencing step,
// for a WITH: tk_o holds the transactions it ticks (xid, n, first, rn: their
// rank in position order) and tk_head the last position given before it
// (or the floor, if higher: no step numbers a change below it); tk_ins
// writes the ticks. Run it holding the step lock (begin_step), in a
// statement whose snapshot is the tick's.
func (n names) tickCTEs() string {
	return `tk_head AS (
  SELECT greatest(
    (SELECT t.next - 1 FROM ` + n.ticks + ` t ORDER BY t.pos DESC LIMIT 1),
    (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM ` + n.seq + ` s),
    (SELECT m.floor FROM ` + n.meta + ` m)) AS head
), tk_b AS (
  SELECT l.xid, max(l.cseq) AS last, max(l.ord) + 1 AS n FROM ` + n.pendingSQL("l.xid, l.cseq, l.ord") + ` l GROUP BY l.xid
), tk_o AS (
  SELECT b.xid, b.n, h.head + 1 + sum(b.n) OVER w - b.n AS first, row_number() OVER w AS rn
  FROM tk_b b CROSS JOIN tk_head h WINDOW w AS (ORDER BY b.last)
), tk_ins AS (
  INSERT INTO ` + n.ticks + ` (pos, next, xids, firsts, snap)
  SELECT min(o.first), max(o.first + o.n), pg_catalog.array_agg(o.xid ORDER BY o.first), pg_catalog.array_agg(o.first ORDER BY o.first), pg_catalog.pg_current_snapshot()
  FROM tk_o o GROUP BY (o.rn - 1) / ` + strconv.Itoa(tickTxs) + `
  RETURNING next
)`
}

// logCols are the columns of a change read from the log with its position
// (tx: its commit group, the writer's transaction id), aliased as
// scanChanges reads them; u is the transaction's (xid, first) and l the
// row.
const logCols = `u.first + l.ord AS pos, l.resource, l.op, l.key, l.scope, l.data, l.origin, l.prev, l.xid::text::bigint AS tx`

// containingTick is a scalar subquery: the first position of the tick
// holding position after (an SQL expression), or 0 below every tick. The
// ticks from it on hold every position after after.
func (n names) containingTick(after string) string {
	return `coalesce((SELECT t.pos FROM ` + n.ticks + ` t WHERE t.pos <= ` + after + ` ORDER BY t.pos DESC LIMIT 1), 0)`
}

// ticked returns a FROM item of the changes with positions in (after,
// until] that satisfy where (conditions on the log row l), in ticks
// read in position order: columns logCols plus tick, the tick's first
// position. Order by (tick, pos) and the read stops at its limit (an SQL
// expression, the read's own), one tick at a time; each transaction's
// changes are looked up by its id in the change log's index, in order and
// at most limit of them, so a page within a large transaction reads that
// page, not the rest of the transaction.
func (n names) ticked(after, until, where, limit string) string {
	cond := ""
	if where != "" {
		cond = where + " AND "
	}
	return `(SELECT t.pos AS tick, r.* FROM ` + n.ticks + ` t CROSS JOIN LATERAL (
  SELECT ` + logCols + ` FROM unnest(t.xids, t.firsts) u(xid, first)
  CROSS JOIN LATERAL (SELECT * FROM ` + n.changes + ` l
   WHERE ` + cond + `l.xid = u.xid AND l.ord > ` + after + ` - u.first AND l.ord <= ` + until + ` - u.first
   ORDER BY l.ord LIMIT ` + limit + `) l
 ) r
 WHERE t.pos >= ` + n.containingTick(after) + ` AND t.pos <= ` + until + `) c`
}

// maxPosSQL is the largest position, as SQL: an upper bound for reads to
// the head.
const maxPosSQL = "9223372036854775807"

// ordSetting is the transaction-local setting in which the capture counts
// a transaction's changes of schema (their ord).
func ordSetting(schema string) string { return "tide.ord_" + schema }

// nextOrd is the PL/pgSQL expression of the next ord of the transaction.
func (n names) nextOrd() string {
	return `coalesce(NULLIF(pg_catalog.current_setting(` + quoteLit(n.ordGUC) + `, true), '')::integer, 0)`
}

// saveOrd is the PL/pgSQL statement recording k as the next ord.
func (n names) saveOrd(k string) string {
	return `PERFORM pg_catalog.set_config(` + quoteLit(n.ordGUC) + `, ` + k + `::text, true);`
}

// ticksMigration is version 8 of the schema: the change log written once
// (see the top of this file). It gives positions to what the outbox
// holds, with the writers of synced tables held off, then replaces the log
// with one of the new layout and the outbox with a view whose inserts
// land in it, so captures installed by earlier versions keep capturing
// until Migrate reinstalls them. Changes logged before it are not kept:
// the floor moves to the head, so a cursor at the head resumes and an
// older one gets a reset, never a gap.
func ticksMigration(n names) []string {
	headBefore := `greatest(m.floor, coalesce((SELECT max(c.pos) FROM ` + n.changes + ` c), 0),
  (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM ` + n.seq + ` s))`
	return []string{
		`LOCK TABLE ` + n.outbox + ` IN EXCLUSIVE MODE`,
		`SELECT moved FROM ` + n.seqFn + `(0, 0, 0, 0)`,
		`UPDATE ` + n.meta + ` m SET floor = ` + headBefore,
		`DROP TABLE ` + n.outbox,
		`DROP TABLE ` + n.changes,
		`CREATE SEQUENCE ` + n.captureSeq + ` AS bigint`,
		`CREATE TABLE ` + n.changes + ` (
  xid xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
  ord integer NOT NULL,
  cseq bigint NOT NULL DEFAULT pg_catalog.nextval(` + quoteLit(n.captureSeq) + `),
  resource text NOT NULL,
  op smallint NOT NULL,
  key text NOT NULL,
  scope text[] NOT NULL,
  data jsonb,
  origin text,
  prev jsonb,
  committed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp())`,
		`CREATE INDEX changes_xid ON ` + n.changes + ` (xid, ord)`,
		`CREATE TABLE ` + n.ticks + ` (
  pos bigint PRIMARY KEY,
  next bigint NOT NULL,
  xids xid8[] NOT NULL,
  firsts bigint[] NOT NULL,
  snap pg_snapshot NOT NULL,
  made_at timestamptz NOT NULL DEFAULT pg_catalog.now())`,
		// The first tick: no transaction, at the head; the next step
		// takes every transaction this snapshot does not see.
		`INSERT INTO ` + n.ticks + ` (pos, next, xids, firsts, snap) SELECT m.floor, m.floor + 1, '{}', '{}', pg_catalog.pg_current_snapshot() FROM ` + n.meta + ` m`,
		// Every change with its position, for people and tools: reads of
		// tide itself join the ticks to the log with their own bounds.
		`CREATE VIEW ` + n.schema + `.log AS SELECT u.first + c.ord AS pos, c.resource, c.op, c.key, c.scope, c.data, c.origin, c.prev, c.committed_at, c.xid
FROM ` + n.ticks + ` t CROSS JOIN LATERAL unnest(t.xids, t.firsts) u(xid, first) JOIN ` + n.changes + ` c ON c.xid = u.xid`,
		`CREATE VIEW ` + n.outbox + ` AS SELECT NULL::bigint AS id, c.xid, c.resource, c.op, c.key, c.scope, c.data, c.origin, c.prev FROM ` + n.changes + ` c WHERE false`,
		`CREATE FUNCTION ` + n.schema + `.outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $tide$
DECLARE
  k integer := ` + n.nextOrd() + `;
BEGIN
  INSERT INTO ` + n.changes + ` (ord, resource, op, key, scope, data, origin, prev) VALUES (k, NEW.resource, NEW.op, NEW.key, NEW.scope, NEW.data, NEW.origin, NEW.prev);
  ` + n.saveOrd("k + 1") + `
  RETURN NEW;
END
$tide$`,
		`CREATE TRIGGER outbox_insert INSTEAD OF INSERT ON ` + n.outbox + ` FOR EACH ROW EXECUTE FUNCTION ` + n.schema + `.outbox_insert()`,
		tickSequenceFunction(n),
		tickStepRowsFunction(n),
	}
}

// txIndexMigration is version 11 of the schema: the change log's one
// index for every change, changes_tx (xid, ord, resource, scope[1]),
// replaces both the transaction index (xid, ord) and the index of each
// resource's first scope column, (scope[1], xid) WHERE resource = ….
// Every read of the log looks a transaction's changes up by its id: a
// step by id alone (or a range of ids), a read of a scope by id,
// resource and first scope value, all conditions of one index. A
// captured change then writes one entry in the log's indexes instead of
// two (and one WAL record: about 70 bytes a change). The indexes of a
// resource's further scope columns go too: Migrate makes them again with
// ord, ((scope[i]), xid, ord), so that they give a transaction's changes
// in order. The build holds synced writes for its length (the log is as
// long as its retention keeps it).
func txIndexMigration(n names) []string {
	return []string{
		`CREATE INDEX changes_tx ON ` + n.changes + ` (xid, ord, resource, (scope[1]))`,
		`DROP INDEX ` + n.schema + `.changes_xid`,
		`DO $tide$
DECLARE
  i regclass;
BEGIN
  FOR i IN SELECT x.indexrelid::regclass FROM pg_catalog.pg_index x
    WHERE x.indrelid = ` + quoteLit(n.changes) + `::regclass
      AND pg_catalog.pg_get_indexdef(x.indexrelid) LIKE '%USING btree ((scope[%]), xid) WHERE%'
  LOOP
    EXECUTE 'DROP INDEX ' || i::text;
  END LOOP;
END
$tide$`,
	}
}

// tickReservation is the PL/pgSQL of a step of schema version 8 after it
// ticked changes up to position hi: past the reservation it extends it and
// commits waiting for the flush; within it, without (see
// sequenceFunction). Then it notifies the tailers.
func tickReservation(n names) string {
	return `
        IF hi > reserved THEN
          UPDATE ` + n.meta + ` SET reserved = hi + ` + strconv.Itoa(positionBlock) + `;
          IF pg_catalog.current_setting('synchronous_commit') = 'off' THEN
            PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
          END IF;
        ELSE
          PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
        END IF;
        PERFORM pg_catalog.pg_notify(` + quoteLit(n.channel) + `, '');`
}

// lastTick is the PL/pgSQL statement reading the last position given into
// hi.
func (n names) lastTick() string {
	return `SELECT t.next - 1 INTO hi FROM ` + n.ticks + ` t ORDER BY t.pos DESC LIMIT 1;`
}

// stepSettings are the settings a step's functions run with. A function
// keeps the plans of its statements for the life of its session, and the
// sequencer's session lives long: a plan made while the change log was
// small reads it whole (a sequential scan), and keeps doing so as the log
// grows, until statistics happen to be refreshed; the look for pending
// transactions also compares with a value known only when it runs, which
// the planner guesses matches a third of the log. Without sequential scans
// every step reads the log through its transaction index, whatever its size
// when planned. JIT compilation is off: it would compile each step (the
// disabled scans of the one-row tables look costly to it), for far longer
// than the step takes.
const stepSettings = "SET enable_seqscan = off SET jit = off"

// tickSequenceFunction replaces the sequence function (see
// sequenceFunction) with one whose step writes ticks: it waits
// server-side, as before, for a change to tick, then ticks every one its
// snapshot sees. max_txs is no longer read: a step ticks all it sees, in
// ticks of at most tickTxs transactions.
func tickSequenceFunction(n names) string {
	return `CREATE OR REPLACE FUNCTION ` + n.seqFn + `(max_txs integer, wait_ms integer, idle_ms integer, max_pause_ms integer)
RETURNS TABLE (moved bigint, head bigint) LANGUAGE plpgsql ` + stepSettings + ` AS $tide$
#variable_conflict use_column
DECLARE
  started timestamptz := pg_catalog.clock_timestamp();
  deadline timestamptz := started + pg_catalog.make_interval(secs => wait_ms / 1000.0);
  pause double precision;
  reserved bigint;
  hi bigint;
BEGIN
  moved := 0;
  LOOP
    -- Each statement of this (volatile) function reads a fresh snapshot.
    IF ` + n.pendingExpr() + ` > 0 THEN
      reserved := ` + n.stepFn + `();
      WITH ` + n.tickCTEs() + `
      SELECT coalesce(sum(o.n), 0) INTO moved FROM tk_o o;
      IF moved > 0 THEN
        ` + n.lastTick() + tickReservation(n) + `
        EXIT;
      END IF;
    END IF;
    EXIT WHEN pg_catalog.clock_timestamp() >= deadline;
    pause := least(max_pause_ms / 1000.0, greatest(0.001,
      (idle_ms / 1000.0 + extract(epoch FROM pg_catalog.clock_timestamp() - started)) / 8));
    PERFORM pg_catalog.pg_sleep(least(pause, extract(epoch FROM deadline - pg_catalog.clock_timestamp())));
  END LOOP;
  SELECT greatest((SELECT t.next - 1 FROM ` + n.ticks + ` t ORDER BY t.pos DESC LIMIT 1), m.floor) INTO head FROM ` + n.meta + ` m;
  RETURN NEXT;
END
$tide$`
}

// tickStepRowsFunction replaces the step_rows function (see
// stepRowsFunction) with one whose step writes ticks, returning the
// changes of its first max_txs transactions (all, for max_txs <= 0) in
// position order, each with the last position given before the step.
//
// The changes are looked up through the transaction index by the ids the
// step ticked, all in one array: as a join with the ticked transactions,
// the planner may read the whole change log instead (it cannot know how
// few transactions a step ticks), which costs every step the log's size.
func tickStepRowsFunction(n names) string {
	return `CREATE OR REPLACE FUNCTION ` + n.stepRowsFn + `(max_txs integer)
RETURNS TABLE (before bigint, pos bigint, resource text, op smallint, key text, scope text[], data jsonb, origin text, prev jsonb, tx bigint)
LANGUAGE plpgsql ` + stepSettings + ` AS $tide$
#variable_conflict use_column
DECLARE
  reserved bigint;
  hi bigint;
  moved bigint;
BEGIN
  IF ` + n.pendingExpr() + ` = 0 THEN
    RETURN;
  END IF;
  reserved := ` + n.stepFn + `();
  RETURN QUERY WITH ` + n.tickCTEs() + `
  SELECT h.head, ` + logCols + `
  FROM (SELECT * FROM ` + n.changes + ` l WHERE l.xid = ANY (ARRAY(SELECT o.xid FROM tk_o o WHERE max_txs <= 0 OR o.rn <= max_txs))) l
  JOIN tk_o u ON u.xid = l.xid CROSS JOIN tk_head h
  ORDER BY 2;
  GET DIAGNOSTICS moved = ROW_COUNT;
  IF moved > 0 THEN
    ` + n.lastTick() + tickReservation(n) + `
  END IF;
END
$tide$`
}
