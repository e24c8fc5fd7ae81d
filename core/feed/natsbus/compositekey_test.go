package natsbus

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// TestCompositeKeysPassThrough: changes of a resource with a composite key,
// keys that a separator would confuse among them, travel through JetStream
// with their key text unchanged.
func TestCompositeKeysPassThrough(t *testing.T) {
	nc := connect(t)
	f := newFeed()
	opts := testOptions(t, nc)
	pub := publisher(t, nc, f, opts, 0)
	node := newBus(t, nc, f, opts)
	ctx := testCtx(t, 20*time.Second)
	if _, err := node.AddInterest(ctx, []feed.Topic{{Resource: "members", Tenant: "b:1"}}); err != nil {
		t.Fatal(err)
	}
	parts := [][2]string{{"a:b", "c"}, {"a", "b:c"}, {`a","b`, "c"}, {"", ""}, {`\`, `"`}, {"ü😀\u2028", "\x01\n"}, {`["a","b"]`, "c"}}
	var cs []feed.Change
	for i, p := range parts {
		key := protocol.EncodeKey(p[0], p[1])
		row, _ := json.Marshal(map[string]string{"user_id": p[0], "tag": p[1], "board_id": "b:1"})
		op := feed.OpUpsert
		if i == len(parts)-1 {
			op = feed.OpDelete
		}
		cs = append(cs, feed.Change{Pos: feed.Position(i + 1), Resource: "members", Op: op, Key: key, Scope: []string{"b:1"}, Row: row, Origin: "dev"})
	}
	publish(t, pub, cs...)
	got := tailN(t, node, 0, len(cs), 100)
	if len(got) != len(cs) {
		t.Fatalf("%d changes, want %d", len(got), len(cs))
	}
	for i := range cs {
		if !sameChange(got[i], cs[i]) {
			t.Fatalf("change %d:\n got %+v\nwant %+v", i, got[i], cs[i])
		}
		if back, err := protocol.DecodeKey(got[i].Key, 2); err != nil || back[0] != parts[i][0] || back[1] != parts[i][1] {
			t.Fatalf("key %q decodes to %q, %v; want %q", got[i].Key, back, err, parts[i])
		}
	}
}
