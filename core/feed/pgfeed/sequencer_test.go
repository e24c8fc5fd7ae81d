package pgfeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// TestLongTransactionDeliveredLast: a transaction that began (and wrote)
// before many others commits after all of them; subscribers on two nodes
// must get it after them, not skip it. Run on one node (two nodes' worth of
// subscribers, one sequencer candidate) and with two nodes whose sequencer
// is killed mid-run, so the role fails over to the other node while the
// long transaction is open and the other writers commit.
func TestLongTransactionDeliveredLast(t *testing.T) {
	t.Parallel()
	for _, logical := range []bool{false, true} {
		for _, failover := range []bool{false, true} {
			name := "one node"
			if failover {
				name = "sequencer fails over"
			}
			if logical {
				name = "logical capture, " + name
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				runLongTransaction(t, failover, logical)
			})
		}
	}
}

// runLongTransaction runs TestLongTransactionDeliveredLast's case; with
// logical, on the logical capture, whose consumer runs in the sequencer's
// term and fails over with it.
func runLongTransaction(t *testing.T, failover, logical bool) {
	var pool *pgxpool.Pool
	var name string
	var opts pgfeed.Options
	if logical {
		pool, name = testenv.LogicalSchema(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
		opts.Capture = pgfeed.CaptureLogical
	} else {
		pool, name = testenv.PostgresConfig(t, func(c *pgxpool.Config) { c.MaxConns = testenv.PoolSize(t, 16) })
	}
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	a := newE2EServer(t, pool, name, opts, core.Config{})
	nodes := []*e2eServer{a, a}
	if failover {
		nodes[1] = newE2ENode(t, pool, name, opts, core.Config{})
	}

	specs := []scopeSpec{scopeAll(), scopeTenant("t1"), scopeTenant("t2")}
	var subs []*subscriber
	runCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		for _, s := range subs {
			<-s.done
		}
	}()
	for i, n := range nodes {
		for _, spec := range specs {
			s := newSubscriber(t, n.url, fmt.Sprintf("node%d %s", i, spec.scope), spec, nil, nil)
			s.subscribe(t)
			s.run(runCtx)
			subs = append(subs, s)
		}
	}
	// The feeds start their sequencer candidates with their tailers; wait
	// for one to hold the role, without calling Head (which would give the
	// positions itself).
	leader := func() (*pgfeed.Feed, *pgfeed.Feed) {
		for {
			for i, n := range nodes {
				if n.feed.Stats().Sequencing {
					return n.feed, nodes[1-i].feed
				}
			}
			if ctx.Err() != nil {
				t.Fatal("no feed took the sequencer role")
			}
			// A bounded poll on a condition another goroutine sets.
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	leader()

	// The long transaction writes first (a new row and an update of a row
	// the others never touch) and stays open.
	exec2(t, pool, "INSERT INTO e2e_items (id, tenant, grp, title) VALUES ('old', 't1', 1, 'v1')")
	long, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(ctx)
	exec2(t, long, "INSERT INTO e2e_items (id, tenant, grp, title) VALUES ('long', 't2', 1, 'long')")
	exec2(t, long, "UPDATE e2e_items SET title = 'by long', tenant = 't2' WHERE id = 'old'")

	const others = 60
	commit := func(i int) {
		exec2(t, pool, "INSERT INTO e2e_items (id, tenant, grp, title) VALUES ($1, $2, 1, 'other')", fmt.Sprintf("o%02d", i), []string{"t1", "t2"}[i%2])
	}
	waitAll := func(what string, ok func(spec scopeSpec) func(map[string]tItem) bool) {
		t.Helper()
		for _, s := range subs {
			if err := s.chk.waitRows(ctx, what, ok(s.chk.spec)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Subscribers of a tenant see only that tenant's rows.
	hasOthers := func(n int) func(scopeSpec) func(map[string]tItem) bool {
		return func(spec scopeSpec) func(map[string]tItem) bool {
			return func(rows map[string]tItem) bool {
				for i := range n {
					it := tItem{Tenant: []string{"t1", "t2"}[i%2]}
					if _, ok := rows[fmt.Sprintf("o%02d", i)]; spec.match(it) && !ok {
						return false
					}
				}
				return true
			}
		}
	}
	for i := range others / 2 {
		commit(i)
	}
	waitAll("the first half of the other commits", hasOthers(others/2))

	var moved *pgfeed.Feed
	if failover {
		// Kill the sequencer's session until the other node holds the role.
		from, to := leader()
		for !to.Stats().Sequencing {
			if pid := from.SequencerPID(); pid != 0 {
				exec2(t, pool, "SELECT pg_terminate_backend($1)", int32(pid))
			}
			if ctx.Err() != nil {
				t.Fatal("the sequencer role did not move to the other node")
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond): // a bounded poll on the role
			}
		}
		t.Logf("sequencer moved: %+v -> %+v", from.Stats(), to.Stats())
		moved = to
	}
	for i := others / 2; i < others; i++ {
		commit(i)
	}
	waitAll("every other commit", hasOthers(others))
	for _, s := range subs {
		s.chk.mu.Lock()
		if it, ok := s.chk.rows["long"]; ok {
			t.Errorf("%s has the row of the open transaction: %+v", s.chk.name, it)
		}
		s.chk.mu.Unlock()
	}

	// The long transaction commits last: every subscriber gets it.
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitAll("the long transaction", func(spec scopeSpec) func(map[string]tItem) bool {
		return func(rows map[string]tItem) bool {
			if !spec.match(tItem{Tenant: "t2"}) {
				_, stale := rows["old"] // moved out of t1 by the long transaction
				return !stale
			}
			return rows["long"].Title == "long" && rows["old"].Title == "by long"
		}
	})

	// Its changes come after every other commit's, contiguous.
	rows, err := pool.Query(ctx, "SELECT pos, key FROM "+a.feed.LogSQL()+" ORDER BY pos")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var last int64
	for rows.Next() {
		var p int64
		var k string
		if err := rows.Scan(&p, &k); err != nil {
			t.Fatal(err)
		}
		order, last = append(order, k), p
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	tail := strings.Join(order[len(order)-4:], ",")
	if len(order) != 1+others+3 || tail != "o59,long,old,old" {
		t.Fatalf("change log order ends with %s (%d changes up to %d), want the other commits, then the long transaction's insert and move", tail, len(order), last)
	}
	for _, s := range subs {
		if d := s.chk.diff(a.rows(t, s.chk.spec.match)); d != "" {
			t.Errorf("%s: copy differs from SELECT: %s", s.chk.name, d)
		}
		s.chk.mu.Lock()
		for _, v := range s.chk.violations {
			t.Error(v)
		}
		s.chk.mu.Unlock()
	}
	t.Logf("stats: node0 %+v, node1 %+v", nodes[0].feed.Stats(), nodes[1].feed.Stats())
	if moved != nil {
		if st := moved.Stats(); st.SequencerTerms == 0 || st.Sequenced == 0 {
			t.Fatalf("the node that took over the sequencer gave no positions: %+v", st)
		}
	}
}

// TestConflictingWritesInCommitOrder: two transactions write the same row,
// the one that began writing first (and took the lower capture numbers)
// commits last, and both are sequenced by one step; the row's changes must
// be in commit order, so a replay ends with the last committer's row. With
// SET CONSTRAINTS ALL IMMEDIATE the capture runs at each statement's end,
// so the later committer's first capture number is lower than the earlier
// one's: ordering transactions by their first would get this wrong.
func TestConflictingWritesInCommitOrder(t *testing.T) {
	t.Parallel()
	for _, immediate := range []bool{false, true} {
		t.Run(fmt.Sprintf("immediate=%v", immediate), func(t *testing.T) {
			t.Parallel()
			// No Tail: no sequencer runs, so the one step is Head's.
			f, pool := newFeed(t, pgfeed.Options{}, feedtest.Items)
			ctx := testCtx(t)
			insertItem(t, pool, "r", "t1", 1)
			h0 := head(t, f)

			late, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer late.Rollback(ctx)
			if immediate {
				exec2(t, late, "SET CONSTRAINTS ALL IMMEDIATE")
			}
			insertItem(t, late, "q", "t1", 1) // its first capture, early
			early, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer early.Rollback(ctx)
			exec2(t, early, "UPDATE feedtest_items SET title = 'early' WHERE id = 'r'")
			if err := early.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			exec2(t, late, "UPDATE feedtest_items SET title = 'late' WHERE id = 'r'")
			if err := late.Commit(ctx); err != nil {
				t.Fatal(err)
			}

			var got []string
			for _, c := range replayAll(t, f, items(), h0, head(t, f)) {
				var row struct{ Title string }
				if err := json.Unmarshal(c.Row, &row); err != nil {
					t.Fatal(err)
				}
				got = append(got, c.Key+"="+row.Title)
			}
			if want := []string{"r=early", "q=x", "r=late"}; !slices.Equal(got, want) {
				t.Fatalf("changes in position order %v, want %v (commit order, transactions contiguous)", got, want)
			}
		})
	}
}

// TestRestartContinuesAboveReservation: steps commit without waiting for
// their WAL flush, so a server crash can lose the last steps after readers
// saw their positions, and roll the sequence back with them. The test makes
// that state by hand (the last two steps' ticks gone, their changes
// without positions again, the sequence rewound, the server's start time
// changed) and
// checks that the next step gives them positions above every position
// handed out before, for whichever caller runs it (Head's step, the
// sequencer's, and Snapshot's).
func TestRestartContinuesAboveReservation(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"head", "sequencer", "snapshot", "woken sequencer"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			f, pool := newFeed(t, pgfeed.Options{}, feedtest.Items)
			ctx := testCtx(t)
			if via == "woken sequencer" {
				// The sequencer already waits for the WAL stream when the
				// server "restarts": its step is the WAL-woken one.
				waiting := make(chan struct{}, 1)
				f.OnStreamWait(func() {
					select {
					case waiting <- struct{}{}:
					default:
					}
				})
				f.StartSequencer()
				select {
				case <-waiting:
				case <-ctx.Done():
					t.Fatalf("the sequencer never waited for the WAL stream (status %+v)", f.SequencerStatus())
				}
			}
			for i := range 5 {
				insertItem(t, pool, fmt.Sprint("k", i), "t1", i)
				head(t, f) // a step each
			}
			seen := head(t, f) // readers may have seen every position up to here
			schema := f.Schema()
			var reserved int64
			if err := pool.QueryRow(ctx, "SELECT reserved FROM "+schema+".meta").Scan(&reserved); err != nil {
				t.Fatal(err)
			}
			if reserved < int64(seen) {
				t.Fatalf("reservation %d below the head %d", reserved, seen)
			}
			// The crash: the last two changes' steps are lost (their ticks
			// gone, the changes in the log without positions), the
			// sequence is rewound, and the server started anew; in one
			// transaction, so a running sequencer sees it whole.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, stmt := range []string{
				`DELETE FROM ` + schema + `.ticks WHERE pos > ` + fmt.Sprint(seen-2),
				`SELECT setval('` + schema + `.pos_seq', 1)`,
				`UPDATE ` + schema + `.meta SET boot = '2000-01-01'`,
			} {
				exec2(t, tx, stmt)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			insertItem(t, pool, "after", "t1", 9)
			switch via {
			case "head":
				head(t, f)
			case "sequencer":
				f.StartSequencer()
			case "woken sequencer":
				// Started above; the insert's WAL wakes it.
			case "snapshot":
				if _, err := f.Snapshot(ctx, feed.SnapshotQuery{Scope: feed.NewScope(feedtest.Items, nil), Limit: 100}); err != nil {
					t.Fatal(err)
				}
			}
			// Wait for the change written after the restart: the lost ones
			// were committed before it, so once it has a
			// position they have theirs (in its step, or in an earlier one
			// where a running sequencer was woken by the crash's own
			// commit). Counting changes would not do: a running
			// sequencer's last step before the crash, still in its
			// memory, hands a tailer at the third position the two lost
			// changes again, as it did before the crash.
			for at, done := feed.Position(3), false; !done; {
				cs, err := f.Tail(ctx, at, 100)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range cs {
					done = done || c.Key == "after"
				}
				at = cs[len(cs)-1].Pos
			}
			// Every change is back in the log, each above the reservation.
			var n, low int64
			if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE u.first + l.ord > 3 AND u.first + l.ord <= $1)
FROM `+schema+`.ticks t CROSS JOIN LATERAL unnest(t.xids, t.firsts) u(xid, first) JOIN `+schema+`.changes l ON l.xid = u.xid`, reserved).Scan(&n, &low); err != nil {
				t.Fatal(err)
			}
			if n != 6 || low != 0 {
				t.Fatalf("%d changes in the log, %d of them at positions (3, %d] that readers may have seen before the restart", n, low, reserved)
			}
		})
	}
}
