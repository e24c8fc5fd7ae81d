package pgfeed_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// BenchmarkReplayPage measures one replay page query (Feed.Replay, 1000
// changes, the default page) over a change log of 100,000 changes spread
// over 10 tenants: a scope with one condition (the common case: one
// tenant's 10,000 changes), an "in" condition over two tenants, and the
// whole resource. Each iteration reads the next page of the scope, from
// the first to the last and around again, so the pages are the ones a
// catch-up reads.
//
//	go test ./core/pgfeed -run '^$' -bench ReplayPage -benchmem
func BenchmarkReplayPage(b *testing.B) {
	const backlog, tenants, limit = 100_000, 10, 1000
	pool, name := testenv.PostgresConfig(b, func(c *pgxpool.Config) { c.MaxConns = 4 })
	ctx := context.Background()
	if _, err := pool.Exec(ctx, tItemsDDL); err != nil {
		b.Fatal(err)
	}
	e, err := core.New(core.Config{})
	if err != nil {
		b.Fatal(err)
	}
	items, err := core.Register(e, core.Resource[tItem]{Name: "items", Table: "e2e_items", Authorize: authz.Allow})
	if err != nil {
		b.Fatal(err)
	}
	f := migrated(b, pool, name, pgfeed.Options{}, e.Schemas()...)
	from, err := f.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO e2e_items (id, tenant, grp, title, n)
SELECT 'k' || i, 't' || (i % $2), i % 3, 'a title of a typical length ' || i, i FROM generate_series(1, $1) i`, backlog, tenants); err != nil {
		b.Fatal(err)
	}
	for _, t := range []string{"e2e_items", f.ChangesTable()} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			b.Fatal(err)
		}
	}
	head, err := f.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	s := items.Schema()
	tenant := s.ScopeIndex("tenant")
	for _, tc := range []struct {
		name  string
		scope feed.Scope
	}{
		{"scope=one-tenant", feed.NewScope(s, []feed.Cond{{Col: tenant, Values: []string{"t3"}}})},
		{"scope=two-tenants", feed.NewScope(s, []feed.Cond{{Col: tenant, Values: []string{"t3", "t7"}}})},
		{"scope=all", feed.NewScope(s, nil)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			after, rows := from, 0
			b.ReportAllocs()
			for b.Loop() {
				cs, err := f.Replay(ctx, feed.ReplayQuery{Scope: tc.scope, After: after, Until: head, Limit: limit})
				if err != nil {
					b.Fatal(err)
				}
				rows += len(cs)
				if len(cs) < limit {
					after = from // the scope's last page: around again
				} else {
					after = cs[len(cs)-1].Pos
				}
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
