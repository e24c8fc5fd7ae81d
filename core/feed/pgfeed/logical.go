package pgfeed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed/logrepl"
)

// Capture is how a Feed records the changes of synced tables.
type Capture int

// The capture modes.
const (
	// CaptureTrigger records each change with a row trigger, in the
	// writer's own transaction (see captureDDL). It works on any Postgres.
	CaptureTrigger Capture = iota
	// CaptureLogical reads the changes from the database's logical
	// replication stream (pgoutput, see package logrepl): no trigger runs
	// in the app's transactions. The sequencer's leader runs the slot's
	// one consumer, which writes each committed transaction's changes into
	// the change log with their positions. It needs wal_level = logical,
	// a replication slot (which keeps WAL until the consumer confirms it)
	// and a role allowed to replicate; docs/operations.md compares the
	// two.
	CaptureLogical
)

// String returns "trigger" or "logical".
func (c Capture) String() string {
	switch c {
	case CaptureTrigger:
		return "trigger"
	case CaptureLogical:
		return "logical"
	}
	return "capture(" + strconv.Itoa(int(c)) + ")"
}

// Prefixes of the logical decoding messages tide emits in transactions.
const (
	// originPrefix carries a transaction's client origin (SetClientOrigin).
	originPrefix = "tide.origin"
	// markPrefix marks a point in the WAL that Head waits for the consumer
	// to pass.
	markPrefix = "tide.mark"
)

// logical reports whether the feed captures from the replication stream.
func (f *Feed) logical() bool { return f.opts.Capture == CaptureLogical }

// SlotName returns the replication slot of the feed's logical capture
// (Options.Slot).
func (f *Feed) SlotName() string { return f.opts.Slot }

// publication returns the name of the publication of the synced tables.
func (f *Feed) publication() string { return logrepl.PublicationName(f.opts.Schema) }

// logicalStateDDL creates the table where the consumer records the end of
// the last transaction it wrote into the change log.
func (n names) logicalStateDDL() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + n.logicalState + ` (
  id integer PRIMARY KEY CHECK (id = 1),
  lsn pg_lsn NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT pg_catalog.now())`,
		`INSERT INTO ` + n.logicalState + ` (id, lsn) VALUES (1, '0/0') ON CONFLICT (id) DO NOTHING`,
	}
}

// migrateLogical sets up the logical capture of schemas: the consumer's
// state table, REPLICA IDENTITY FULL on each table (a delete's change
// carries the whole old row, and a move its old scope), a publication of
// exactly the synced tables (these, and those of the resources an earlier
// Migrate installed, as their triggers would stay in the trigger mode),
// and the slot.
func (f *Feed) migrateLogical(ctx context.Context, conn logrepl.DB, schemas []*feed.Schema) error {
	if err := logrepl.CheckWALLevel(ctx, conn); err != nil {
		return fmt.Errorf("pgfeed: migrate: %w", err)
	}
	for _, stmt := range f.n.logicalStateDDL() {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return f.wrap("migrate: logical state", err)
		}
	}
	var tables []string
	seen := map[string]bool{}
	for _, s := range schemas {
		t := tableIdent(s.Table)
		if seen[t] {
			continue
		}
		seen[t] = true
		tables = append(tables, t)
		if err := logrepl.SetReplicaIdentityFull(ctx, conn, t); err != nil {
			return fmt.Errorf("pgfeed: migrate: %w", err)
		}
	}
	rows, err := conn.Query(ctx, `SELECT r.tbl FROM `+f.n.resources+` r`)
	if err != nil {
		return f.wrap("migrate: read resources", err)
	}
	earlier, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return f.wrap("migrate: read resources", err)
	}
	for _, tbl := range earlier {
		t := tableIdent(tbl)
		if seen[t] {
			continue
		}
		seen[t] = true
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", t).Scan(&exists); err != nil {
			return f.wrap("migrate: find "+tbl, err)
		}
		if exists { // a dropped table's resource syncs nothing
			tables = append(tables, t)
		}
	}
	if err := logrepl.EnsurePublication(ctx, conn, f.publication(), tables); err != nil {
		return fmt.Errorf("pgfeed: migrate: %w", err)
	}
	if _, err := logrepl.EnsureSlot(ctx, conn, f.opts.Slot); err != nil {
		return fmt.Errorf("pgfeed: migrate: %w", err)
	}
	return nil
}

// DropSlot drops the feed's replication slot and publication, releasing
// the WAL the slot keeps. Run it when the database stops using logical
// capture for good (tide slot drop): while the slot exists and no
// consumer confirms, the server keeps WAL without bound. It returns an
// error matching logrepl.ErrSlotInUse while a consumer streams from it.
func (f *Feed) DropSlot(ctx context.Context) error {
	if err := logrepl.DropSlot(ctx, f.pool, f.opts.Slot); err != nil {
		return fmt.Errorf("pgfeed: %w", err)
	}
	if err := logrepl.DropPublication(ctx, f.pool, f.publication()); err != nil {
		return fmt.Errorf("pgfeed: %w", err)
	}
	return nil
}

// logicalDDL returns the statements of a resource's capture in logical
// mode: no trigger (one left by the trigger mode goes), and the change log
// indexes of its scope columns.
func (f *Feed) logicalDDL(p *plan) []string {
	stmts := []string{
		"DROP TRIGGER IF EXISTS " + pgx.Identifier{f.triggerName(p.s.Name)}.Sanitize() + " ON " + p.table,
		"DROP TRIGGER IF EXISTS " + pgx.Identifier{f.truncateTrigger()}.Sanitize() + " ON " + p.table,
	}
	for _, s := range f.captureDDL(p) {
		if strings.HasPrefix(s, "CREATE INDEX") {
			stmts = append(stmts, s)
		}
	}
	return stmts
}

// logicalPlan is what the consumer needs of a resource: its plan, and the
// statements that render decoded rows as the capture trigger does.
type logicalPlan struct {
	p     *plan
	types []string // the declared columns' type names (format_type)
	// The statements writing change rows, one row for each element of
	// their array arguments: ord, origin, then each declared column's text
	// (of the row r, then of the old row o), read with the column types.
	// Set-based, so a batch of replicated transactions costs a statement a
	// kind of change, not a statement a change.
	stmts [changeKinds]string
}

// The kinds of change row the consumer writes, each with a statement of
// its own (logicalPlan.stmts).
const (
	kindUpsertNew  = iota // an insert, or an update that moved: prev none
	kindUpsertPrev        // an update in place: prev from o
	kindDeleteOld         // a delete: the row o
	changeKinds
)

// newLogicalPlan builds the statements of p for type names types.
func (f *Feed) newLogicalPlan(p *plan, types []string) *logicalPlan {
	lp := &logicalPlan{p: p, types: types}
	prevs := len(p.s.PrevColumns) > 0
	cols := "ord, resource, op, key, scope, data, origin"
	if prevs {
		cols += ", prev"
	}
	// row reads the alias's columns from the array elements u.c<first>...
	row := func(alias string, first int) string {
		sel := make([]string, len(p.cols))
		for i, c := range p.cols {
			sel[i] = "u.c" + strconv.Itoa(first+i) + "::" + types[i] + " AS " + c
		}
		return "CROSS JOIN LATERAL (SELECT " + strings.Join(sel, ", ") + ") " + alias
	}
	stmt := func(op feed.Op, alias, prev string, withOld bool) string {
		switch {
		case !prevs:
			prev = ""
		case op == feed.OpDelete:
			prev = ", NULL"
		default:
			prev = ", " + prev
		}
		n := len(p.cols)
		from := row(alias, 0)
		if withOld {
			from += " " + row("o", n)
			n *= 2
		}
		unnest := []string{"pg_catalog.unnest($1::integer[])", "pg_catalog.unnest($2::text[])"}
		names := []string{"ord", "origin"}
		for i := range n {
			unnest = append(unnest, "pg_catalog.unnest($"+strconv.Itoa(3+i)+"::text[])")
			names = append(names, "c"+strconv.Itoa(i))
		}
		return "INSERT INTO " + f.n.changes + " (" + cols + ") SELECT u.ord, " + p.resLit + ", " + strconv.Itoa(int(op)) + ", " +
			p.keyExpr(alias) + ", " + p.scopeExpr(alias) + ", " + p.rowExpr(alias) + ", u.origin" + prev +
			" FROM ROWS FROM (" + strings.Join(unnest, ", ") + ") u(" + strings.Join(names, ", ") + ") " + from
	}
	lp.stmts[kindUpsertNew] = stmt(feed.OpUpsert, "r", "'null'::jsonb", false)
	lp.stmts[kindUpsertPrev] = stmt(feed.OpUpsert, "r", p.prevExpr("o"), prevs)
	lp.stmts[kindDeleteOld] = stmt(feed.OpDelete, "o", "", false)
	return lp
}

// changeRows are the change rows of one statement (a plan's kind) waiting
// to be queued: the statement's array arguments, column by column.
// (pgtype.FlatArray and []int32 are encoded without reflection.)
type changeRows struct {
	ords    []int32
	origins pgtype.FlatArray[pgtype.Text]
	cols    []pgtype.FlatArray[pgtype.Text] // each declared column's text (r's, then o's)
}

// add appends a row: ord, origin ("" for none), then the columns' text
// (nil for NULL).
func (r *changeRows) add(ord int, origin string, rows ...[]any) {
	r.ords = append(r.ords, int32(ord))
	r.origins = append(r.origins, pgtype.Text{String: origin, Valid: origin != ""})
	i := 0
	for _, row := range rows {
		for _, v := range row {
			if i == len(r.cols) {
				r.cols = append(r.cols, nil)
			}
			s, ok := v.(string)
			r.cols[i] = append(r.cols[i], pgtype.Text{String: s, Valid: ok})
			i++
		}
	}
}

// errLogicalRow says a decoded change lacks what the capture needs.
var errLogicalRow = errors.New("pgfeed: logical capture")

// values returns the text of the declared columns of row, taking a value
// the server did not send (an unchanged TOASTed value) from old.
func (lp *logicalPlan) values(row, old []logrepl.Column, table string) ([]any, error) {
	out := make([]any, len(lp.p.s.Columns))
	for i, c := range lp.p.s.Columns {
		col, ok := logrepl.Find(row, c.Name)
		if !ok {
			return nil, fmt.Errorf("%w: %s has no column %s in the replication stream", errLogicalRow, table, c.Name)
		}
		if col.Unchanged {
			oc, ok := logrepl.Find(old, c.Name)
			if !ok || oc.Unchanged {
				return nil, fmt.Errorf("%w: %s: the unchanged value of %s was not sent; the table needs REPLICA IDENTITY FULL (Migrate sets it)", errLogicalRow, table, c.Name)
			}
			col = oc
		}
		if col.Value == nil {
			out[i] = nil
		} else {
			out[i] = *col.Value
		}
	}
	return out, nil
}

// same reports whether a and b have the same key parts and scope text.
func (lp *logicalPlan) same(a, b []any) bool {
	for _, ci := range lp.p.s.Keys {
		if a[ci] != b[ci] {
			return false
		}
	}
	for _, ci := range lp.p.s.Scope {
		if a[ci] != b[ci] {
			return false
		}
	}
	return true
}

// consumerState is the consumer's view of the local transaction it is
// writing, across batches while a transaction arrives in pieces.
type consumerState struct {
	plans map[string][]*logicalPlan // by "schema.table"
	tx    pgx.Tx                    // the local transaction, between batches
	ord   int                       // the changes written in it so far
	// Of the replicated transaction being written: skip says it was
	// written before, first is its first change's ord, origin the latest
	// origin it emitted, written the origin its rows so far carry, and
	// mixed whether some carry another.
	skip            bool
	first           int
	origin, written string
	mixed           bool
	// rows are the change rows not yet queued, by plan and kind, in the
	// order their statements were first needed.
	rows    map[*logicalPlan]*[changeKinds]changeRows
	rowsFor []*logicalPlan
}

// pending returns the rows of lp's kind k waiting to be queued.
func (st *consumerState) pending(lp *logicalPlan, k int) *changeRows {
	if st.rows == nil {
		st.rows = map[*logicalPlan]*[changeKinds]changeRows{}
	}
	rs := st.rows[lp]
	if rs == nil {
		rs = &[changeKinds]changeRows{}
		st.rows[lp] = rs
		st.rowsFor = append(st.rowsFor, lp)
	}
	return &rs[k]
}

// flush queues the waiting change rows on b, a statement a plan's kind.
func (st *consumerState) flush(b *pgx.Batch) {
	for _, lp := range st.rowsFor {
		rs := st.rows[lp]
		for k := range rs {
			r := &rs[k]
			if len(r.ords) == 0 {
				continue
			}
			args := make([]any, 0, 2+len(r.cols))
			args = append(args, r.ords, r.origins)
			for _, c := range r.cols {
				args = append(args, c)
			}
			b.Queue(lp.stmts[k], args...)
		}
	}
	clear(st.rows)
	st.rowsFor = st.rowsFor[:0]
}

// logicalPlans reads, on conn, what the consumer needs of every resource
// this feed migrated.
func (f *Feed) logicalPlans(ctx context.Context, conn *pgx.Conn) (map[string][]*logicalPlan, error) {
	out := map[string][]*logicalPlan{}
	var err error
	named := map[string]bool{}
	f.captured.Range(func(k, _ any) bool {
		v, ok := f.plans.Load(k)
		if !ok || named[k.(*feed.Schema).Name] {
			return true // one plan per resource, if Migrate saw two declarations
		}
		p := v.(*plan)
		named[p.s.Name] = true
		var table string
		if err = conn.QueryRow(ctx, `SELECT n.nspname || '.' || c.relname FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::regclass`, p.table).Scan(&table); err != nil {
			return false
		}
		types := make([]string, len(p.s.Columns))
		for i, c := range p.s.Columns {
			if err = conn.QueryRow(ctx, `SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1::regclass AND a.attname = $2 AND NOT a.attisdropped`, p.table, c.Name).Scan(&types[i]); err != nil {
				return false
			}
		}
		out[table] = append(out[table], f.newLogicalPlan(p, types))
		return true
	})
	return out, err
}

// consume runs one term of the logical capture on conn, which holds the
// sequencer role's lock: the slot's consumer, writing the transactions
// into the change log a batch at a time, until the stream or a write fails
// or ctx ends.
func (f *Feed) consume(ctx context.Context, conn *pgx.Conn) error {
	plans, err := f.logicalPlans(ctx, conn)
	if err != nil {
		return err
	}
	cfg := logrepl.Config{
		ConnString:  f.pool.Config().ConnString(),
		Slot:        f.opts.Slot,
		Publication: f.publication(),
		Messages:    true,
	}
	if f.opts.tuneLogical != nil {
		f.opts.tuneLogical(&cfg)
	}
	c, err := logrepl.NewConsumer(cfg)
	if err != nil {
		return err
	}
	st := &consumerState{plans: plans}
	defer func() {
		if st.tx != nil {
			_ = st.tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	return c.RunBatches(ctx, func(ctx context.Context, txs []*logrepl.Tx) error {
		return f.consumeBatch(ctx, conn, st, txs)
	})
}

// consumeBatch writes a batch of transactions into the change log, in one
// local transaction: one commit, one tick giving all their changes
// positions in commit order (a commit group of several whole
// transactions), one record of the end of the last. The consumer confirms
// the slot's position only after that commit, so what it confirms is
// durably logged. A transaction that arrives in pieces keeps the local
// transaction open until the batch holding its last piece. A transaction
// written before (the slot delivers at least once) is skipped: it ended
// at or below the recorded end, or (committed while Migrate switched its
// table from the trigger) the trigger logged it under its own id.
func (f *Feed) consumeBatch(ctx context.Context, conn *pgx.Conn, st *consumerState, txs []*logrepl.Tx) error {
	if st.tx == nil {
		ltx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		st.tx, st.ord = ltx, 0
		clear(st.rows) // rows of a batch that failed went with its transaction
		st.rowsFor = st.rowsFor[:0]
		// The step lock, and the recorded end locked.
		if _, err := ltx.Exec(ctx, `SELECT `+f.n.stepFn+`() FROM `+f.n.logicalState+` s FOR UPDATE OF s`); err != nil {
			return err
		}
	}
	// Which of the transactions that begin here were written before: the
	// trigger's ids are the server's 32-bit ids in the epoch of the local
	// transaction's (they committed before it began).
	var xids []int64
	var commits []string
	for _, tx := range txs {
		if tx.Part == 0 {
			xids = append(xids, int64(tx.XID))
			commits = append(commits, logrepl.FormatLSN(tx.CommitLSN))
		}
	}
	var done []bool
	if len(xids) > 0 {
		if err := st.tx.QueryRow(ctx, `SELECT pg_catalog.array_agg(s.lsn > t.c OR EXISTS (SELECT 1 FROM `+f.n.changes+` ch
    WHERE ch.xid = (CASE WHEN (x.cur & -4294967296) + t.x > x.cur THEN (x.cur & -4294967296) + t.x - 4294967296
      ELSE (x.cur & -4294967296) + t.x END)::text::xid8) ORDER BY t.i)
FROM ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::pg_lsn[])) WITH ORDINALITY AS t(x, c, i),
  `+f.n.logicalState+` s, (SELECT pg_catalog.pg_current_xact_id()::text::bigint AS cur) x`, xids, commits).Scan(&done); err != nil {
			return err
		}
		if len(done) != len(xids) {
			return fmt.Errorf("pgfeed: logical capture: %d answers for %d transactions", len(done), len(xids))
		}
	}
	b := &pgx.Batch{}
	var end uint64 // the end of the batch's last whole transaction
	for _, tx := range txs {
		if tx.Part == 0 {
			st.skip, done = done[0] && !f.opts.logicalRewrite, done[1:]
			st.first, st.origin, st.written, st.mixed = st.ord, "", "", false
		}
		if !tx.More {
			end = tx.EndLSN
		}
		if st.skip {
			if !tx.More {
				f.logicalSkipped.Add(1)
			}
			continue
		}
		for _, m := range tx.Messages {
			if m.Prefix == originPrefix {
				st.origin = string(m.Content)
			}
		}
		if st.ord > st.first && st.origin != st.written {
			st.mixed = true
		}
		st.written = st.origin
		for _, ch := range tx.Changes {
			if err := f.queueChange(st, ch); err != nil {
				return err
			}
		}
		if !tx.More && st.mixed {
			// The transaction named its origin after some of its rows were
			// written: the last one named is the transaction's, as the
			// trigger reads it at commit.
			st.flush(b)
			b.Queue(`UPDATE `+f.n.changes+` SET origin = $1 WHERE xid = pg_catalog.pg_current_xact_id() AND ord >= $2`, nullText(st.origin), st.first)
		}
	}
	st.flush(b)
	more := txs[len(txs)-1].More
	if !more {
		if st.ord > 0 {
			b.Queue(`INSERT INTO `+f.n.ticks+` (pos, next, xids, firsts, snap)
SELECT h.head + 1, h.head + 1 + $1, ARRAY[pg_catalog.pg_current_xact_id()], ARRAY[h.head + 1],
  (x.x::text || ':' || x.x::text || ':')::pg_catalog.pg_snapshot
FROM (SELECT greatest(
    (SELECT t.next - 1 FROM `+f.n.ticks+` t ORDER BY t.pos DESC LIMIT 1),
    (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM `+f.n.seq+` s),
    (SELECT m.floor FROM `+f.n.meta+` m)) AS head) h,
  (SELECT pg_catalog.pg_current_xact_id()::text::bigint + 1 AS x) x`, st.ord)
			b.Queue(`SELECT pg_catalog.pg_notify($1, '')`, f.n.channel)
		}
		b.Queue(`UPDATE `+f.n.logicalState+` SET lsn = greatest(lsn, $1::text::pg_lsn), updated_at = pg_catalog.now() WHERE id = 1`, logrepl.FormatLSN(end))
	}
	if b.Len() > 0 {
		if err := st.tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	if more {
		return nil
	}
	if fault := f.opts.logicalFault; fault != nil {
		if err := fault("commit", st.ord); err != nil {
			return err
		}
	}
	err := st.tx.Commit(ctx)
	st.tx = nil
	if err != nil {
		return err
	}
	if fault := f.opts.logicalFault; fault != nil {
		if err := fault("committed", st.ord); err != nil {
			return err
		}
	}
	if st.ord > 0 {
		f.sequencerSteps.Add(1)
		f.sequenced.Add(int64(st.ord))
	}
	f.ring()
	return nil
}

// nullText is s, or SQL NULL for "".
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// queueChange adds the change rows of one decoded change to those waiting
// in st, as the capture trigger writes them: an update that changes the
// key or the scope is a delete in the old scope and an upsert in the new
// one.
func (f *Feed) queueChange(st *consumerState, ch logrepl.Change) error {
	lps, ok := st.plans[ch.Table]
	if !ok {
		return fmt.Errorf("%w: a change of %s, which no resource of this node syncs: run Migrate with every resource on the nodes that may sequence", errLogicalRow, ch.Table)
	}
	if ch.Op == logrepl.OpTruncate {
		f.log.Warn("pgfeed: TRUNCATE is not captured; subscribers keep the rows it removed until they resync", "schema", f.opts.Schema, "table", ch.Table)
		return nil
	}
	if (ch.Op == logrepl.OpUpdate || ch.Op == logrepl.OpDelete) && (ch.Old == nil || ch.OldKeyOnly) {
		return fmt.Errorf("%w: %s of %s without the old row: the table needs REPLICA IDENTITY FULL (Migrate sets it)", errLogicalRow, ch.Op, ch.Table)
	}
	for _, lp := range lps {
		add := func(k int, rows ...[]any) {
			st.pending(lp, k).add(st.ord, st.origin, rows...)
			st.ord++
		}
		switch ch.Op {
		case logrepl.OpInsert:
			nv, err := lp.values(ch.New, nil, ch.Table)
			if err != nil {
				return err
			}
			add(kindUpsertNew, nv)
		case logrepl.OpDelete:
			ov, err := lp.values(ch.Old, nil, ch.Table)
			if err != nil {
				return err
			}
			add(kindDeleteOld, ov)
		case logrepl.OpUpdate:
			ov, err := lp.values(ch.Old, nil, ch.Table)
			if err != nil {
				return err
			}
			nv, err := lp.values(ch.New, ch.Old, ch.Table)
			if err != nil {
				return err
			}
			switch {
			case !lp.same(ov, nv):
				add(kindDeleteOld, ov)
				add(kindUpsertNew, nv)
			case len(lp.p.s.PrevColumns) > 0:
				add(kindUpsertPrev, nv, ov)
			default:
				add(kindUpsertNew, nv)
			}
		}
	}
	return nil
}

// catchUp waits until the logical capture has written every transaction
// that committed before it was called, so that Head and Snapshot cover
// them, as the trigger mode's inline step does. It writes a mark into the
// WAL (a logical decoding message in a transaction of its own) unless the
// consumer has already passed the WAL's end, and waits for the consumer to
// record a position past it, woken by the feed's notifications. It waits
// as long as ctx allows: while no node runs the consumer, it waits.
func (f *Feed) catchUp(ctx context.Context) error {
	called := time.Now()
	var passed bool
	if err := f.pool.QueryRow(ctx, `SELECT s.lsn >= pg_catalog.pg_current_wal_insert_lsn() FROM `+f.n.logicalState+` s`).Scan(&passed); err != nil {
		return f.notInstalled("wait for the logical capture", err)
	}
	if passed {
		return nil
	}
	mark, err := f.markAfter(ctx, called)
	if err != nil {
		return f.wrap("wait for the logical capture", err)
	}
	wait := time.Millisecond
	for attempt := 0; ; attempt++ {
		wake, err := f.doorbell()
		if err != nil {
			wake = nil // closed: poll
		}
		if err := f.pool.QueryRow(ctx, `SELECT s.lsn > $1::text::pg_lsn FROM `+f.n.logicalState+` s`, mark).Scan(&passed); err != nil {
			return f.wrap("wait for the logical capture", err)
		}
		if passed {
			return nil
		}
		wait = min(2*wait, f.opts.PollInterval)
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// slotWatchInterval is how often every candidate node reads the slot's
// figures for Stats and metrics.
const slotWatchInterval = 10 * time.Second

// slotWatch reads the slot's figures into the feed's Stats until Close:
// on every candidate node, so the WAL a slot keeps shows even while no
// consumer runs.
func (f *Feed) slotWatch() {
	defer f.wg.Done()
	t := time.NewTicker(slotWatchInterval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
		ls, err := f.LogicalStatus(ctx)
		cancel()
		if err == nil {
			f.slotActive.Store(ls.Active)
			f.slotLag.Store(ls.LagBytes)
			f.slotRetained.Store(ls.RetainedBytes)
		}
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// marks coalesces the WAL marks of concurrent catchUp calls: a mark
// written after a call began covers it, so calls that arrive while one is
// written wait for that one instead of writing their own.
type marks struct {
	mu      sync.Mutex
	lsn     string    // the latest mark
	started time.Time // when the statement writing it began
}

// markAfter returns the WAL position of a mark written after called.
func (f *Feed) markAfter(ctx context.Context, called time.Time) (string, error) {
	m := &f.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lsn != "" && !m.started.Before(called) {
		return m.lsn, nil
	}
	started := time.Now()
	var lsn string
	if err := f.pool.QueryRow(ctx, `SELECT pg_catalog.pg_logical_emit_message(true, $1, '')::text`, markPrefix).Scan(&lsn); err != nil {
		return "", err
	}
	m.lsn, m.started = lsn, started
	return lsn, nil
}

// LogicalStatus is the logical capture's progress, for metrics and tide
// status.
type LogicalStatus struct {
	// Slot is the replication slot's name.
	Slot string `json:"slot"`
	// Active is true while a consumer streams from the slot.
	Active bool `json:"active"`
	// LagBytes is the WAL written since the position the consumer last
	// confirmed (pg_current_wal_lsn() - confirmed_flush_lsn).
	LagBytes int64 `json:"lag_bytes"`
	// RetainedBytes is the WAL the slot keeps on the server's disk
	// (pg_current_wal_lsn() - restart_lsn).
	RetainedBytes int64 `json:"retained_bytes"`
	// Skipped counts transactions this node's consumer received again
	// after writing them (delivery is at least once) and skipped.
	Skipped int64 `json:"skipped"`
}

// LogicalStatus reads the slot's lag and retained WAL from
// pg_replication_slots. It returns an error matching logrepl.ErrNoSlot
// when the slot does not exist, and an error when the feed does not
// capture logically.
func (f *Feed) LogicalStatus(ctx context.Context) (LogicalStatus, error) {
	if !f.logical() {
		return LogicalStatus{}, errors.New("pgfeed: the feed captures with triggers, not logical replication")
	}
	s, err := logrepl.ReadSlot(ctx, f.pool, f.opts.Slot)
	if err != nil {
		return LogicalStatus{}, fmt.Errorf("pgfeed: %w", err)
	}
	return LogicalStatus{Slot: f.opts.Slot, Active: s.Active, LagBytes: s.LagBytes, RetainedBytes: s.RetainedBytes, Skipped: f.logicalSkipped.Load()}, nil
}
