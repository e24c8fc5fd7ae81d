package pgfeed_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/synctest"
	"github.com/tidesync/tide/internal/testenv"
)

// The figures of docs/performance.md. Each benchmark reports its figure as
// a custom metric; the commands are in that document.

// BenchmarkReplay100k measures catch-up replay of a backlog of 100,000
// changes to one Go client over a real WebSocket on loopback (default page
// size, 1000), against plain pgx SELECTs of the same 100,000 rows (from the
// table, and from the change log) in the same run.
func BenchmarkReplay100k(b *testing.B) {
	const backlog = 100_000
	pool, name := testenv.PostgresConfig(b, func(c *pgxpool.Config) { c.MaxConns = testenv.PoolSize(b, 8) })
	srv := newE2EServer(b, pool, name, pgfeed.Options{}, core.Config{})
	ctx := context.Background()
	from, err := srv.feed.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO e2e_items (id, tenant, grp, title, n)
SELECT 'k' || i, 't' || (i % 10), i % 3, 'a title of a typical length ' || i, i FROM generate_series(1, $1) i`, backlog); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE e2e_items"); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+srv.feed.TicksTable()+", "+srv.feed.ChangesTable()); err != nil {
		b.Fatal(err)
	}
	head, err := srv.feed.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}

	b.Run("pgx-select-table", func(b *testing.B) {
		for b.Loop() {
			rows, _ := pool.Query(ctx, "SELECT id, tenant, grp, title, n FROM e2e_items")
			got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tItem])
			if err != nil || len(got) != backlog {
				b.Fatalf("%d rows, %v", len(got), err)
			}
		}
		b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("pgx-select-table-raw", func(b *testing.B) {
		for b.Loop() {
			rows, _ := pool.Query(ctx, "SELECT id, tenant, grp, title, n FROM e2e_items")
			n := 0
			for rows.Next() {
				n += len(rows.RawValues())
			}
			if err := rows.Err(); err != nil || n != 5*backlog {
				b.Fatalf("%d values, %v", n, err)
			}
		}
		b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("feed-snapshot-stream", func(b *testing.B) {
		sc := feed.NewScope(srv.items.Schema(), nil)
		for b.Loop() {
			n := 0
			q := feed.SnapshotQuery{Scope: sc, Limit: 1000}
			for {
				read := 0
				err := srv.feed.SnapshotPages(ctx, q, func(pg feed.SnapshotPage) error {
					read += len(pg.Rows)
					if len(pg.Rows) > 0 {
						q.After, q.HasAfter = pg.Rows[len(pg.Rows)-1].Key, true
					}
					if pg.Release != nil {
						pg.Release() // as the engine does once a page is encoded
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				if n += read; read == 0 || read%q.Limit != 0 {
					break
				}
			}
			if n != backlog {
				b.Fatalf("%d rows", n)
			}
		}
		b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("pgx-select-changes", func(b *testing.B) {
		for b.Loop() {
			rows, _ := pool.Query(ctx, "SELECT pos, key, data FROM "+srv.feed.ChangesTable()+" WHERE pos > $1 ORDER BY pos", int64(from))
			n := 0
			var pos int64
			var key string
			var data []byte
			_, err := pgx.ForEachRow(rows, []any{&pos, &key, &data}, func() error { n++; return nil })
			if err != nil || n != backlog {
				b.Fatalf("%d rows, %v", n, err)
			}
		}
		b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("feed-replay-pages", func(b *testing.B) {
		sc := feed.NewScope(srv.items.Schema(), nil)
		for b.Loop() {
			n, after := 0, from
			for {
				cs, err := srv.feed.Replay(ctx, feed.ReplayQuery{Scope: sc, After: after, Until: head, Limit: 1000})
				if err != nil {
					b.Fatal(err)
				}
				n += len(cs)
				if len(cs) < 1000 {
					break
				}
				after = cs[len(cs)-1].Pos
			}
			if n != backlog {
				b.Fatalf("%d changes", n)
			}
		}
		b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	for _, limit := range []int{1000, 4000, 16000} {
		b.Run(fmt.Sprintf("feed-snapshot-pages-%d", limit), func(b *testing.B) {
			sc := feed.NewScope(srv.items.Schema(), nil)
			for b.Loop() {
				n := 0
				q := feed.SnapshotQuery{Scope: sc, Limit: limit}
				for {
					pg, err := srv.feed.Snapshot(ctx, q)
					if err != nil {
						b.Fatal(err)
					}
					n += len(pg.Rows)
					if len(pg.Rows) < q.Limit {
						break
					}
					q.After, q.HasAfter = pg.Rows[len(pg.Rows)-1].Key, true
				}
				if n != backlog {
					b.Fatalf("%d rows", n)
				}
			}
			b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
	b.Run("websocket-replay", func(b *testing.B) {
		scope := client.Scope{Resource: "items"}
		digest, err := scope.Digest()
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			store := client.NewMemoryStore()
			cursor := protocol.Cursor{Epoch: srv.feed.Epoch(), Pos: uint64(from)}.String()
			if err := store.Save(ctx, client.Record{Digest: digest, Resource: "items", State: client.StateLive, Cursor: cursor}); err != nil {
				b.Fatal(err)
			}
			// A synctest.Rows keeps the rows as they arrive (raw JSON), as an app's
			// copy would before it decodes what it renders.
			caught := make(chan struct{})
			c, err := client.New(client.Config{URL: srv.url, Store: store, OnEvent: func(e client.Event) {
				if e.Kind == client.EventCaughtUp {
					close(caught)
				}
			}})
			if err != nil {
				b.Fatal(err)
			}
			m := synctest.NewRows()
			if _, err := c.Subscribe(scope, m); err != nil {
				b.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(runCtx) }()
			<-caught
			stop()
			<-done
			if n := m.Len(); n != backlog {
				b.Fatalf("client holds %d rows, want %d", n, backlog)
			}
		}
		b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// BenchmarkCommitToClient measures the latency from a writer's COMMIT
// returning to a subscribed Go client (loopback WebSocket) applying the
// change, at a steady 100 commits/s for 10 s, with the sequencer woken by
// the WAL stream (wake=wal) and polling alone (wake=poll). Each runs once
// whatever b.N is: run it with -benchtime 1x.
func BenchmarkCommitToClient(b *testing.B) {
	for _, poll := range []bool{false, true} {
		name := "wake=wal"
		if poll {
			name = "wake=poll"
		}
		b.Run(name, func(b *testing.B) { benchCommitToClient(b, pgfeed.Options{PollOnly: poll}) })
	}
}

func benchCommitToClient(b *testing.B, opts pgfeed.Options) {
	const rate, duration = 100, 10 * time.Second
	pool, name := testenv.PostgresConfig(b, func(c *pgxpool.Config) { c.MaxConns = testenv.PoolSize(b, 8) })
	srv := newE2EServer(b, pool, name, opts, core.Config{})
	ctx := context.Background()

	var mu sync.Mutex
	committed := map[string]time.Time{}
	var lat []time.Duration
	done := make(chan struct{})
	total := int(rate * duration / time.Second)
	handler := client.HandlerFunc(func(_ context.Context, bt client.Batch) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, e := range bt.Entries {
			if t0, ok := committed[e.Key]; ok {
				lat = append(lat, now.Sub(t0))
				delete(committed, e.Key)
			} else {
				committed[e.Key] = now // arrived before the writer recorded its commit
			}
		}
		if len(lat) == total {
			close(done)
		}
		return nil
	})
	c, err := client.New(client.Config{URL: srv.url})
	if err != nil {
		b.Fatal(err)
	}
	caught := make(chan struct{}, 1)
	if _, err := c.Subscribe(client.Scope{Resource: "items"}, client.HandlerFunc(func(ctx context.Context, bt client.Batch) error {
		if bt.CaughtUp {
			select {
			case caught <- struct{}{}:
			default:
			}
		}
		return handler(ctx, bt)
	})); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	defer func() { stop(); <-ran }()
	<-caught

	b.ResetTimer()
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := range total {
		<-tick.C
		key := fmt.Sprint("k", i)
		if _, err := pool.Exec(ctx, "INSERT INTO e2e_items (id, tenant, grp, title) VALUES ($1, 't1', 1, 'x')", key); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		mu.Lock()
		if t1, ok := committed[key]; ok { // the client was faster than this goroutine
			lat = append(lat, t1.Sub(now))
			delete(committed, key)
			if len(lat) == total {
				close(done)
			}
		} else {
			committed[key] = now
		}
		mu.Unlock()
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		b.Fatalf("only %d of %d changes reached the client", len(lat), total)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return float64(max(lat[max(i, 0)], 0).Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(float64(srv.feed.Stats().Polls), "polls")
	b.ReportMetric(float64(srv.feed.SequencerStatus().WALWakeups), "wal-wakeups")
}
