package core

import (
	"context"
	"sync"

	"github.com/tidesync/tide/core/feed"
)

// backlogProbe is the smallest backlog the engine may send as a snapshot
// instead: a client resuming fewer positions behind the high-water, or
// whose scope has fewer changes in between, is always replayed (cheap
// anyway, and the client keeps its copy).
const backlogProbe = 10_000

// backlogCountCap bounds the changes counted to compare a backlog with its
// scope: a larger backlog counts as this large, and is sent as a snapshot
// if the scope has at most this many rows.
const backlogCountCap = 1 << 22

// backlogLarger reports whether the subscription's backlog in (from, hw]
// holds at least as many changes as its scopes hold rows (and at least
// backlogProbe), so that sending the rows (a reset, then a snapshot) costs
// less than replaying the changes: a replay reads every change of the
// backlog, a snapshot every row of the scope once.
//
// It asks only when hw is at least backlogProbe positions past from, and
// only a feed that implements feed.Counter, whose counts are capped. The
// changes are counted up to m = min(hw-from, backlogCountCap) and, at the
// same time on another connection, the rows up to m+1, so the decision
// takes one count's time instead of two. The rows count can read more
// than the rows needed (one more than the changes found): once the
// changes are known, a rows count still running is stopped if fewer than
// backlogProbe changes were found, and started again capped at the
// changes found if those are fewer than half of m. So the rows read are at
// most about twice the changes, plus what one changes count's time lets
// the stopped count read. A feed that cannot count, or a count that
// fails, replays.
func (s *subscription) backlogLarger(from, hw feed.Position) (bool, error) {
	e := s.c.e
	counter, ok := e.feed.(feed.Counter)
	if !ok || hw < from || hw-from < backlogProbe {
		return false, nil
	}
	release, err := e.acquireCatchUp(s.ctx, s.principal())
	if err != nil {
		return false, err
	}
	defer release()
	larger, err := backlogCounts(s.ctx, counter, s.scopes(), from, hw, &e.wg)
	if err == nil && larger {
		e.stats.backlogs.Add(1)
	}
	return larger, err
}

// backlogCounts is backlogLarger's counting, the rows count running on a
// goroutine counted by wg.
func backlogCounts(ctx context.Context, counter feed.Counter, ts targets, from, hw feed.Position, wg *sync.WaitGroup) (bool, error) {
	maxChanges := int(min(hw-from, backlogCountCap))
	type count struct {
		n   int
		err error
	}
	rowsCtx, stopRows := context.WithCancel(ctx)
	defer stopRows()
	early := make(chan count, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, err := countRows(rowsCtx, counter, ts, maxChanges+1)
		early <- count{n, err}
	}()
	// stop ends the rows count, and waits for it: it holds a connection
	// under this catch-up's slot.
	stop := func() {
		stopRows()
		<-early
	}

	changes := 0
	for _, t := range ts {
		n, err := counter.Count(ctx, feed.CountQuery{Scope: t.scope, After: from, Until: hw, MaxChanges: maxChanges})
		if err != nil {
			stop()
			return false, err
		}
		changes += n.Changes
	}
	if changes < backlogProbe {
		stop()
		return false, nil
	}
	var r count
	select {
	case r = <-early:
	default:
		if 2*changes >= maxChanges {
			r = <-early // it reads at most maxChanges+1 ≤ 2·changes+1 rows
			break
		}
		stopRows()
		if r = <-early; r.err != nil { // stopped before it ended
			r.n, r.err = countRows(ctx, counter, ts, changes+1)
		}
	}
	if r.err != nil {
		return false, r.err
	}
	return r.n <= changes, nil
}

// countRows counts the rows of the scopes of ts, up to max in all.
func countRows(ctx context.Context, counter feed.Counter, ts targets, max int) (int, error) {
	rows := 0
	for _, t := range ts {
		n, err := counter.Count(ctx, feed.CountQuery{Scope: t.scope, MaxRows: max - rows})
		if err != nil {
			return 0, err
		}
		if rows += n.Rows; rows >= max {
			break
		}
	}
	return rows, nil
}
