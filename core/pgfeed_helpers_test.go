package core_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed/pgfeed"
)

// newPgFeed returns a Postgres feed on pool whose tables live in a schema
// of the test's own (schema, the test's schema from testenv, with "_tide"
// appended: dropped with it), closed when the test ends. opts.Schema is
// set here.
func newPgFeed(t testing.TB, pool *pgxpool.Pool, schema string, opts pgfeed.Options) *pgfeed.Feed {
	t.Helper()
	opts.Schema = schema + "_tide"
	f, err := pgfeed.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
