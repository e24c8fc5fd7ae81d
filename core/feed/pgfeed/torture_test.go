package pgfeed_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/backoff"
	"github.com/tidesync/tide/internal/pgconnect"
	"github.com/tidesync/tide/internal/testenv"
)

// The torture workload. Bounded in count; its duration follows from the hold
// times (about 100 transactions × 12 ms on average per writer, the writers
// running at once).
const (
	tortureWriters     = 32
	tortureTxs         = 100 // per writer
	tortureKeys        = 12  // per writer
	tortureShared      = 8   // rows every writer may write, at most one per transaction, so never a deadlock
	tortureMaxHold     = 25 * time.Millisecond
	tortureSubscribers = 24
	tortureEarly       = 8 // subscribed before the first write; the rest join during the run
)

var tortureTenants = []string{"t0", "t1", "t2", "t3"}

// tortureReport is what one run exercised and what it found wrong.
type tortureReport struct {
	commits, rollbacks, outOfOrder int
	changes                        int64
	reconnects, connects           int64
	resets                         int
	entries                        int
	violations                     []string
}

// TestTorture runs concurrent writers whose transactions commit out of
// order, with moves, deletes and rollbacks, some writing rows that others
// write too (so the order of their commits decides the final row), against subscribers on real
// WebSockets that drop and resume at random; then checks that every copy
// equals the database, that no cursor went backwards and no change was
// applied twice. Then it runs the very same harness on a deliberately
// broken capture (positions taken at write time) and requires the checks to
// catch it.
//
// Seeded: TIDE_SEED=n reproduces a run's workload (the interleaving is the
// scheduler's).
func TestTorture(t *testing.T) {
	seed := rand.Uint64() >> 1
	if v := os.Getenv(feedtest.SeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", feedtest.SeedEnv, v, err)
		}
		seed = n
	}
	t.Logf("torture: seed %d (set %s=%d to reproduce the workload)", seed, feedtest.SeedEnv, seed)

	// The engine serves replays of recent ranges from memory (ReplayCache);
	// the second run keeps one change there, so every replay reads the log.
	for _, tc := range []struct {
		name  string
		cache int
	}{{"sound", 0}, {"sound, every replay reads the log", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			r := runTorture(t, seed, pgfeed.Options{}, tc.cache)
			for _, v := range r.violations {
				t.Error(v)
			}
			if r.outOfOrder == 0 {
				t.Error("no commit landed out of insert order: the workload did not exercise what it must")
			}
			if r.reconnects == 0 || r.changes == 0 {
				t.Error("no reconnects or no changes: the workload did not exercise what it must")
			}
		})
	}
	t.Run("logical capture", func(t *testing.T) {
		r := runTorture(t, seed, pgfeed.Options{Capture: pgfeed.CaptureLogical}, 0)
		for _, v := range r.violations {
			t.Error(v)
		}
		if r.outOfOrder == 0 || r.reconnects == 0 || r.changes == 0 {
			t.Error("no out-of-order commit, no reconnects or no changes: the workload did not exercise what it must")
		}
	})
	t.Run("broken capture is detected", func(t *testing.T) {
		r := runTorture(t, seed, pgfeed.Broken(pgfeed.Options{}), 0)
		if len(r.violations) == 0 {
			t.Fatal("the checks passed on a capture that takes positions at write time: the torture test cannot fail")
		}
		t.Logf("detected, as it must be: %d violations; first: %s", len(r.violations), r.violations[0])
	})
}

func runTorture(t *testing.T, seed uint64, opts pgfeed.Options, replayCache int) tortureReport {
	var pool *pgxpool.Pool
	var name string
	if opts.Capture == pgfeed.CaptureLogical {
		pool, name = testenv.LogicalSchema(t, func(c *pgxpool.Config) { c.MaxConns = tortureWriters + 12 })
	} else {
		pool, name = testenv.PostgresConfig(t, func(c *pgxpool.Config) { c.MaxConns = testenv.PoolSize(t, tortureWriters+12) })
	}
	// Small pages and send buffers, so replays page and buffers overflow.
	srv := newE2EServer(t, pool, name, opts, core.Config{PageSize: 25, SendBuffer: 32 << 10, ReplayCache: replayCache})
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 0))
	var rep tortureReport
	var connects atomic.Int64

	specs := []scopeSpec{scopeAll()}
	for _, tn := range tortureTenants {
		specs = append(specs, scopeTenant(tn))
	}
	specs = append(specs, scopeTenant("t0", "t2"), scopeTenant("t1", "t3"), scopeGrp(0), scopeGrp(1), scopeTenantGrp("t1", 1), scopeTenantGrp("t2", 0))
	subs := make([]*subscriber, tortureSubscribers)
	runCtx, stopClients := context.WithCancel(ctx)
	for i := range subs {
		spec := specs[i%len(specs)]
		subs[i] = newSubscriber(t, srv.url, fmt.Sprintf("sub%02d %s", i, spec.scope), spec, nil, func(e client.Event) {
			if e.Kind == client.EventConnected {
				connects.Add(1)
			}
		})
		if i < tortureEarly {
			subs[i].subscribe(t)
		}
		subs[i].run(runCtx)
	}
	defer func() {
		stopClients()
		for _, s := range subs {
			<-s.done
		}
	}()

	// Writers: each transaction writes 1-3 of its writer's rows (upserts
	// that may move a row, updates, moves, deletes), holds the transaction
	// open for a random time, then commits or (1 in 10) rolls back.
	type txRecord struct{ start, commit int64 }
	var seq atomic.Int64
	records := make([][]txRecord, tortureWriters)
	rollbacks := make([]int, tortureWriters)
	var writers sync.WaitGroup
	for w := range tortureWriters {
		wr := rand.New(rand.NewPCG(seed, uint64(w)+1))
		writers.Go(func() {
			for attempt := 0; len(records[w])+rollbacks[w] < tortureTxs; {
				rec, committed, err := tortureTx(ctx, pool, wr, w, &seq)
				if pgconnect.TooManyClients(err) && ctx.Err() == nil {
					// The server had no free connection for the pool (other
					// suites share it): nothing began; as an app would,
					// wait and write again.
					backoff.Sleep(ctx, backoff.Delay(attempt, 10*time.Millisecond, time.Second))
					attempt++
					continue
				}
				attempt = 0
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				if committed {
					records[w] = append(records[w], rec)
				} else {
					rollbacks[w]++
				}
			}
		})
	}
	writing := make(chan struct{})
	go func() { writers.Wait(); close(writing) }()

	// Late subscribers join at random times while the writers run, and
	// random subscribers drop their connection and resume.
	var side sync.WaitGroup
	for i := tortureEarly; i < tortureSubscribers; i++ {
		d := time.Duration(rng.Int64N(int64(600 * time.Millisecond)))
		side.Go(func() {
			timer := time.NewTimer(d)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-writing:
			}
			subs[i].subscribe(t)
		})
	}
	var reconnects atomic.Int64
	side.Go(func() {
		r := rand.New(rand.NewPCG(seed, 1000))
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-writing:
				return
			case <-timer.C:
			}
			subs[r.IntN(len(subs))].c.Reconnect()
			reconnects.Add(1)
			timer.Reset(time.Duration(2+r.IntN(20)) * time.Millisecond)
		}
	})
	<-writing
	side.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Every subscriber resumes once more and catches up past the final head;
	// its copy must then equal the table.
	head, err := srv.feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		s.chk.mark()
		s.c.Reconnect()
	}
	for _, s := range subs {
		if err := s.chk.waitCaughtUp(ctx, head); err != nil {
			rep.violations = append(rep.violations, err.Error())
		}
	}
	for _, s := range subs {
		if d := s.chk.diff(srv.rows(t, s.chk.spec.match)); d != "" {
			rep.violations = append(rep.violations, s.chk.name+": copy differs from SELECT: "+d)
		}
		s.chk.mu.Lock()
		rep.violations = append(rep.violations, s.chk.violations...)
		rep.entries += s.chk.entries
		rep.resets += s.chk.resets
		s.chk.mu.Unlock()
	}

	// Count the commits that landed out of insert order: a transaction
	// committed before one that started writing earlier.
	var all []txRecord
	for w := range records {
		all = append(all, records[w]...)
		rep.rollbacks += rollbacks[w]
	}
	slices.SortFunc(all, func(a, b txRecord) int { return int(a.start - b.start) })
	var maxCommit int64
	for _, r := range all {
		if r.commit < maxCommit {
			rep.outOfOrder++
		}
		maxCommit = max(maxCommit, r.commit)
	}
	rep.commits = len(all)
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+srv.feed.ChangesTable()).Scan(&rep.changes); err != nil {
		t.Fatal(err)
	}
	rep.reconnects, rep.connects = reconnects.Load(), connects.Load()
	t.Logf("torture: %d commits (%d out of insert order), %d rollbacks, %d changes up to head %d; %d subscribers, %d forced reconnects, %d connections, %d resets, %d entries applied; %d violations",
		rep.commits, rep.outOfOrder, rep.rollbacks, rep.changes, head, len(subs), rep.reconnects, rep.connects, rep.resets, rep.entries, len(rep.violations))
	return rep
}

// tortureTx runs one writer transaction. It returns its record and whether
// it committed.
func tortureTx(ctx context.Context, pool *pgxpool.Pool, r *rand.Rand, w int, seq *atomic.Int64) (rec struct{ start, commit int64 }, committed bool, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return rec, false, err
	}
	defer tx.Rollback(ctx)
	shared := false
	for i := range 1 + r.IntN(3) {
		key := fmt.Sprintf("w%d-k%02d", w, r.IntN(tortureKeys))
		if !shared && r.IntN(4) == 0 {
			// A row other writers write too: their transactions wait for
			// one another's row locks, and commit in that order.
			key, shared = fmt.Sprintf("s-k%02d", r.IntN(tortureShared)), true
		}
		tenant, grp := tortureTenants[r.IntN(len(tortureTenants))], int64(r.IntN(3))
		title := fmt.Sprintf("w%d-%d", w, r.Int64())
		var sql string
		var args []any
		switch r.IntN(10) {
		case 0, 1, 2, 3: // insert, or update possibly moving the row
			sql = `INSERT INTO e2e_items (id, tenant, grp, title) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET tenant = EXCLUDED.tenant, grp = EXCLUDED.grp, title = EXCLUDED.title, n = e2e_items.n + 1`
			args = []any{key, tenant, grp, title}
		case 4, 5: // update in place
			sql, args = `UPDATE e2e_items SET title = $2, n = n + 1 WHERE id = $1`, []any{key, title}
		case 6, 7: // move to another scope
			sql, args = `UPDATE e2e_items SET tenant = $2, grp = $3, n = n + 1 WHERE id = $1`, []any{key, tenant, grp}
		default:
			sql, args = `DELETE FROM e2e_items WHERE id = $1`, []any{key}
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return rec, false, err
		}
		if i == 0 {
			rec.start = seq.Add(1)
		}
	}
	// Hold the transaction open: commits land out of insert order.
	hold := time.NewTimer(time.Duration(r.Int64N(int64(tortureMaxHold))))
	select {
	case <-hold.C:
	case <-ctx.Done():
		hold.Stop()
		return rec, false, ctx.Err()
	}
	if r.IntN(10) == 0 {
		return rec, false, tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return rec, false, err
	}
	rec.commit = seq.Add(1)
	return rec, true, nil
}
