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
// if the scope has at most backlogRowsPerChange times this many rows.
const backlogCountCap = 1 << 22

// backlogRowsPerChange is how many rows of its scope a backlog's change
// weighs: a backlog is sent as a snapshot when its scope holds at most this
// many rows per change. A replay reads every change from the change log,
// which costs several times more per change than a snapshot costs per row
// (the log's rows are larger, and each is a JSON document), so a snapshot
// pays off well before the backlog is as large as the scope.
const backlogRowsPerChange = 2

// backlogLarger reports whether the subscription's backlog in (from, hw]
// holds at least backlogProbe changes and its scopes at most
// backlogRowsPerChange rows per change, so that sending the rows (a reset,
// then a snapshot) costs less than replaying the changes.
//
// It asks only when hw is at least backlogProbe positions past from, and
// only a feed that implements feed.Counter, whose counts are capped.
// Counting is what the decision costs, so both counts stop early (see
// backlogCounts). A feed that cannot count, or a count that fails, replays.
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
//
// With m = min(hw-from, backlogCountCap) the most changes there can be, the
// changes are counted up to half of m (at least backlogProbe) and, at the
// same time on another connection, the rows up to 2m+1: one count's time,
// and the changes count, the one that reads the change log, reads at most
// half the backlog. Once the changes are known:
//   - fewer than backlogProbe: the rows count is stopped; a replay;
//   - fewer than their cap, so exact (c): rows beyond 2c+1 decide nothing,
//     so a rows count still running is stopped and counted again capped
//     there if that is under half its cap, and waited for otherwise;
//   - at their cap, so at least that many: the rows count is waited for;
//     if the rows are more than twice the cap but could still be at most
//     twice the changes, the changes are counted again, up to half the rows.
//
// Before all that, where the feed samples (feed.Sampler), a sample of the
// backlog's positions may show beyond doubt that the changes reach a
// count's cap (sampledChanges): that count is not made. And
// backlogByEstimate may decide on the changes alone. So a large backlog
// of a table the feed estimates costs a catalog read and a sample, not a
// count.
func backlogCounts(ctx context.Context, counter feed.Counter, ts targets, from, hw feed.Position, wg *sync.WaitGroup) (bool, error) {
	maxChanges := int(min(hw-from, backlogCountCap))
	least, err := sampledChanges(ctx, counter, ts, from, hw)
	if err != nil {
		return false, err
	}
	countChanges := func(max int) (int, error) {
		if least >= max {
			return max, nil // the sample shows as many: nothing to read
		}
		return countChangesUpTo(ctx, counter, ts, from, hw, max)
	}
	if larger, decided, err := backlogByEstimate(ctx, counter, ts, maxChanges, countChanges); decided || err != nil {
		return larger, err
	}
	changeCap := min(maxChanges, max(backlogProbe, (maxChanges+1)/2))
	rowsCap := backlogRowsPerChange*maxChanges + 1
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
		n, err := countRows(rowsCtx, counter, ts, rowsCap)
		early <- count{n, err}
	}()
	// stop ends the rows count, and waits for it: it holds a connection
	// under this catch-up's slot.
	stop := func() {
		stopRows()
		<-early
	}

	changes, err := countChanges(changeCap)
	if err != nil {
		stop()
		return false, err
	}
	if changes < backlogProbe {
		stop()
		return false, nil
	}
	capped := changes >= changeCap
	var r count
	select {
	case r = <-early:
	default:
		need := backlogRowsPerChange*changes + 1 // more rows than this: a replay
		if capped || 2*need >= rowsCap {
			r = <-early // it reads at most rowsCap ≤ 2·need rows
			break
		}
		stopRows()
		if r = <-early; r.err != nil { // stopped before it ended
			r.n, r.err = countRows(ctx, counter, ts, need)
		}
	}
	if r.err != nil {
		return false, r.err
	}
	if r.n <= backlogRowsPerChange*changes {
		return true, nil
	}
	if !capped || r.n > backlogRowsPerChange*maxChanges {
		return false, nil // exact, or more rows than any number of changes weighs
	}
	// At least changeCap changes, and between 2·changeCap and 2m rows.
	want := (r.n + backlogRowsPerChange - 1) / backlogRowsPerChange
	n, err := countChanges(want)
	if err != nil {
		return false, err
	}
	return n >= want, nil
}

// backlogByEstimate decides without counting the rows where the feed
// estimates the scopes' tables (feed.RowEstimator) at no more rows than
// the most changes the backlog can hold weigh: with e the estimate, the
// changes alone are counted, up to w = max(backlogProbe,
// ⌈e/backlogRowsPerChange⌉). At w the backlog is larger (its scopes hold
// at most e rows, which w changes outweigh); under backlogProbe it is not;
// in between the count is exact, and the rows are counted up to one more
// than those changes weigh.
// It leaves the decision to backlogCounts (decided false) where there is
// no estimate (the feed cannot tell, or failed to) or the estimate is
// larger than that.
//
// As long as the estimate is at least the scopes' rows, the decision is
// exactly backlogCounts's; a low one (statistics behind a table that
// grew denser) can only choose a snapshot where a replay would have cost
// less.
func backlogByEstimate(ctx context.Context, counter feed.Counter, ts targets, maxChanges int, countChanges func(max int) (int, error)) (larger, decided bool, err error) {
	est, ok := counter.(feed.RowEstimator)
	if !ok {
		return false, false, nil
	}
	rows := 0
	for i := range ts {
		n, ok, err := est.EstimateRows(ctx, ts[i].scope.Schema)
		if err != nil && ctx.Err() != nil {
			return false, true, ctx.Err()
		}
		if err != nil || !ok {
			return false, false, nil // no estimate: the counts decide
		}
		rows += n
	}
	if rows > backlogRowsPerChange*maxChanges {
		return false, false, nil
	}
	want := max(backlogProbe, (rows+backlogRowsPerChange-1)/backlogRowsPerChange)
	changes, err := countChanges(want)
	switch {
	case err != nil:
		return false, true, err
	case changes >= want:
		return true, true, nil
	case changes < backlogProbe:
		return false, true, nil
	}
	n, err := countRows(ctx, counter, ts, backlogRowsPerChange*changes+1)
	return err == nil && n <= backlogRowsPerChange*changes, true, err
}

// countChangesUpTo counts the changes of the scopes of ts in (from, hw],
// up to max in all.
func countChangesUpTo(ctx context.Context, counter feed.Counter, ts targets, from, hw feed.Position, max int) (int, error) {
	return countUpTo(ts, max, func(t *target, left int) (int, error) {
		n, err := counter.Count(ctx, feed.CountQuery{Scope: t.scope, After: from, Until: hw, MaxChanges: left})
		return n.Changes, err
	})
}

// countRows counts the rows of the scopes of ts, up to max in all.
func countRows(ctx context.Context, counter feed.Counter, ts targets, max int) (int, error) {
	return countUpTo(ts, max, func(t *target, left int) (int, error) {
		n, err := counter.Count(ctx, feed.CountQuery{Scope: t.scope, MaxRows: left})
		return n.Rows, err
	})
}

// countUpTo adds up count over the targets of ts, each capped at what is
// left of max, and stops once max is reached.
func countUpTo(ts targets, max int, count func(t *target, left int) (int, error)) (int, error) {
	total := 0
	for i := range ts {
		n, err := count(&ts[i], max-total)
		if err != nil {
			return 0, err
		}
		if total += n; total >= max {
			break
		}
	}
	return total, nil
}
