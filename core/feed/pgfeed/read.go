package pgfeed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// pos converts a position to a bound parameter. Positions come from a
// bigint sequence, so anything larger is past every change.
func pos(p feed.Position) int64 {
	if p > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(p)
}

// Replay returns up to q.Limit changes of q.Scope with q.After < Pos <=
// q.Until, in position order. The query is built from the scope's declared
// columns only; every condition value is a bound parameter. It looks
// each transaction's changes of the scope up in the change log's index.
// It returns feed.ErrCursorExpired if
// q.After is below the retained floor, checked in the same statement as the
// read, so a concurrent Prune cannot open a silent gap.
func (f *Feed) Replay(ctx context.Context, q feed.ReplayQuery) ([]feed.Change, error) {
	if q.Limit <= 0 {
		return nil, fmt.Errorf("pgfeed: Replay limit must be positive, got %d", q.Limit)
	}
	s := q.Scope.Schema
	if s == nil {
		return nil, errors.New("pgfeed: Replay scope has no schema")
	}
	if err := validName(s.Name, 63); err != nil {
		return nil, fmt.Errorf("pgfeed: Replay: resource name: %w", err)
	}
	sql, args := f.replaySQL(q)
	// The page is read in position order from an index, whatever the
	// planner estimates (see orderedRead).
	b := &pgx.Batch{}
	b.Queue(orderedRead)
	b.Queue(sql, args...)
	br := f.pool.SendBatch(ctx, b)
	var floor int64
	var out []feed.Change
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			floor, out, err = scanChanges(rows, s.Name)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, f.wrap("replay", err)
	}
	if floor < 0 {
		// Without a capture, the log holds nothing of the resource: an
		// empty replay would be a silent gap.
		return nil, fmt.Errorf("pgfeed: Replay: resource %s has no capture installed in schema %s: run Migrate with its schema", s.Name, f.opts.Schema)
	}
	if q.After < feed.Position(floor) {
		return nil, feed.ErrCursorExpired
	}
	return out, nil
}

// orderedRead keeps the planner, for the rest of a pipelined batch (one
// implicit transaction), from reading a page of the change log with a
// bitmap scan and a sort, so that it reads it in position order from an
// index and stops at the page's end. Postgres picks the bitmap scan when it
// expects the scope to have fewer changes in the range than a page holds:
// for a condition compared with each of several values in turn (replaySQL),
// or with statistics taken before the log grew (an empty log analyzed, then
// 100,000 changes sequenced). The bitmap scan then reads every change of
// the scope up to the range's end and sorts them for each page: 78 ms for a
// page of 1,000 out of 96,000 in one measurement, against 0.7 ms in order.
// In order, a page never reads more than the changes it holds plus those of
// other scopes between them; where the estimate was right, the bitmap scan
// would have saved little. Nor does it read the log whole (a sequential
// scan, joined by hash to the ticks' transactions), which the planner may
// prefer when it expects each of a few transactions to have many changes:
// the read looks each transaction up in the log's index, as the steps do
// (stepSettings, and JIT off for the same reason).
const orderedRead = `SELECT pg_catalog.set_config('enable_bitmapscan', 'off', true), pg_catalog.set_config('enable_seqscan', 'off', true), pg_catalog.set_config('jit', 'off', true)`

// replaySQL builds the replay statement of q and its arguments: the
// ticks after q.After in position order, each joined to its transactions'
// changes of the scope through the change log's index (changes_tx: the
// transaction, then the resource and the first scope value), until the
// page is full.
func (f *Feed) replaySQL(q feed.ReplayQuery) (string, []any) {
	args := []any{pos(q.After), pos(q.Until), q.Limit}
	where, args := changesWhere(q.Scope, args)
	page := `SELECT * FROM ` + f.n.ticked("$1", "$2", where, "$3") + ` ORDER BY c.tick, c.pos LIMIT $3`
	sql := `SELECT f.floor, coalesce(c.pos, 0), ''::text, coalesce(c.op, 0), coalesce(c.key, ''), c.scope, c.data, coalesce(c.origin, ''), c.prev, coalesce(c.tx, 0)
FROM ` + f.floorFrom(q.Scope.Schema.Name) + `
LEFT JOIN LATERAL (` + page + `) c ON true ORDER BY c.pos`
	return sql, args
}

// floorFrom is a FROM item of one row, f.floor: the resource's retained
// floor, or -1 when the resource has no capture installed.
func (f *Feed) floorFrom(resource string) string {
	return `(SELECT (SELECT CASE WHEN r.floor IS NULL THEN -1 ELSE greatest(m.floor, r.floor) END
  FROM ` + f.n.meta + ` m LEFT JOIN ` + f.n.resources + ` r ON r.name = ` + quoteLit(resource) + `) AS floor) f`
}

// changesWhere returns the condition selecting the change log rows (l)
// of sc, adding its parameters to args.
func changesWhere(sc feed.Scope, args []any) (string, []any) {
	var b strings.Builder
	b.WriteString("l.resource = " + quoteLit(sc.Schema.Name))
	conds, none := storable(sc.Conds)
	if none {
		b.WriteString(" AND false")
	}
	for _, c := range conds {
		col := "l.scope[" + strconv.Itoa(c.Col+1) + "]"
		if len(c.Values) == 1 {
			args = append(args, c.Values[0])
			b.WriteString(" AND " + col + " = $" + strconv.Itoa(len(args)))
			continue
		}
		args = append(args, slices.Compact(slices.Sorted(slices.Values(c.Values))))
		b.WriteString(" AND " + col + " = ANY($" + strconv.Itoa(len(args)) + ")")
	}
	return b.String(), args
}

// Snapshot returns up to q.Limit of the scope's current rows with keys after
// q.After (when q.HasAfter), in the key column's order, read from the
// resource's table. One statement reads the rows and the change log's head,
// so it sees one snapshot of the database: the page is exactly the state at
// the head it reports (the capture commits a row's change in the row's own
// transaction, and committed positions form a prefix). Conditions compare
// the table's columns with bound parameters, typed as the columns (so the
// table's own indexes serve them), and also as canonical text, so a
// snapshot matches exactly the rows whose changes the same scope replays. A
// value the column's type cannot hold (say "x" for a uuid column) matches no
// row: the page is then read comparing as text only.
func (f *Feed) Snapshot(ctx context.Context, q feed.SnapshotQuery) (feed.SnapshotPage, error) {
	if q.Limit <= 0 {
		return feed.SnapshotPage{}, fmt.Errorf("pgfeed: Snapshot limit must be positive, got %d", q.Limit)
	}
	if q.Scope.Schema == nil {
		return feed.SnapshotPage{}, errors.New("pgfeed: Snapshot scope has no schema")
	}
	p, err := f.planFor(ctx, q.Scope.Schema)
	if err != nil {
		return feed.SnapshotPage{}, err
	}
	if f.logical() {
		if err := f.catchUp(ctx); err != nil {
			return feed.SnapshotPage{}, err
		}
	}
	page, err := f.snapshot(ctx, p, q, true)
	if isBadParameter(err) {
		// A condition value the column's type cannot hold (say "x" for a
		// uuid column) matches no row; the values it can hold may. Compare
		// as text only, which cannot fail.
		page, err = f.snapshot(ctx, p, q, false)
	}
	return page, err
}

// snapshot reads one snapshot page; typed says whether conditions are also
// compared in the columns' types, so the table's indexes serve them.
//
// The page must be exactly the state at the position it reports, yet a
// transaction may have committed without a position yet (it waits for the
// sequencer). The page is first read by one statement that also checks
// whether its snapshot sees any change without a position: if none, every
// transaction it sees has its positions at or below the head it read, and
// the page is exact, read without any lock. Otherwise the page is read
// again by a statement that is itself a sequencing step: holding the
// sequencing lock (taken by the statement before, so its snapshot sees
// every earlier step), it ticks every change its snapshot sees without a
// position and reports the head past them.
func (f *Feed) snapshot(ctx context.Context, p *plan, q feed.SnapshotQuery, typed bool) (feed.SnapshotPage, error) {
	page, pending, err := f.snapshotPage(ctx, f.pool, p, q, typed, false)
	if err == nil && pending > 0 && !f.opts.brokenCapture {
		err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT "+f.n.stepFn+"()"); err != nil {
				return err
			}
			var moved int64
			var err error
			page, moved, err = f.snapshotPage(ctx, tx, p, q, typed, true)
			if err != nil || moved == 0 {
				return err
			}
			// Tailers learn of the new positions as from the sequencer.
			_, err = tx.Exec(ctx, "SELECT pg_catalog.pg_notify($1, '')", f.n.channel)
			return err
		})
	}
	if err != nil {
		if isBadParameter(err) {
			return feed.SnapshotPage{}, err
		}
		return feed.SnapshotPage{}, f.wrap("snapshot", err)
	}
	for i := range page.Rows {
		page.Rows[i].Pos = page.Pos
	}
	return page, nil
}

// snapshotPage runs the snapshot statement (see snapshotSQL) on q and
// returns the page and the statement's count: whether it saw changes
// without a position (0 or 1), or, with sequence, the transactions it
// ticked.
func (f *Feed) snapshotPage(ctx context.Context, q querier, p *plan, sq feed.SnapshotQuery, typed, sequence bool) (feed.SnapshotPage, int64, error) {
	flat := !sequence
	page, count, found, err := f.readSnapshot(ctx, q, p, sq, typed, sequence, flat)
	if err == nil && flat && !found {
		// The flat statement reports the head only with a row; an empty
		// page is read again by one that reports it without.
		page, count, _, err = f.readSnapshot(ctx, q, p, sq, typed, sequence, false)
	}
	return page, count, err
}

// readSnapshot runs one snapshot statement and decodes its rows; found
// reports whether it returned any row at all (the flat statement returns
// none for an empty page, so no head either).
func (f *Feed) readSnapshot(ctx context.Context, q querier, p *plan, sq feed.SnapshotQuery, typed, sequence, flat bool) (page feed.SnapshotPage, count int64, found bool, err error) {
	sql, args, err := f.snapshotSQL(p, sq, typed, sequence, flat)
	if err != nil {
		return feed.SnapshotPage{}, 0, false, err
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return feed.SnapshotPage{}, 0, false, err
	}
	defer rows.Close()
	page.Rows = make([]feed.Change, 0, min(sq.Limit, 1024))
	var mem slab
	for rows.Next() {
		found = true
		fds, vals := rows.FieldDescriptions(), rows.RawValues()
		if len(fds) != snapFixed+len(p.snapSel) || len(vals) != len(fds) {
			return feed.SnapshotPage{}, 0, false, fmt.Errorf("pgfeed: snapshot: %d result columns, want %d", len(fds), snapFixed+len(p.snapSel))
		}
		head, err := rawInt8(fds[0], vals[0])
		if err != nil {
			return feed.SnapshotPage{}, 0, false, err
		}
		if count, err = rawInt8(fds[1], vals[1]); err != nil {
			return feed.SnapshotPage{}, 0, false, err
		}
		page.Pos = feed.Position(head)
		if len(vals[2]) != 1 || (vals[2][0] != 1 && vals[2][0] != 't') {
			continue // the empty row of the LEFT JOIN: no row found
		}
		c, err := p.decodeSnapshotRow(fds[snapFixed:], vals[snapFixed:], &mem, &page)
		if err != nil {
			return feed.SnapshotPage{}, 0, false, err
		}
		c.Resource = sq.Scope.Schema.Name
		page.Rows = append(page.Rows, c)
	}
	if err := rows.Err(); err != nil {
		return feed.SnapshotPage{}, 0, false, err
	}
	return page, count, found, nil
}

// decodeSnapshotRow decodes one row's values of plan.snapSel into an
// upsert (without resource and position), keeping what it keeps in mem: the
// row's JSON is rendered into mem in place, and the key and scope values
// that the JSON holds verbatim are strings of it rather than copies. The
// spans of the row's values are appended to page's (see
// feed.SnapshotPage.Spans).
func (p *plan) decodeSnapshotRow(fds []pgconn.FieldDescription, sel [][]byte, mem *slab, page *feed.SnapshotPage) (feed.Change, error) {
	n := len(page.Spans)
	page.Spans = slices.Grow(page.Spans, len(p.cols))[:n+len(p.cols)]
	spans := page.Spans[n:]
	row, err := appendSnapshotRow(mem.free(snapshotRowRoom), p.snap, fds[:len(p.snap)], sel[:len(p.snap)], spans)
	if err != nil {
		page.Spans = page.Spans[:n]
		return feed.Change{}, err
	}
	c := feed.Change{Op: feed.OpUpsert, Row: mem.keep(row)}
	c.Key = p.textOf(c.Row, spans, sel, p.keyAt, mem)
	c.Scope = []string{}
	if len(p.scopeAt) > 0 {
		c.Scope = mem.strings(len(p.scopeAt))
	}
	for i, j := range p.scopeAt {
		c.Scope[i] = p.textOf(c.Row, spans, sel, j, mem)
	}
	return c, nil
}

// snapshotRowRoom is the free space a snapshot row is rendered into before
// the slab starts a new chunk: a longer row is rendered anyway, then copied.
const snapshotRowRoom = 1024

// textOf returns the text of snapSel's value j of a row rendered as row
// with spans: a string of row where the row holds that text verbatim (a
// text column's JSON string without escapes), else a copy in mem.
func (p *plan) textOf(row []byte, spans []protocol.ValueSpan, sel [][]byte, j int, mem *slab) string {
	if j < len(p.snap) {
		sp := spans[p.snap[j].col]
		if sp.Verbatim && int(sp.End)-int(sp.Start) == len(sel[j])+2 && int(sp.End) <= len(row) {
			if len(sel[j]) == 0 {
				return ""
			}
			return unsafe.String(&row[sp.Start+1], len(sel[j]))
		}
	}
	return mem.string(sel[j])
}

// rawInt8 decodes a bigint result value in either format.
func rawInt8(fd pgconn.FieldDescription, v []byte) (int64, error) {
	if fd.Format == pgtype.BinaryFormatCode {
		if len(v) != 8 {
			return 0, errBadBinary
		}
		return int64(binary.BigEndian.Uint64(v)), nil
	}
	return strconv.ParseInt(string(v), 10, 64)
}

// snapFixed is the number of result columns of a snapshot statement before
// the row's own (plan.snapSel): head, count, found.
const snapFixed = 3

// snapshotSQL builds the snapshot statement of q and its arguments: the
// head, the count, whether a row was found, then the row's plan.snapSel.
// The second column says whether its snapshot sees a change without a
// position (0 or 1); with sequence, the statement ticks them all (a
// sequencing step: run it holding the sequencing lock), counts their
// transactions, and reports the head past them.
//
// The flat statement is a plain ordered read of the table with the head
// and the count as once-evaluated subqueries in every row: about half the
// cost in Postgres of the other, which joins the page laterally to a row
// of the head so that an empty page still reports it, and sorts again. The
// flat one is read first; an empty page, or one read with sequence (whose
// moves must be counted even without rows), is read by the other.
func (f *Feed) snapshotSQL(p *plan, q feed.SnapshotQuery, typed, sequence, flat bool) (string, []any, error) {
	args := []any{q.Limit}
	where, args := p.rowsWhere(q.Scope, typed, args)
	if q.HasAfter {
		after, a, err := p.afterKey(q.After, args)
		if err != nil {
			return "", nil, err
		}
		where, args = append(where, after), a
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	if flat {
		return `SELECT ` + f.n.headExpr + `, ` + f.n.pendingExpr() + `, true, ` + strings.Join(p.snapSel, ", ") + `
FROM ` + p.table + ` t` + cond + ` ORDER BY ` + p.keyOrder("t") + ` LIMIT $1`, args, nil
	}
	head, count := "h.head", f.n.pendingExpr()
	with := ""
	if sequence {
		head, count, with = "greatest(h.head, coalesce((SELECT max(o.first + o.n) - 1 FROM tk_o o), 0))", "(SELECT count(*) FROM tk_o)", "WITH "+f.n.tickCTEs()+"\n"
	}
	inner := make([]string, len(p.snapSel))
	outer := make([]string, len(p.snapSel))
	for j, e := range p.snapSel {
		inner[j] = e + " AS c" + strconv.Itoa(j)
		outer[j] = "r.c" + strconv.Itoa(j)
	}
	sk := make([]string, len(p.keys))
	rsk := make([]string, len(p.keys))
	for i, k := range p.keys {
		sk[i] = "t." + k + " AS sk" + strconv.Itoa(i)
		rsk[i] = "r.sk" + strconv.Itoa(i)
	}
	sql := with + `SELECT ` + head + `, ` + count + `, r.sk0 IS NOT NULL, ` + strings.Join(outer, ", ") + `
FROM (SELECT ` + f.n.headExpr + ` AS head) h
LEFT JOIN LATERAL (SELECT ` + strings.Join(inner, ", ") + `, ` + strings.Join(sk, ", ") + `
 FROM ` + p.table + ` t` + cond + ` ORDER BY ` + p.keyOrder("t") + ` LIMIT $1) r ON true ORDER BY ` + strings.Join(rsk, ", ")
	return sql, args, nil
}

// rowsWhere returns the conditions (to be joined with AND) selecting the
// rows of sc from the table aliased t, adding their parameters to args:
// compared as canonical text, and with typed also in the columns' types so
// that the table's indexes serve them (see Snapshot).
func (p *plan) rowsWhere(sc feed.Scope, typed bool, args []any) ([]string, []any) {
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var where []string
	conds, none := storable(sc.Conds)
	if none {
		where = append(where, "false")
	}
	for _, c := range conds {
		col := "t." + p.scope[c.Col]
		if len(c.Values) == 1 {
			if typed {
				where = append(where, col+" = "+param(c.Values[0]))
			}
			where = append(where, col+"::text = "+param(c.Values[0]))
			continue
		}
		if typed {
			ps := make([]string, len(c.Values))
			for i, v := range c.Values {
				ps[i] = param(v)
			}
			where = append(where, col+" IN ("+strings.Join(ps, ", ")+")")
		}
		where = append(where, col+"::text = ANY("+param(c.Values)+")")
	}
	return where, args
}

// isBadParameter reports whether err says a bound parameter is not a valid
// value of its column's type (a data exception raised while Postgres read
// the parameter, such as "x" for a uuid column).
func isBadParameter(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") && strings.Contains(pgErr.Where, "portal parameter $")
}

// storable drops the condition values that no text column can hold (a NUL
// byte, invalid UTF-8): they match no row and no change, and Postgres would
// refuse them as parameters. none reports a condition left without values,
// so the scope matches nothing.
func storable(conds []feed.Cond) (out []feed.Cond, none bool) {
	ok := func(v string) bool { return strings.IndexByte(v, 0) < 0 && utf8.ValidString(v) }
	for _, c := range conds {
		if !slices.ContainsFunc(c.Values, func(v string) bool { return !ok(v) }) {
			out = append(out, c)
			continue
		}
		var vals []string
		for _, v := range c.Values {
			if ok(v) {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			return nil, true
		}
		out = append(out, feed.Cond{Col: c.Col, Values: vals})
	}
	return out, false
}
