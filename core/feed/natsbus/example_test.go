package natsbus_test

import (
	"context"
	"log"

	"github.com/nats-io/nats.go"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/feed/natsbus"
)

// The engine's live changes come from the stream; its replays, snapshots
// and head from the feed (Postgres in production; see package replicator
// for the publishing side).
func Example() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	feed := memfeed.New(memfeed.Options{})
	bus, err := natsbus.New(ctx, nc, feed, natsbus.Options{Prefix: "myapp"})
	if err != nil {
		log.Fatal(err)
	}
	defer bus.Close()
	engine, err := core.New(core.Config{Feed: feed, Bus: bus})
	if err != nil {
		log.Fatal(err)
	}
	_ = engine
}
