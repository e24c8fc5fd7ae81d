package pgfeed_test

import (
	"testing"

	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
)

// TestEstimateRows: the estimate is the planner's, the density of the last
// ANALYZE times the table's current pages, so it follows rows inserted
// since; a table never analyzed, an empty one and one with an inheritance
// child give none.
func TestEstimateRows(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f, pool := newFeed(t, pgfeed.Options{}, feedtest.Items)
	estimate := func() (int, bool) {
		t.Helper()
		n, ok, err := f.EstimateRows(ctx, feedtest.Items)
		if err != nil {
			t.Fatal(err)
		}
		return n, ok
	}
	if n, ok := estimate(); ok {
		t.Fatalf("never analyzed: estimate %d, want none", n)
	}
	exec2(t, pool, "ANALYZE feedtest_items")
	if n, ok := estimate(); ok {
		t.Fatalf("analyzed empty: estimate %d, want none", n)
	}
	insert := func(from, to int) {
		t.Helper()
		exec2(t, pool, `INSERT INTO feedtest_items (id, tenant, grp, title, n, done)
SELECT 'k' || i, 't' || (i % 50), i % 7, 'a title of some length', i, false FROM generate_series($1::int, $2::int) i`, from, to)
	}
	insert(1, 5000)
	exec2(t, pool, "ANALYZE feedtest_items")
	if n, ok := estimate(); !ok || n != 5000 {
		t.Fatalf("analyzed at 5,000 rows: estimate %d (%v), want 5000", n, ok)
	}
	insert(5001, 15000) // not analyzed again (autovacuum may, which gives the same)
	if n, ok := estimate(); !ok || n < 14000 || n > 16000 {
		t.Fatalf("15,000 rows, analyzed at 5,000: estimate %d (%v), want about 15,000", n, ok)
	}
	exec2(t, pool, "CREATE TABLE feedtest_items_child () INHERITS (feedtest_items)")
	if n, ok := estimate(); ok {
		t.Fatalf("with an inheritance child: estimate %d, want none", n)
	}
}
