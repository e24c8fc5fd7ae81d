package client

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// The Postgres side of the end-to-end tests: the engine of newRealServer on
// the Postgres feed, in a schema of the test's own.

type pgServer struct {
	*realServer
	pool *pgxpool.Pool
}

// newPGServer serves newRealServerWith's engine on a Postgres feed, in a
// fresh schema dropped when the test ends; the schema holds the todos
// table, and runs(id), a table tide does not sync where mutators count
// their runs. It skips the test when Postgres cannot be reached, except in
// CI (CI=true), where it fails.
func newPGServer(t *testing.T, cfg core.Config, policy authz.Policy, opts ...middleware.Option) *pgServer {
	t.Helper()
	pool, schema := testenv.PostgresConfig(t, func(c *pgxpool.Config) { c.MaxConns = testenv.PoolSize(t, 8) })
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL, done boolean NOT NULL DEFAULT false);
		CREATE TABLE runs (id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: schema + "_tide", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	cfg.Feed = f
	srv := newRealServerWith(t, cfg, policy, opts...)
	if err := f.Migrate(ctx, srv.engine.Schemas()...); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return &pgServer{realServer: srv, pool: pool}
}

// runs counts the mutators' runs by id (the runs table).
func (s *pgServer) runs(t *testing.T) map[string]int {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), "SELECT id, count(*) FROM runs GROUP BY id")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
