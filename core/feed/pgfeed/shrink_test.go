package pgfeed_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
)

// TestOutboxShrinksAfterBurst: a burst of writes grows the outbox to
// megabytes; once it is sequenced and the writes calm down, the sequencer
// has the file's empty pages given back, so later steps, which scan the
// whole file, cost what they did before the burst. Without the shrink the
// file keeps its length for ever (the sequencer's own vacuums never cut it,
// and leave autovacuum nothing to do) and the wait below runs out.
func TestOutboxShrinksAfterBurst(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{}, feedtest.Items)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Autovacuum could cut the file too (after a burst, once in a while):
	// not here, so that only the sequencer can.
	exec2(t, pool, "ALTER TABLE "+f.OutboxTable()+" SET (autovacuum_enabled = false)")
	f.StartSequencer()
	exec2(t, pool, `INSERT INTO feedtest_items (id, tenant, grp, title, n, done)
SELECT 'k' || i, 't' || (i % 50), i % 7, 'a title of a typical length', i, false FROM generate_series(1, 20000) i`)
	size := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, "SELECT pg_relation_size($1)", f.OutboxTable()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The burst must have grown the outbox past the shrink's threshold,
	// unless (on a slow machine) it was sequenced and shrunk already.
	if n := size(); n <= 1<<20 && f.SequencerStatus().OutboxShrinks == 0 {
		t.Fatalf("the burst left an outbox of %d bytes; the test needs more than 1 MiB", n)
	}
	h := head(t, f) // the burst is sequenced
	if h < 20000 {
		t.Fatalf("head %d after 20,000 changes", h)
	}
	// A single write after the burst: the writes have calmed down.
	insertItem(t, pool, "after", "t1", 1)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for size() > 1<<20 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the outbox still holds %d bytes (status %+v)", size(), f.SequencerStatus())
		}
	}
	// The file is cut before that vacuum's statement returns and is
	// counted.
	for f.SequencerStatus().OutboxShrinks < 1 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the outbox shrank without the sequencer's vacuum: status %+v", f.SequencerStatus())
		}
	}
	// Changes still flow.
	got, err := f.Tail(ctx, h, 10)
	if err != nil || len(got) != 1 || got[0].Key != "after" {
		t.Fatalf("after the shrink: Tail %v, %v", got, err)
	}
}
