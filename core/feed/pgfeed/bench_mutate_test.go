package pgfeed_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// BenchmarkMutate measures mutations on Postgres: mutate→ack latency with 1
// and 100 concurrent clients (each sends one mutation and waits for its
// ack, in a loop), and mutations per second with 16 clients against the
// same writes made directly with pgx from 16 goroutines (one transaction
// per write: the row upsert), in the same run.
//
//	go test ./core/feed/pgfeed -run '^$' -bench Mutate -benchtime 2000x
func BenchmarkMutate(b *testing.B) {
	ctx := context.Background()
	pool, schema := testenv.PostgresSchema(b)
	if _, err := pool.Exec(ctx, mDDL); err != nil {
		b.Fatal(err)
	}
	pf, err := pgfeed.New(pool, pgfeed.Options{Schema: schema + "_tide", Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pf.Close() })
	// One client sends as fast as acks come back: lift the frame rate
	// limit (50/s by default) so it measures the server, not the limit.
	e, err := core.New(core.Config{Feed: pf, Logger: testLogger(b), FrameRate: 1 << 20, FrameBurst: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	items, err := core.Register(e, core.Resource[mItem]{Table: "m_items", Name: "items", Authorize: authz.Authenticated})
	if err != nil {
		b.Fatal(err)
	}
	if err := pf.Migrate(ctx, e.Schemas()...); err != nil {
		b.Fatal(err)
	}
	if err := core.AddMutator(items, "put", core.Mutator[mArgs]{
		Authorize: func(context.Context, authz.Principal, mArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a mArgs) error {
			return items.UpsertTx(ctx, tx, mItem{ID: a.ID, Project: "p", Val: a.Val, By: a.By})
		},
	}); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(func(*http.Request) (authz.Principal, error) {
		return authz.Principal{ID: "u"}, nil
	}))(http.NotFoundHandler()))
	b.Cleanup(func() { _ = e.Shutdown(context.Background()); srv.Close() })
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"

	// tideRun sends total mutations from n clients and returns their
	// latencies and the elapsed time.
	run := 0
	tideRun := func(b *testing.B, n, total int) ([]time.Duration, time.Duration) {
		run++
		conns := make([]*tidetest.Conn, n)
		for i := range conns {
			conns[i] = tidetest.Dial(b, url, tidetest.WithTimeout(time.Minute))
			conns[i].Hello(protocol.ClientFrame{Origin: fmt.Sprintf("r%d-c%d", run, i)})
		}
		lat := make([][]time.Duration, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := i; j < total; j += n {
					key := fmt.Sprintf("k%d", j)
					t0 := time.Now()
					c.Send(map[string]any{"v": 1, "type": "mutate", "key": key, "resource": "items", "name": "put",
						"args": mArgs{ID: fmt.Sprintf("row%d", j%500), Val: int64(j), By: key}, "at": t0.UnixMilli()})
					c.Expect(protocol.FrameAck)
					lat[i] = append(lat[i], time.Since(t0))
				}
			}()
		}
		wg.Wait()
		el := time.Since(start)
		for _, c := range conns {
			c.Close()
		}
		return slices.Concat(lat...), el
	}
	pct := func(ds []time.Duration, p float64) float64 {
		slices.Sort(ds)
		return float64(ds[int(float64(len(ds)-1)*p)].Microseconds()) / 1000
	}
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("latency/clients=%d", n), func(b *testing.B) {
			lat, _ := tideRun(b, n, max(b.N, n))
			b.ReportMetric(pct(lat, 0.5), "p50-ms")
			b.ReportMetric(pct(lat, 0.99), "p99-ms")
		})
	}
	b.Run("throughput/clients=16", func(b *testing.B) {
		_, tideEl := tideRun(b, 16, max(b.N, 16))
		// The same writes directly with pgx, 16 goroutines.
		var wg sync.WaitGroup
		start := time.Now()
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := i; j < max(b.N, 16); j += 16 {
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `INSERT INTO m_items (id, project, val, by) VALUES ($1, 'p', $2, $3)
ON CONFLICT (id) DO UPDATE SET val = excluded.val, by = excluded.by`, fmt.Sprintf("row%d", j%500), j, "pgx")
						return err
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		pgxEl := time.Since(start)
		n := float64(max(b.N, 16))
		b.ReportMetric(n/tideEl.Seconds(), "tide-mutations/s")
		b.ReportMetric(n/pgxEl.Seconds(), "pgx-writes/s")
		b.ReportMetric(pgxEl.Seconds()/tideEl.Seconds(), "tide/pgx")
	})
}
