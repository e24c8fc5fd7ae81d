package replicator_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/natsbus"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
	"github.com/tidesync/tide/middleware"
)

// An app node on the NATS bus: the engine tails the bus, the replicator
// (leader on one node only) publishes the change log into it. Leave out
// natsbus, Bus and Publisher for the Postgres bus.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	feed, err := pgfeed.New(pool, pgfeed.Options{})
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	bus, err := natsbus.New(ctx, nc, feed, natsbus.Options{})
	if err != nil {
		log.Fatal(err)
	}
	engine, err := core.New(core.Config{Feed: feed, Bus: bus})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := core.Register(engine, core.Resource[item]{Name: "items", Table: "items"}); err != nil {
		log.Fatal(err)
	}
	if err := feed.Migrate(ctx, engine.Schemas()...); err != nil {
		log.Fatal(err)
	}
	rep, err := replicator.New(replicator.Config{Feed: feed, Pool: pool, Publisher: bus})
	if err != nil {
		log.Fatal(err)
	}
	rep.Start()
	defer rep.Close()

	mux := http.NewServeMux() // the app's routes
	mux.Handle("/readyz", rep.Handler())
	log.Fatal(http.ListenAndServe(":8080", middleware.Middleware(engine)(mux)))
}
