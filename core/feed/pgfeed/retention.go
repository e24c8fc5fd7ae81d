package pgfeed

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
)

// pruneBatch is the most positions one pruning transaction prunes, so
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
		// Positions are given a block a transaction, without gaps but
		// those of a rolled-back subtransaction or a server restart, so
		// the newest MaxChanges changes are at most the positions that
		// far below the head.
		err := f.pool.QueryRow(ctx, "SELECT greatest(h.head - $1, 0) FROM (SELECT "+f.n.headExpr+" AS head) h", f.opts.MaxChanges).Scan(&through)
		if err != nil {
			return 0, f.wrap("prune", err)
		}
	}
	if f.opts.MaxAge > 0 {
		// Ticks are made one at a time, in position order: the changes
		// older than MaxAge are those below the first tick made since.
		var old int64
		err := f.pool.QueryRow(ctx, `SELECT coalesce((SELECT t.pos - 1 FROM `+f.n.ticks+` t WHERE t.made_at >= pg_catalog.now() - $1::interval ORDER BY t.pos LIMIT 1), `+f.n.headExpr+`)`,
			f.opts.MaxAge.String()).Scan(&old)
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
// below the floor), in batches of at most 10,000 positions per
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
			// The end of this batch: through, or pruneBatch positions
			// above the floor if that comes first.
			next := min(pos(through), floor+pruneBatch)
			// The changes of every transaction whose positions all lie at
			// or below next (one that straddles it goes with a later
			// batch; the floor hides it meanwhile).
			if _, err := tx.Exec(ctx, `DELETE FROM `+n.changes+` l WHERE l.xid = ANY (ARRAY(
  SELECT x.xid FROM (
    SELECT u.xid, lead(u.first, 1, t.next) OVER (PARTITION BY t.pos ORDER BY u.first) - 1 AS last
    FROM `+n.ticks+` t CROSS JOIN LATERAL unnest(t.xids, t.firsts) u(xid, first)
    WHERE t.pos >= `+n.containingTick("$1")+` AND t.pos <= $2) x
  WHERE x.last <= $2))`, floor, next); err != nil {
				return err
			}
			// The last tick stays: the next step reads its snapshot.
			if _, err := tx.Exec(ctx, "DELETE FROM "+n.ticks+" t WHERE t.next - 1 <= $1 AND t.pos < (SELECT max(l.pos) FROM "+n.ticks+" l)", next); err != nil {
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
