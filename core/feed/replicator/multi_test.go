package replicator_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/natsbus"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
	"github.com/tidesync/tide/core/internal/multitest"
	"github.com/tidesync/tide/internal/testenv"
)

// TestMultiResourceTransactionsNATS: over the NATS bus, transactions
// writing a project's todos, comments and attachments at once reach
// clients that follow the three with one subscription as whole
// transactions, and all converge. The replicator reads the change log a
// few changes at a time and the node's consumer prefetches little, so
// batches would end inside transactions if groups were not kept whole.
func TestMultiResourceTransactionsNATS(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprintf("batch%d", seed+2), func(t *testing.T) {
			ctx := testCtx(t, 3*time.Minute)
			quiet := slog.New(slog.DiscardHandler)
			pool, name := testenv.PostgresSchema(t)
			f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			url := testenv.NATSURL(t)
			nc, err := nats.Connect(url, nats.Name("tide-test multi"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			prefix := "tm" + randomHex(6)
			c := &cluster{prefix: prefix}
			t.Cleanup(func() { c.deleteStream(url) })
			bus, err := natsbus.New(ctx, nc, f, natsbus.Options{Prefix: prefix, Prefetch: 2, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bus.Close() })
			rep, err := replicator.New(replicator.Config{Feed: f, Pool: pool, Publisher: bus, Logger: quiet, Batch: int(seed) + 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rep.Close() })
			multitest.Run(t, multitest.Env{Feed: f, Config: core.Config{Bus: bus, Logger: quiet}, Prepare: func(t testing.TB, e *core.Engine) {
				if _, err := pool.Exec(ctx, multitest.DDL); err != nil {
					t.Fatal(err)
				}
				if err := f.Migrate(ctx, e.Schemas()...); err != nil {
					t.Fatal(err)
				}
				rep.Start()
			}}, multitest.Options{Seed: seed})
		})
	}
}
