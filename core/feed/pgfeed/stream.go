package pgfeed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
)

var _ feed.SnapshotStreamer = (*Feed)(nil)

// streamWindow bounds how long SnapshotPages keeps one transaction (and so
// one snapshot, which holds back vacuum) open: past it, it stops after the
// page it is at, and the caller goes on with another.
const streamWindow = time.Second

// SnapshotPages reads the scope's rows in key order through one cursor in a
// repeatable-read, read-only transaction, a page (q.Limit rows) per FETCH,
// and passes each page to fn: one plan and one scan of the table for the
// whole snapshot instead of a statement per page, every page consistent at
// the head the transaction's snapshot saw. As Snapshot, it reads the head
// and whether that snapshot sees any outbox row first; if it does, the
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

// errPending says a stream's snapshot sees outbox rows.
var errPending = errors.New("pgfeed: the snapshot sees changes without positions")

// streamSnapshot is one transaction of SnapshotPages; sent reports whether
// fn was called.
func (f *Feed) streamSnapshot(ctx context.Context, p *plan, q feed.SnapshotQuery, typed bool, fn func(feed.SnapshotPage) error) (sent bool, err error) {
	start := time.Now()
	tx, err := f.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var head, pending int64
	if err := tx.QueryRow(ctx, `SELECT `+f.n.headExpr+`, (SELECT count(*) FROM (SELECT 1 FROM `+f.n.outbox+` LIMIT 1) o)`).Scan(&head, &pending); err != nil {
		return false, err
	}
	if pending > 0 {
		return false, errPending
	}
	where, args := p.rowsWhere(q.Scope, typed, nil)
	if q.HasAfter {
		args = append(args, q.After)
		where = append(where, "t."+p.key+" > $"+strconv.Itoa(len(args)))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	query := `SELECT ` + strings.Join(p.snapSel, ", ") + ` FROM ` + p.table + ` t` + cond + ` ORDER BY t.` + p.key
	// pgx caches a statement's result description by its text: the
	// cursor is named after its query, so one FETCH text always has the
	// same result columns.
	sum := sha256.Sum256([]byte(query))
	cursor := "tide_snapshot_" + hex.EncodeToString(sum[:8])
	if _, err := tx.Exec(ctx, `DECLARE `+cursor+` NO SCROLL CURSOR FOR `+query, args...); err != nil {
		return false, err
	}
	fetch := "FETCH " + strconv.Itoa(q.Limit) + " FROM " + cursor
	for {
		rows, err := tx.Query(ctx, fetch)
		if err != nil {
			return sent, err
		}
		page, err := f.decodeRows(rows, p, q)
		if err != nil {
			return sent, err
		}
		page.Pos = feed.Position(head)
		for i := range page.Rows {
			page.Rows[i].Pos = page.Pos
		}
		sent = true
		if err := fn(page); err != nil {
			return sent, err
		}
		if len(page.Rows) < q.Limit || time.Since(start) > streamWindow {
			return sent, nil
		}
	}
}
