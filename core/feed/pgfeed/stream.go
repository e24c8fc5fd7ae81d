package pgfeed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

var _ feed.SnapshotStreamer = (*Feed)(nil)

// streamPages bounds the pages SnapshotPages reads in one transaction (and
// so how long it holds one snapshot, which holds back vacuum, when the
// caller is slow to take them): the caller goes on with another.
const streamPages = 100

// SnapshotPages reads the scope's rows in key order through one cursor in a
// repeatable-read, read-only transaction, a page (q.Limit rows) per FETCH,
// and passes each page to fn: one plan and one scan of the table for the
// whole snapshot instead of a statement per page, every page consistent at
// the head the transaction's snapshot saw. As Snapshot, it reads the head
// and whether that snapshot sees a change without a position first; if it does, the
// transaction ends and one page is read by Snapshot (which sequences what
// is pending), the caller going on after it. It also ends after the page
// that takes it past streamWindow.
func (f *Feed) SnapshotPages(ctx context.Context, q feed.SnapshotQuery, fn func(feed.SnapshotPage) error) error {
	if q.Limit <= 0 {
		return fmt.Errorf("pgfeed: SnapshotPages limit must be positive, got %d", q.Limit)
	}
	if q.Scope.Schema == nil {
		return errors.New("pgfeed: SnapshotPages scope has no schema")
	}
	p, err := f.planFor(ctx, q.Scope.Schema)
	if err != nil {
		return err
	}
	if f.logical() {
		if err := f.catchUp(ctx); err != nil {
			return err
		}
	}
	sent, err := f.streamSnapshot(ctx, p, q, true, fn)
	if isBadParameter(err) && !sent {
		// As in Snapshot: compare as text only.
		sent, err = f.streamSnapshot(ctx, p, q, false, fn)
	}
	if errors.Is(err, errPending) {
		page, err := f.Snapshot(ctx, q)
		if err != nil {
			return err
		}
		return fn(page)
	}
	if err != nil && !sent && !isBadParameter(err) {
		return f.wrap("snapshot", err)
	}
	return err
}

// errPending says a stream's snapshot sees changes without a position.
var errPending = errors.New("pgfeed: the snapshot sees changes without positions")

// streamSnapshot is one transaction of SnapshotPages; sent reports whether
// fn was called.
func (f *Feed) streamSnapshot(ctx context.Context, p *plan, q feed.SnapshotQuery, typed bool, fn func(feed.SnapshotPage) error) (sent bool, err error) {
	tx, err := f.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var head, pending int64
	if err := tx.QueryRow(ctx, `SELECT `+f.n.headExpr+`, `+f.n.pendingExpr()).Scan(&head, &pending); err != nil {
		return false, err
	}
	if pending > 0 {
		return false, errPending
	}
	where, args := p.rowsWhere(q.Scope, typed, nil)
	if q.HasAfter {
		after, a, err := p.afterKey(q.After, args)
		if err != nil {
			return false, err
		}
		where, args = append(where, after), a
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	// One statement streams the rows (Postgres produces them while they
	// are decoded and sent); it reads at most streamPages pages, after
	// which the caller goes on with another transaction.
	args = append(args, q.Limit*streamPages)
	rows, err := tx.Query(ctx, `SELECT `+strings.Join(p.snapSel, ", ")+` FROM `+p.table+` t`+cond+` ORDER BY `+p.keyOrder("t")+` LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var mem slab
	// A page's arrays come back (feed.SnapshotPage.Release) once the
	// caller is done with them, and hold a later page: a stream allocates
	// its pages' rows and spans a few times, not once a page.
	free := make(chan streamArrays, streamReleased)
	newPage := func() feed.SnapshotPage {
		var a streamArrays
		select {
		case a = <-free:
		default:
			n := min(q.Limit, 1024)
			a = streamArrays{make([]feed.Change, 0, n), make([]protocol.ValueSpan, 0, n*len(p.cols))}
		}
		return feed.SnapshotPage{Pos: feed.Position(head), Rows: a.rows[:0], Spans: a.spans[:0]}
	}
	send := func(page feed.SnapshotPage) error {
		var released atomic.Bool
		page.Release = func() {
			if released.Swap(true) {
				return
			}
			select {
			case free <- streamArrays{page.Rows, page.Spans}:
			default:
			}
		}
		sent = true
		return fn(page)
	}
	page, total := newPage(), 0
	for rows.Next() {
		fds, vals := rows.FieldDescriptions(), rows.RawValues()
		if len(fds) != len(p.snapSel) || len(vals) != len(fds) {
			return sent, fmt.Errorf("pgfeed: snapshot: %d result columns, want %d", len(fds), len(p.snapSel))
		}
		c, err := p.decodeSnapshotRow(fds, vals, &mem, &page)
		if err != nil {
			return sent, err
		}
		c.Resource, c.Pos = q.Scope.Schema.Name, page.Pos
		page.Rows = append(page.Rows, c)
		if total++; len(page.Rows) == q.Limit {
			if err := send(page); err != nil {
				return sent, err
			}
			page, mem = newPage(), slab{}
		}
	}
	if err := rows.Err(); err != nil {
		return sent, err
	}
	if total == q.Limit*streamPages {
		return sent, nil // stopped after a full page: the caller goes on
	}
	return sent, send(page) // the last page, shorter than q.Limit
}

// streamReleased bounds the released pages a stream keeps for later ones:
// the pages the caller holds at once (read ahead, being encoded).
const streamReleased = 4

// streamArrays are the arrays of a released page.
type streamArrays struct {
	rows  []feed.Change
	spans []protocol.ValueSpan
}
