package pgfeed_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// prevUpdates is the number of single-row UPDATEs of one round of
// BenchmarkPreviousVersionCost.
const (
	prevUpdates = 2000
	prevRounds  = 5
)

// BenchmarkPreviousVersionCost measures what recording previous versions
// costs an update: single-row autocommit UPDATEs from one writer into four
// identical tables, in alternating rounds: a plain table, a synced resource
// without a row filter (no previous version kept), one with a filter that
// declares the two columns it reads (FilterColumns: they are kept), and one
// whose filter declares none (every column is kept). It reports WAL bytes
// per update (the lowest round, since the WAL position is the whole
// cluster's and other sessions add to it) and the writer's backend CPU time
// per update (the median round), with the sequencer running. Run it with
// -benchtime 1x.
func BenchmarkPreviousVersionCost(b *testing.B) {
	pool, name := testenv.PostgresConfig(b, func(c *pgxpool.Config) { c.MaxConns = testenv.PoolSize(b, 8) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tables := []string{"plain_items", "nofilter_items", "cols_items", "whole_items"}
	for _, tbl := range tables {
		if _, err := pool.Exec(ctx, "CREATE TABLE "+tbl+" (id text PRIMARY KEY, tenant text NOT NULL, grp bigint NOT NULL, title text NOT NULL, n bigint NOT NULL DEFAULT 0)"); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO "+tbl+" (id, tenant, grp, title) SELECT 'k' || i, 't1', 1, 'a title of a typical length' FROM generate_series(1, 100) i"); err != nil {
			b.Fatal(err)
		}
	}
	e, err := core.New(core.Config{})
	if err != nil {
		b.Fatal(err)
	}
	filter := func(p authz.Principal, r *tItem) bool { return r.Grp == 1 || r.Title == p.ID }
	for _, r := range []core.Resource[tItem]{
		{Name: "nofilter", Table: "nofilter_items"},
		{Name: "cols", Table: "cols_items", Filter: filter, FilterColumns: []string{"grp", "title"}},
		{Name: "whole", Table: "whole_items", Filter: filter},
	} {
		if _, err := core.Register(e, r); err != nil {
			b.Fatal(err)
		}
	}
	f := migrated(b, pool, name, pgfeed.Options{}, e.Schemas()...)
	f.StartSequencer()

	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	pid := []uint32{conn.Conn().PgConn().PID()}
	lsn := func() (l int64) {
		if err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").Scan(&l); err != nil {
			b.Fatal(err)
		}
		return l
	}
	wal, cpu := map[string][]float64{}, map[string][]float64{}
	b.ResetTimer()
	for r := range prevRounds {
		for _, tbl := range tables {
			sql := "UPDATE " + tbl + " SET n = n + 1, title = $2 WHERE id = $1"
			w0, c0 := lsn(), backendCPU(b, pid)
			for i := range prevUpdates {
				if _, err := conn.Exec(ctx, sql, fmt.Sprint("k", 1+i%100), fmt.Sprintf("title %d.%d", r, i)); err != nil {
					b.Fatal(err)
				}
			}
			c1, w1 := backendCPU(b, pid), lsn()
			wal[tbl] = append(wal[tbl], float64(w1-w0)/prevUpdates)
			cpu[tbl] = append(cpu[tbl], float64((c1-c0).Microseconds())/prevUpdates)
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	var report strings.Builder
	for _, tbl := range tables {
		fmt.Fprintf(&report, "%-15s WAL %5.0f B/update (rounds %.0f), writer CPU %4.0f µs/update (rounds %.0f)\n", tbl, slices.Min(wal[tbl]), wal[tbl], med(cpu[tbl]), cpu[tbl])
		b.ReportMetric(slices.Min(wal[tbl]), strings.TrimSuffix(tbl, "_items")+"-WAL-B/update")
		b.ReportMetric(med(cpu[tbl]), strings.TrimSuffix(tbl, "_items")+"-µs/update")
	}
	b.Log("\n" + report.String())
}
