package pgfeed

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
)

// pruneBatch is the most changes one pruning transaction deletes, so
// pruning a large backlog never holds one long transaction.
const pruneBatch = 10_000

// Floor returns the retained floor: changes at or below it have been
// pruned, and reading after a position below it yields
// feed.ErrCursorExpired.
func (f *Feed) Floor(ctx context.Context) (feed.Position, error) {
	var floor int64
	if err := f.pool.QueryRow(ctx, "SELECT floor FROM "+f.n.meta).Scan(&floor); err != nil {
		return 0, f.wrap("floor", err)
	}
	return feed.Position(floor), nil
}

// Prune drops the changes older than Options.MaxAge and those beyond the
// newest Options.MaxChanges, and returns the new floor. Current rows are
// never touched; a subscriber whose cursor is below the floor gets a reset
// and a fresh snapshot. Several nodes may prune at once: one does the work,
// the others return the floor as it is.
func (f *Feed) Prune(ctx context.Context) (feed.Position, error) {
	through, err := f.PruneTarget(ctx)
	if err != nil {
		return 0, err
	}
	if err := f.pruneKeys(ctx); err != nil {
		return 0, err
	}
	if err := f.pruneRevocations(ctx); err != nil {
		return 0, err
	}
	return f.PruneThrough(ctx, through)
}

// PruneTarget returns the position through which Prune would drop changes
// now under Options.MaxAge and Options.MaxChanges (0: none), without
// dropping anything: what an operator's dry run shows.
func (f *Feed) PruneTarget(ctx context.Context) (feed.Position, error) {
	var through int64
	if f.opts.MaxChanges > 0 {
		err := f.pool.QueryRow(ctx, "SELECT pos FROM "+f.n.changes+" ORDER BY pos DESC OFFSET $1 LIMIT 1", f.opts.MaxChanges).Scan(&through)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return 0, f.wrap("prune", err)
		}
	}
	if f.opts.MaxAge > 0 {
		// committed_at grows with pos: it is the time the sequencing step
		// gave the change its position, and steps run one at a time (see
		// the package documentation).
		var old int64
		err := f.pool.QueryRow(ctx, "SELECT coalesce(max(pos), 0) FROM "+f.n.changes+
			" WHERE committed_at < clock_timestamp() - $1::interval", f.opts.MaxAge.String()).Scan(&old)
		if err != nil {
			return 0, f.wrap("prune", err)
		}
		through = max(through, old)
	}
	return feed.Position(through), nil
}

// PruneThrough drops every change at or below through and moves the floor
// up to it (it never moves down, and never above the newest committed
// position: through is clamped to it, so no change committed later falls
// below the floor), in batches of at most 10,000 changes per
// transaction. The floor and the deletion commit together, and every read
// checks the floor in the statement that reads the changes, so no reader
// sees a gap. It returns the floor.
func (f *Feed) PruneThrough(ctx context.Context, through feed.Position) (feed.Position, error) {
	n := f.n
	for {
		var floor int64
		var done bool
		err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			var locked bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1, $2)", n.pruneA, n.key).Scan(&locked); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, "SELECT floor FROM "+n.meta+" FOR UPDATE").Scan(&floor); err != nil {
				return err
			}
			bound, berr := floorBound(ctx, tx, n, floor)
			if berr != nil {
				return berr
			}
			through = min(through, feed.Position(bound))
			if !locked || floor >= pos(through) {
				done = true
				return nil
			}
			// The end of this batch: the through-th position, or the
			// pruneBatch-th change above the floor if that comes first.
			var next int64
			err := tx.QueryRow(ctx, "SELECT coalesce((SELECT pos FROM "+n.changes+" WHERE pos > $1 AND pos <= $2 ORDER BY pos OFFSET $3 LIMIT 1), $2)",
				floor, pos(through), pruneBatch-1).Scan(&next)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+n.changes+" WHERE pos > $1 AND pos <= $2", floor, next); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "UPDATE "+n.meta+" SET floor = $1", next); err != nil {
				return err
			}
			floor = next
			done = next >= pos(through)
			return nil
		})
		if err != nil {
			return 0, f.wrap("prune", err)
		}
		if done {
			return feed.Position(floor), nil
		}
	}
}

// StartPruner runs Prune every Options.PruneInterval (and once at once) on a
// goroutine that Close stops. Calling it again while it runs does nothing.
// Errors are logged and retried at the next interval.
func (f *Feed) StartPruner() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.pruning {
		return
	}
	f.pruning = true
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		t := time.NewTicker(f.opts.PruneInterval)
		defer t.Stop()
		for {
			floor, err := f.Prune(f.ctx)
			switch {
			case f.ctx.Err() != nil:
				return
			case err != nil:
				f.log.Error("pgfeed: prune failed", "schema", f.opts.Schema, "err", err)
			default:
				f.log.Debug("pgfeed: pruned", "schema", f.opts.Schema, "floor", floor)
			}
			select {
			case <-t.C:
			case <-f.ctx.Done():
				return
			}
		}
	}()
}
