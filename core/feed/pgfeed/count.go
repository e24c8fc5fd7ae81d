package pgfeed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/tidesync/tide/core/feed"
)

var _ feed.Counter = (*Feed)(nil)

// Count returns how many changes of q.Scope lie in (q.After, q.Until] and
// how many rows the scope holds in its table, each up to its cap. Each is
// one statement that stops at its cap (a LIMIT under the count): the
// changes are read through the change log's index of one condition's
// scope column (or the resource index), the rows through the table's own
// indexes where the conditions have them, so neither costs more than its
// cap's worth of index entries. The changes are counted with the retained
// floor in the same statement: it returns feed.ErrCursorExpired if
// q.After is below it.
func (f *Feed) Count(ctx context.Context, q feed.CountQuery) (feed.Counts, error) {
	s := q.Scope.Schema
	if s == nil {
		return feed.Counts{}, errors.New("pgfeed: Count scope has no schema")
	}
	var n feed.Counts
	if q.MaxChanges > 0 {
		if err := validName(s.Name, 63); err != nil {
			return feed.Counts{}, fmt.Errorf("pgfeed: Count: resource name: %w", err)
		}
		where, args := changesWhere(q.Scope, []any{pos(q.After), pos(q.Until), q.MaxChanges})
		count, err := f.countChangesWhere(ctx, "Count", s.Name, q.After, `SELECT 1 FROM `+f.n.ticked("$1", "$2", where, "$3")+` LIMIT $3`, args)
		if err != nil {
			return feed.Counts{}, err
		}
		n.Changes = count
	}
	if q.MaxRows > 0 {
		p, err := f.planFor(ctx, s)
		if err != nil {
			return feed.Counts{}, err
		}
		rows, err := f.countRows(ctx, p, q.Scope, q.MaxRows, true)
		if isBadParameter(err) {
			// As in Snapshot: a value the column's type cannot hold
			// matches no row; compare as text only.
			rows, err = f.countRows(ctx, p, q.Scope, q.MaxRows, false)
		}
		if err != nil {
			if isBadParameter(err) {
				return feed.Counts{}, err
			}
			return feed.Counts{}, f.wrap("count", err)
		}
		n.Rows = rows
	}
	return n, nil
}

var _ feed.Sampler = (*Feed)(nil)

// SampleChanges returns how many of the positions q.At hold a change of
// q.Scope: one statement that looks each position up in the change log,
// with the retained floor, so it costs a lookup per position whatever the
// backlog's size. It returns feed.ErrCursorExpired if q.After is below the
// floor.
func (f *Feed) SampleChanges(ctx context.Context, q feed.SampleQuery) (int, error) {
	if err := feed.CheckSample(q); err != nil {
		return 0, err
	}
	s := q.Scope.Schema
	if err := validName(s.Name, 63); err != nil {
		return 0, fmt.Errorf("pgfeed: SampleChanges: resource name: %w", err)
	}
	at := make([]int64, len(q.At))
	until := q.After
	for i, p := range q.At {
		at[i], until = pos(p), max(until, p)
	}
	where, args := changesWhere(q.Scope, []any{pos(q.After), pos(until), at})
	// One probe a position: given pos = ANY(…) beside the scope's
	// conditions, the planner reads the whole span through an index.
	return f.countChangesWhere(ctx, "SampleChanges", s.Name, q.After, `SELECT 1 FROM (SELECT DISTINCT pg_catalog.unnest($3::bigint[]) AS p) a
CROSS JOIN LATERAL (SELECT t.xids, t.firsts FROM `+f.n.ticks+` t WHERE t.pos <= a.p ORDER BY t.pos DESC LIMIT 1) t
CROSS JOIN LATERAL (SELECT u.xid, u.first FROM unnest(t.xids, t.firsts) u(xid, first) WHERE u.first <= a.p ORDER BY u.first DESC LIMIT 1) u
JOIN `+f.n.changes+` l ON l.xid = u.xid AND l.ord = a.p - u.first
WHERE `+where+` AND a.p > $1 AND a.p <= $2`, args)
}

// countChangesWhere counts the rows of rows, a query of the change log
// of a resource's changes after after, in the statement that reads the
// resource's retained floor: feed.ErrCursorExpired if after is below it.
// what names the caller in errors.
func (f *Feed) countChangesWhere(ctx context.Context, what, resource string, after feed.Position, rows string, args []any) (int, error) {
	var floor, count int64
	err := f.pool.QueryRow(ctx, `SELECT f.floor, (SELECT count(*) FROM (`+rows+`) c) FROM `+f.floorFrom(resource), args...).Scan(&floor, &count)
	if err != nil {
		return 0, f.wrap(what, err)
	}
	if floor < 0 {
		return 0, fmt.Errorf("pgfeed: %s: resource %s has no capture installed in schema %s: run Migrate with its schema", what, resource, f.opts.Schema)
	}
	if after < feed.Position(floor) {
		return 0, feed.ErrCursorExpired
	}
	return int(count), nil
}

// countRows counts the table's rows of sc, up to max.
func (f *Feed) countRows(ctx context.Context, p *plan, sc feed.Scope, max int, typed bool) (int, error) {
	where, args := p.rowsWhere(sc, typed, []any{max})
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	var count int64
	err := f.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+p.table+` t`+cond+` LIMIT $1) r`, args...).Scan(&count)
	return int(count), err
}

var _ feed.RowEstimator = (*Feed)(nil)

// EstimateRows estimates the rows of the table of s as Postgres's planner
// does: the density of its last VACUUM or ANALYZE (pg_class.reltuples per
// relpages) times the table's current size in pages, so rows added since
// are counted by the pages they fill. It cannot tell (ok false) for a
// table never vacuumed or analyzed, an empty one, or one with inheritance
// children or partitions (whose rows the parent's statistics leave out).
func (f *Feed) EstimateRows(ctx context.Context, s *feed.Schema) (int, bool, error) {
	if s == nil {
		return 0, false, errors.New("pgfeed: EstimateRows has no schema")
	}
	p, err := f.planFor(ctx, s)
	if err != nil {
		return 0, false, err
	}
	var (
		tuples      float64
		pages, now  int64
		hasChildren bool
	)
	err = f.pool.QueryRow(ctx, `SELECT c.reltuples::float8, c.relpages::int8, c.relhassubclass,
 pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::int8
FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`, p.table).Scan(&tuples, &pages, &hasChildren, &now)
	if err != nil {
		return 0, false, f.wrap("estimate rows", err)
	}
	if tuples < 0 || pages <= 0 || hasChildren {
		return 0, false, nil
	}
	n := math.Ceil(tuples / float64(pages) * float64(max(now, 1)))
	return int(min(n, 1<<40)), true, nil
}
