package natsbus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// testCtx returns a context that ends with the test, bounded as a failure
// bound only.
func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connect connects to the test NATS server (skipped, or failed in CI, when
// it is unreachable) and closes the connection when the test ends.
func connect(t testing.TB) *nats.Conn {
	t.Helper()
	url := testenv.NATSURL(t)
	nc, err := nats.Connect(url, nats.Name("tide-test "+t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// testOptions returns options with a prefix and stream of the test's own,
// so tests and packages run in parallel on one server; the stream is deleted
// when the test ends.
func testOptions(t testing.TB, nc *nats.Conn) Options {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	prefix := "tt" + hex.EncodeToString(b)
	opts := Options{Prefix: prefix, MemoryStorage: true, Logger: slog.New(slog.DiscardHandler), Heartbeat: time.Second}
	t.Cleanup(func() {
		js, err := jetstream.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, defaultStream(prefix))
	})
	return opts
}

func newBus(t testing.TB, nc *nats.Conn, f feed.Feed, opts Options) *Bus {
	t.Helper()
	b, err := New(testCtx(t, 10*time.Second), nc, f, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// change returns an upsert of resource for tenant at pos.
func change(pos feed.Position, resource, tenant string) feed.Change {
	return feed.Change{
		Pos: pos, Resource: resource, Op: feed.OpUpsert, Key: fmt.Sprintf("k%d", pos),
		Scope: []string{tenant}, Row: []byte(fmt.Sprintf(`{"id":"k%d","tenant":%q}`, pos, tenant)),
	}
}

// publisher returns a bus used only to publish, resumed for f's epoch after
// head.
func publisher(t testing.TB, nc *nats.Conn, f feed.Feed, opts Options, head feed.Position) *Bus {
	t.Helper()
	p := newBus(t, nc, f, opts)
	if _, err := p.Resume(testCtx(t, 5*time.Second), f.Epoch(), head, false); err != nil {
		t.Fatal(err)
	}
	return p
}

func publish(t testing.TB, p *Bus, cs ...feed.Change) {
	t.Helper()
	stored, dups, err := p.Publish(testCtx(t, 10*time.Second), cs)
	if err != nil || stored != len(cs) || dups != 0 {
		t.Fatalf("publish %d changes: stored %d, duplicates %d, err %v", len(cs), stored, dups, err)
	}
}

// tailN calls Tail until it has n changes (or fails the test).
func tailN(t testing.TB, b *Bus, after feed.Position, n, limit int) []feed.Change {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	var out []feed.Change
	for len(out) < n {
		cs, err := b.Tail(ctx, after, limit)
		if err != nil {
			t.Fatalf("Tail after %d (have %d of %d): %v", after, len(out), n, err)
		}
		out = append(out, cs...)
		after = cs[len(cs)-1].Pos
	}
	return out
}

func tenants(cs []feed.Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%d:%s ", c.Pos, c.Scope[0])
	}
	return b.String()
}

func newFeed() *memfeed.Feed { return memfeed.New(memfeed.Options{}) }
