package natsbus

import (
	"bytes"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
)

// TestValueKindsThroughBus: changes whose rows hold every value kind
// (decimals, arrays with NULL elements, enums, uuid, inet, cidr, interval,
// timestamptz with microseconds) travel through JetStream to another node
// byte for byte as published, and a node interested in one tenant gets
// only that tenant's.
func TestValueKindsThroughBus(t *testing.T) {
	nc := connect(t)
	f := newFeed()
	opts := testOptions(t, nc)
	pub := publisher(t, nc, f, opts, 0)
	node := newBus(t, nc, f, opts)
	ctx := testCtx(t, 20*time.Second)
	if _, err := node.AddInterest(ctx, []feed.Topic{{Resource: feedtest.Values.Name, All: true}}); err != nil {
		t.Fatal(err)
	}
	one := newBus(t, nc, f, opts)
	if _, err := one.AddInterest(ctx, []feed.Topic{{Resource: feedtest.Values.Name, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	cs := feedtest.ValueChanges()
	for i := range cs {
		cs[i].Pos = feed.Position(i + 1)
		if i == 1 {
			cs[i].Origin = "dev-1"
		}
	}
	publish(t, pub, cs...)
	got := tailN(t, node, 0, len(cs), 10)
	if len(got) != len(cs) {
		t.Fatalf("%d changes, want %d", len(got), len(cs))
	}
	for i, c := range got {
		w := cs[i]
		if c.Pos != w.Pos || c.Key != w.Key || c.Origin != w.Origin || !bytes.Equal(c.Row, w.Row) {
			t.Fatalf("change %d:\n got %d %s %q %s\nwant %d %s %q %s", i, c.Pos, c.Key, c.Origin, c.Row, w.Pos, w.Key, w.Origin, w.Row)
		}
	}
	got = tailN(t, one, 0, 1, 10)
	if len(got) != 1 || got[0].Key != "v3" || !feedtest.SameRow(got[0].Row, cs[2].Row) {
		t.Fatalf("tenant t2: got %d changes, first %+v", len(got), got)
	}
}
