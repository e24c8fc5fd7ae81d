package replicator_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
	"github.com/tidesync/tide/core/trace/tideotel"
	"github.com/tidesync/tide/internal/testenv"
)

// memPublisher is a transport in memory: it keeps the last position it
// was given, and closes resumed when a term first resumed.
type memPublisher struct {
	mu      sync.Mutex
	last    feed.Position
	resumed chan struct{}
	once    sync.Once
}

func (p *memPublisher) Resume(_ context.Context, _ string, head feed.Position, _ bool) (feed.Position, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == 0 {
		p.last = head
	}
	p.once.Do(func() { close(p.resumed) })
	return p.last, nil
}

func (p *memPublisher) Publish(_ context.Context, changes []feed.Change) (int, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = changes[len(changes)-1].Pos
	return len(changes), 0, nil
}

// TestPublishSpans: the leader starts a "tide.replicator.publish" span per
// batch it publishes, whose attributes count every change and name the
// batch's positions.
func TestPublishSpans(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	pool, schema := testenv.PostgresSchema(t)
	if _, err := pool.Exec(ctx, itemsDDL); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: schema + "_tide", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	e, err := core.New(core.Config{Feed: f, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[item]{Name: "items", Table: "items", Authorize: authz.Allow}); err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	pub := &memPublisher{resumed: make(chan struct{})}
	rep, err := replicator.New(replicator.Config{Feed: f, Pool: pool, Publisher: pub, Logger: quiet,
		Tracer: tideotel.New(tp), PruneInterval: -1, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rep.Start()
	defer rep.Close()
	// Write once the leader resumed after the head: what the log held
	// before counts as published already.
	select {
	case <-pub.resumed:
	case <-ctx.Done():
		t.Fatal("the replicator never resumed")
	}
	const writes = 7
	for i := range writes {
		if _, err := pool.Exec(ctx, "INSERT INTO items (id, tenant, n) VALUES ($1, 't', $2)", fmt.Sprint("i", i), i); err != nil {
			t.Fatal(err)
		}
	}
	st, err := rep.Wait(ctx, func(s replicator.Status) bool { return s.Published >= writes })
	if err != nil {
		t.Fatalf("published %d of %d: %v", st.Published, writes, err)
	}
	rep.Close() // the last span has ended once the leader stopped

	var stored, changes int64
	var last int64
	for _, s := range exp.GetSpans() {
		if s.Name != "tide.replicator.publish" {
			continue
		}
		a := map[attribute.Key]int64{}
		for _, kv := range s.Attributes {
			a[kv.Key] = kv.Value.AsInt64()
		}
		if a["tide.changes"] < 1 || a["tide.position.first"] > a["tide.position"] || a["tide.position.first"] <= last {
			t.Errorf("publish span attributes %v after position %d", a, last)
		}
		if s.Status.Code.String() != "Unset" {
			t.Errorf("publish span status %v", s.Status)
		}
		last = a["tide.position"]
		stored += a["tide.stored"]
		changes += a["tide.changes"]
	}
	if stored != writes || changes != writes {
		t.Errorf("publish spans counted %d changes, %d stored, want %d", changes, stored, writes)
	}
	if feed.Position(last) != st.LastPublished {
		t.Errorf("last publish span ends at %d, the replicator published up to %d", last, st.LastPublished)
	}
}
