package pgfeed_test

import (
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/internal/multitest"
	"github.com/tidesync/tide/core/internal/testenv"
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
