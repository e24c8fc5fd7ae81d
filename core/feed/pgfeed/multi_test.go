package pgfeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/internal/multitest"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/internal/transport"
)

// TestMultiResourceTransactions: on Postgres, transactions writing a
// project's todos, comments and attachments at once reach clients that
// follow the three with one subscription, reconnecting at random (some
// polling), as whole transactions: no client ever holds part of one, and
// all converge. The commit groups are the sequencer's steps.
func TestMultiResourceTransactions(t *testing.T) {
	for seed := range uint64(2) {
		pool, name := testenv.PostgresSchema(t)
		f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		multitest.Run(t, multitest.Env{Feed: f, Prepare: func(t testing.TB, e *core.Engine) {
			ctx := testCtx(t)
			if _, err := pool.Exec(ctx, multitest.DDL); err != nil {
				t.Fatal(err)
			}
			if err := f.Migrate(ctx, e.Schemas()...); err != nil {
				t.Fatal(err)
			}
		}}, multitest.Options{Seed: seed})
	}
}

// BenchmarkReplayMultiResource measures the catch-up replay of a project
// whose 5,000 transactions each wrote a todo, a comment and an attachment
// (15,000 changes), over a real WebSocket on loopback: one subscription of
// the three resources, against three single-resource subscriptions on one
// connection, in the same run; read from Postgres (an engine without a
// memory of recent changes) and from the engine's memory. It reports the
// replay queries and frames per catch-up.
func BenchmarkReplayMultiResource(b *testing.B) {
	const txs = 5000
	pool, name := testenv.PostgresConfig(b, func(c *pgxpool.Config) { c.MaxConns = 4 })
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	ctx := context.Background()
	migrate := func(t testing.TB, e *core.Engine) {
		if err := f.Migrate(ctx, e.Schemas()...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, multitest.DDL); err != nil {
		b.Fatal(err)
	}
	mem, memURL := multitest.NewEngine(b, multitest.Env{Feed: f, Prepare: migrate})
	db, dbURL := multitest.NewEngine(b, multitest.Env{Feed: f, Prepare: migrate, Config: core.Config{ReplayCache: 1}})
	conds := map[string]json.RawMessage{"project_id": json.RawMessage(`"p1"`)}
	// Serving (so the sequencer runs while the backlog is written, as it
	// does in production): a poll waits until the engine is.
	for _, e := range []*core.Engine{mem, db} {
		if _, err := transport.Of(e).Poll(ctx, multitest.Principal("p1"), "", protocol.PollRequest{V: 1, Resources: multitest.Resources, Conditions: conds}); err != nil {
			b.Fatal(err)
		}
	}
	from, err := f.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < txs; i += 4 {
				// One statement string: one transaction of three rows.
				sql := fmt.Sprintf(`INSERT INTO mt_todos VALUES ('t%[1]d', 'p1', 'a todo of a typical length', 'x%[1]d');
INSERT INTO mt_comments VALUES ('c%[1]d', 'ann', 'p1', 't%[1]d', 'x%[1]d');
INSERT INTO mt_attachments VALUES ('a%[1]d', 'p1', 't%[1]d', false, 'x%[1]d')`, i)
				if _, err := pool.Exec(ctx, sql); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	for _, t := range []string{"mt_todos", "mt_comments", "mt_attachments", f.ChangesTable()} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			b.Fatal(err)
		}
	}
	head, err := f.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var groups, largest int64
	if err := pool.QueryRow(ctx, "SELECT count(*), max(n) FROM (SELECT xmin::text, count(*) AS n FROM "+f.ChangesTable()+" WHERE pos > $1 GROUP BY 1) g", int64(from)).Scan(&groups, &largest); err != nil {
		b.Fatal(err)
	}
	b.Logf("backlog: %d changes in %d commit groups (sequencer steps), the largest of %d changes", head-from, groups, largest)
	cursor := protocol.Cursor{Epoch: f.Epoch(), Pos: uint64(from)}.String()
	catchUp := func(b *testing.B, url string, frames []protocol.ClientFrame) int {
		conn := tidetest.Dial(b, url, tidetest.WithHeader("X-Projects", "p1"), tidetest.WithTimeout(time.Minute))
		defer conn.Close()
		conn.Hello(protocol.ClientFrame{})
		for _, fr := range frames {
			conn.Send(fr)
		}
		entries, pages := 0, 0
		for live := 0; live < len(frames); {
			fr := conn.Next()
			switch fr.Type {
			case protocol.FrameChanges:
				entries += len(fr.Entries)
				pages++
			case protocol.FrameCaughtUp:
				live++
			default:
				b.Fatalf("unexpected %s %s %s", fr.Type, fr.Code, fr.Message)
			}
		}
		if entries != 3*txs {
			b.Fatalf("%d entries, want %d", entries, 3*txs)
		}
		return pages
	}
	one := []protocol.ClientFrame{{V: 1, Type: protocol.FrameSubscribe, ID: "m", Resources: multitest.Resources, Conditions: conds, Cursor: cursor}}
	var three []protocol.ClientFrame
	for _, r := range multitest.Resources {
		three = append(three, protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: r, Resource: r, Conditions: conds, Cursor: cursor})
	}
	for _, src := range []struct {
		name string
		e    *core.Engine
		url  string
	}{{"postgres", db, dbURL}, {"memory", mem, memURL}} {
		for _, sub := range []struct {
			name   string
			frames []protocol.ClientFrame
		}{{"one-subscription-3-resources", one}, {"three-subscriptions", three}} {
			b.Run(src.name+"/"+sub.name, func(b *testing.B) {
				q0, pages := src.e.Stats().ReplayQueries, 0
				for b.Loop() {
					pages += catchUp(b, src.url, sub.frames)
				}
				b.ReportMetric(float64(src.e.Stats().ReplayQueries-q0)/float64(b.N), "queries/op")
				b.ReportMetric(float64(pages)/float64(b.N), "frames/op")
			})
		}
	}
}
