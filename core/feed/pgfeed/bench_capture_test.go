package pgfeed_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// The bounds of one round of BenchmarkSyncedVsPlain: it stops at whichever
// comes first.
const (
	syncedRoundTime    = 3 * time.Second
	syncedRoundCommits = 100_000
	syncedRounds       = 3 // per table and writer count, alternating
)

// BenchmarkSyncedVsPlain measures single-row autocommit inserts (as an
// app's request handlers make them) from 1, 16 and 64 concurrent writers
// into a synced table and an identical plain table, alternating plain and
// synced rounds in the same run, and reports synced/plain for each writer
// count (the ratio of the median rounds). It also reports the WAL bytes per
// commit of each table: pg_current_wal_lsn() before and after each round,
// divided by its commits (the lowest round, since the WAL position is the
// whole cluster's and other sessions add to it), and the CPU time per
// commit of the writers' backends, this process (the client side) and the
// sequencer's backend (read from /proc, so Postgres must run on this
// machine): on a machine whose cores the run saturates, plain/synced CPU is
// what bounds synced/plain commits. It runs once whatever b.N is: run it
// with -benchtime 1x.
func BenchmarkSyncedVsPlain(b *testing.B) {
	// Not testenv.PoolSize: 64 writers on fewer connections would measure
	// something else. Run it alone, with -run '^$'.
	pool, name := testenv.PostgresConfig(b, func(c *pgxpool.Config) { c.MaxConns = 70 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, tbl := range []string{"plain_items", "e2e_items"} {
		if _, err := pool.Exec(ctx, "CREATE TABLE "+tbl+" (id text PRIMARY KEY, tenant text NOT NULL, grp bigint NOT NULL, title text NOT NULL, n bigint NOT NULL DEFAULT 0)"); err != nil {
			b.Fatal(err)
		}
	}
	e, err := core.New(core.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[tItem]{Name: "items", Table: "e2e_items"}); err != nil {
		b.Fatal(err)
	}
	f := migrated(b, pool, name, pgfeed.Options{}, e.Schemas()...)

	// The sequencer runs throughout, as on an app node: the synced figures
	// include the work that gives the changes their positions.
	f.StartSequencer()

	var seq atomic.Int64
	// parts is a round's CPU time per commit: the writers' backends, this
	// process (the client side), the sequencer's backend, and the WAL
	// sender streaming the WAL to the sequencer's wake-up (counted in the
	// synced rounds' totals; in plain rounds it is reported apart: it
	// streams their WAL too, but a database without tide has none).
	type parts struct{ writers, client, sequencer, stream float64 }
	round := func(table string, writers int) (rate, walPerCommit float64, cpu parts) {
		sql := "INSERT INTO " + table + " (id, tenant, grp, title) VALUES ($1, $2, $3, 'a title of a typical length')"
		// Each writer keeps one connection for the round, so the CPU time
		// of its backend can be read from /proc before and after.
		conns := make([]*pgxpool.Conn, writers)
		pids := make([]uint32, 0, writers+1)
		for i := range conns {
			c, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
			pids = append(pids, c.Conn().PgConn().PID())
		}
		defer func() {
			for _, c := range conns {
				c.Release()
			}
		}()
		var seqPID []uint32
		if table == "e2e_items" {
			if pid := f.SequencerPID(); pid != 0 {
				seqPID = append(seqPID, pid)
			}
		}
		var streamPID []uint32
		var sender uint32
		if err := pool.QueryRow(ctx, "SELECT coalesce((SELECT pid FROM pg_stat_replication WHERE application_name = 'tide sequencer wake-up' AND pid <> pg_backend_pid() LIMIT 1), 0)").Scan(&sender); err != nil {
			b.Fatal(err)
		}
		if sender != 0 {
			streamPID = append(streamPID, sender)
		}
		cpu0, self0, seq0, stream0 := backendCPU(b, pids), selfCPU(), backendCPU(b, seqPID), backendCPU(b, streamPID)
		var lsn0, lsn1 string
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn0); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(syncedRoundTime)
		var next, done atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for _, c := range conns {
			wg.Go(func() {
				for next.Add(1) <= syncedRoundCommits && time.Now().Before(deadline) {
					id := seq.Add(1)
					if _, err := c.Exec(ctx, sql, fmt.Sprint("k", id), fmt.Sprint("t", id%10), id%3); err != nil {
						b.Error(err)
						return
					}
					done.Add(1)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		if table == "e2e_items" {
			// Let the sequencer finish this round's changes, so its CPU
			// time for them is counted in this round.
			if _, err := f.Head(ctx); err != nil {
				b.Fatal(err)
			}
		}
		n := max(done.Load(), 1)
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
		cpu = parts{per(backendCPU(b, pids) - cpu0), per(selfCPU() - self0), per(backendCPU(b, seqPID) - seq0), per(backendCPU(b, streamPID) - stream0)}
		var wal int64
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn1); err != nil {
			b.Fatal(err)
		}
		if err := pool.QueryRow(ctx, "SELECT (pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn))::bigint", lsn1, lsn0).Scan(&wal); err != nil {
			b.Fatal(err)
		}
		return float64(done.Load()) / elapsed.Seconds(), float64(wal) / float64(n), cpu
	}

	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	b.ResetTimer()
	var report strings.Builder
	for _, writers := range []int{1, 16, 64} {
		var plain, synced, plainWAL, syncedWAL, plainCPU, syncedCPU []float64
		var plainParts, syncedParts []parts
		for range syncedRounds {
			r, w, c := round("plain_items", writers)
			plain, plainWAL, plainParts = append(plain, r), append(plainWAL, w), append(plainParts, c)
			plainCPU = append(plainCPU, c.writers+c.client+c.sequencer)
			r, w, c = round("e2e_items", writers)
			synced, syncedWAL, syncedParts = append(synced, r), append(syncedWAL, w), append(syncedParts, c)
			syncedCPU = append(syncedCPU, c.writers+c.client+c.sequencer+c.stream)
			if b.Failed() {
				b.FailNow()
			}
		}
		ratio := median(synced) / median(plain)
		cpuRatio := median(plainCPU) / median(syncedCPU)
		// The parts of the round whose total is the median.
		partsOf := func(ps []parts, totals []float64) parts { return ps[slices.Index(totals, median(totals))] }
		pp, sp := partsOf(plainParts, plainCPU), partsOf(syncedParts, syncedCPU)
		fmt.Fprintf(&report, "writers=%d: plain %.0f commits/s (rounds %.0f), synced %.0f commits/s (rounds %.0f), synced/plain %.2f; WAL bytes/commit plain %.0f, synced %.0f (lowest rounds); CPU µs/commit plain %.0f (backends %.0f, client %.0f; WAL stream %.0f not counted), synced %.0f (backends %.0f, client %.0f, sequencer %.0f, WAL stream %.0f) (median rounds), plain/synced %.2f\n",
			writers, median(plain), plain, median(synced), synced, ratio, slices.Min(plainWAL), slices.Min(syncedWAL),
			median(plainCPU), pp.writers, pp.client, pp.stream, median(syncedCPU), sp.writers, sp.client, sp.sequencer, sp.stream, cpuRatio)
		b.ReportMetric(ratio, fmt.Sprintf("synced/plain@%d", writers))
		b.ReportMetric(median(plain), fmt.Sprintf("plain-commits/s@%d", writers))
		b.ReportMetric(median(synced), fmt.Sprintf("synced-commits/s@%d", writers))
		b.ReportMetric(slices.Min(plainWAL), fmt.Sprintf("plain-WAL-B/commit@%d", writers))
		b.ReportMetric(slices.Min(syncedWAL), fmt.Sprintf("synced-WAL-B/commit@%d", writers))
		b.ReportMetric(cpuRatio, fmt.Sprintf("CPU-plain/synced@%d", writers))
	}
	b.StopTimer()

	// Every synced commit was captured.
	h, err := f.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var rows, changes int64
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM e2e_items), (SELECT count(*) FROM "+f.ChangesTable()+")").Scan(&rows, &changes); err != nil {
		b.Fatal(err)
	}
	if rows != changes {
		b.Fatalf("%d rows inserted, %d changes up to head %d", rows, changes, h)
	}
	b.Log("\n" + report.String())
}

// backendCPU returns the CPU time the Postgres backends pids have used so
// far (the first field of /proc/PID/schedstat), or fails the benchmark where
// /proc cannot be read (the server must run on this machine).
func backendCPU(b *testing.B, pids []uint32) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			b.Fatalf("CPU time of backend %d: %v (is Postgres on this machine?)", pid, err)
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		total += time.Duration(ns)
	}
	return total
}

// selfCPU returns the CPU time this process (the writers' client side) has
// used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
