package pgfeed

import (
	"context"
	"errors"
	"fmt"
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
		sql := `SELECT f.floor, (SELECT count(*) FROM (SELECT 1 FROM ` + f.n.changes + ` WHERE ` + where + ` LIMIT $3) c) FROM ` + f.floorFrom(s.Name)
		var floor, count int64
		if err := f.pool.QueryRow(ctx, sql, args...).Scan(&floor, &count); err != nil {
			return feed.Counts{}, f.wrap("count", err)
		}
		if floor < 0 {
			return feed.Counts{}, fmt.Errorf("pgfeed: Count: resource %s has no capture installed in schema %s: run Migrate with its schema", s.Name, f.opts.Schema)
		}
		if q.After < feed.Position(floor) {
			return feed.Counts{}, feed.ErrCursorExpired
		}
		n.Changes = int(count)
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
