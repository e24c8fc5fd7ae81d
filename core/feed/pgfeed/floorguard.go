package pgfeed

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The floor must stay at or below the head. Reads return only changes
// above the floor: a floor placed above the newest position would hide
// every change numbered below it, so connected clients would silently stop
// receiving changes. Three guards keep that from happening, whoever asks:
// pruning never moves the floor past the newest position (floorBound);
// every step gives positions above the floor as well as above the last
// tick (see tickCTEs); and each sequencer term starts by moving the
// sequence past a floor found above it, saying so loudly (repairFloor), so
// a floor set by hand or by an older version costs a reset, never a silent
// stop.

// floorBound returns the highest floor that loses no deliverable change:
// the last position the ticks give, or floor (the current one) when that
// is below it. Positions a step gives later are above both.
func floorBound(ctx context.Context, tx pgx.Tx, n names, floor int64) (int64, error) {
	var newest int64
	if err := tx.QueryRow(ctx, "SELECT coalesce((SELECT t.next - 1 FROM "+n.ticks+" t ORDER BY t.pos DESC LIMIT 1), 0)").Scan(&newest); err != nil {
		return 0, err
	}
	return max(newest, floor), nil
}

// repairFloor moves the position sequence past the floor if the floor is
// at or above the next position a step would give, and reports whether it
// did (with the floor and the position a step would have given).
// It holds the step lock, so no step runs meanwhile.
func repairFloor(ctx context.Context, conn *pgx.Conn, n names) (repaired bool, floor, next int64, err error) {
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1, $2)", n.lockA, n.key); err != nil {
			return err
		}
		var last int64
		var called bool
		if err := tx.QueryRow(ctx, "SELECT m.floor, greatest(s.last_value, coalesce((SELECT t.next - 1 FROM "+n.ticks+" t ORDER BY t.pos DESC LIMIT 1), 0)), s.is_called FROM "+n.meta+" m, "+n.seq+" s").Scan(&floor, &last, &called); err != nil {
			return err
		}
		next = last + 1
		if next > floor {
			return nil
		}
		repaired = true
		_, err := tx.Exec(ctx, "SELECT pg_catalog.setval("+n.seqLit+", $1, true)", floor)
		return err
	})
	return repaired, floor, next, err
}

// checkFloor runs repairFloor on conn and logs a repair loudly: changes
// given positions at or below the floor before it ran cannot be read, and
// their subscribers get a reset and a fresh snapshot.
func (f *Feed) checkFloor(ctx context.Context, conn *pgx.Conn) error {
	repaired, floor, next, err := repairFloor(ctx, conn, f.n)
	if err != nil {
		return f.wrap("checking the floor", err)
	}
	if repaired {
		f.log.Error("pgfeed: the retention floor was above the head; positions now continue above the floor",
			"schema", f.opts.Schema, "floor", floor, "next_position_was", next)
	}
	return nil
}
