package pgfeed

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
)

var _ feed.LastChanger = (*Feed)(nil)

// Bounds of LastChange: the newest changes of the key in its scope it
// considers, and the newest ticks it reads to find their positions.
const (
	lastChangeCandidates = 16
	lastChangeTicks      = 100_000
)

// LastChange returns the last sequenced change of q.Key in q.Scope's first
// column value, newest transactions first (the change log's index checks
// the resource and that value without reading other rows; on a large log
// the planner may read it whole instead, about 80 ms a million changes):
// it needs the row's scope (q.Scope, one value per scope column) and answers
// not found (ok false) without it, for a resource without scope columns,
// or when the change is older than the newest lastChangeTicks ticks. A
// change committed but not sequenced yet is not reported. A change that
// moved the row out of q.Scope's first column value is not seen from it.
func (f *Feed) LastChange(ctx context.Context, q feed.KeyQuery) (feed.Change, bool, error) {
	s := q.Schema
	if s == nil {
		return feed.Change{}, false, errors.New("pgfeed: LastChange query has no schema")
	}
	if len(s.Scope) == 0 || len(q.Scope) != len(s.Scope) {
		return feed.Change{}, false, nil
	}
	for _, v := range append([]string{q.Key}, q.Scope[0]) {
		if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return feed.Change{}, false, nil // the log cannot hold it
		}
	}
	sql := `SELECT p.pos, l.op, l.key, l.scope, l.data::text, coalesce(l.origin, '')
FROM (SELECT * FROM ` + f.n.changes + ` l
  WHERE l.resource = ` + quoteLit(s.Name) + ` AND l.scope[1] = $1 AND l.key = $2
  ORDER BY l.xid DESC, l.ord DESC LIMIT ` + strconv.Itoa(lastChangeCandidates) + `) l
CROSS JOIN LATERAL (
  SELECT u.first + l.ord AS pos
  FROM (SELECT t.xids, t.firsts FROM ` + f.n.ticks + ` t ORDER BY t.pos DESC LIMIT ` + strconv.Itoa(lastChangeTicks) + `) t
  CROSS JOIN LATERAL unnest(t.xids, t.firsts) u(xid, first)
  WHERE u.xid = l.xid LIMIT 1) p
ORDER BY p.pos DESC LIMIT 1`
	var (
		c     feed.Change
		pos   int64
		op    int16
		data  *string
		scope []string
	)
	err := f.pool.QueryRow(ctx, sql, q.Scope[0], q.Key).Scan(&pos, &op, &c.Key, &scope, &data, &c.Origin)
	if errors.Is(err, pgx.ErrNoRows) {
		return feed.Change{}, false, nil
	}
	if err != nil {
		return feed.Change{}, false, f.wrap("last change", err)
	}
	c.Pos, c.Op, c.Resource, c.Scope = feed.Position(pos), feed.Op(op), s.Name, scope
	if data != nil {
		c.Row = []byte(*data)
	}
	return c, true, nil
}
