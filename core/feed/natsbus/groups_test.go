package natsbus

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tidesync/tide/core/feed"
)

// TestMessageGroups: a message carries its change's commit group and how
// many changes of it follow; a body without them (an earlier version's)
// decodes as a group of its own; out-of-range values are refused.
func TestMessageGroups(t *testing.T) {
	for _, tc := range []struct {
		tx   uint64
		rest int
	}{{0, 0}, {981, 0}, {981, 2}, {1<<64 - 1, feed.MaxCommitGroup - 1}} {
		c := change(5, "items", "t1")
		c.Tx = tc.tx
		m := msgMeta{Epoch: "E", Pos: 5, Prev: 4, Rest: tc.rest}
		msg, err := encodeMessage("p", &c, m)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		gm, gc, err := decodeMessage(msg.Header, msg.Data)
		if err != nil || gm != m || gc.Tx != tc.tx {
			t.Errorf("%+v: decoded %+v tx %d, %v (body %s)", tc, gm, gc.Tx, err, msg.Data)
		}
		if g := group(msg.Data); g != (groupOf{Tx: tc.tx, Rest: tc.rest}) {
			t.Errorf("%+v: group %+v", tc, g)
		}
	}
	h := nats.Header{}
	h.Set(HeaderEpoch, "E")
	h.Set(HeaderPos, "5")
	h.Set(HeaderPrev, "4")
	h.Set(HeaderBase, "0")
	old := `{"pos":5,"resource":"items","op":"upsert","key":"k","scope":["t1"],"row":{"id":"k"}}`
	if m, c, err := decodeMessage(h, []byte(old)); err != nil || c.Tx != 0 || m.Rest != 0 {
		t.Errorf("a body without tx: %+v %+v %v", m, c, err)
	}
	for name, body := range map[string]string{
		"rest without tx":  `{"pos":5,"resource":"items","op":"upsert","rest":1}`,
		"negative rest":    `{"pos":5,"resource":"items","op":"upsert","tx":3,"rest":-1}`,
		"rest too large":   fmt.Sprintf(`{"pos":5,"resource":"items","op":"upsert","tx":3,"rest":%d}`, feed.MaxCommitGroup),
		"tx not a number":  `{"pos":5,"resource":"items","op":"upsert","tx":"3"}`,
		"negative tx":      `{"pos":5,"resource":"items","op":"upsert","tx":-3}`,
		"rest not integer": `{"pos":5,"resource":"items","op":"upsert","tx":3,"rest":1.5}`,
	} {
		if _, _, err := decodeMessage(h, []byte(body)); err == nil {
			t.Errorf("%s: decoded", name)
		}
		if g := group([]byte(body)); g != (groupOf{}) {
			t.Errorf("%s: group %+v", name, g)
		}
	}
	c := change(5, "items", "t1")
	if _, err := encodeMessage("p", &c, msgMeta{Epoch: "E", Pos: 5, Prev: 4, Rest: 1}); err == nil {
		t.Error("encoded a rest without a tx")
	}
}

// TestRestOf: each change to publish says how many of its group follow it.
func TestRestOf(t *testing.T) {
	for _, tc := range []struct {
		txs  []uint64
		want []int
	}{
		{nil, []int{}},
		{[]uint64{0, 0, 0}, []int{0, 0, 0}},
		{[]uint64{1, 1, 1}, []int{2, 1, 0}},
		{[]uint64{1, 2, 2, 0, 3, 3}, []int{0, 1, 0, 0, 1, 0}},
		{[]uint64{5, 0, 5}, []int{0, 0, 0}},
	} {
		changes := make([]feed.Change, len(tc.txs))
		for i, tx := range tc.txs {
			changes[i] = feed.Change{Pos: feed.Position(i + 1), Tx: tx}
		}
		if got := restOf(changes); !slices.Equal(got, tc.want) {
			t.Errorf("%v: %v, want %v", tc.txs, got, tc.want)
		}
	}
}

// TestTailWholeGroups: commit groups spread over tenants, published in
// batches that end at commit boundaries while the node tails its interest
// (one tenant, or both) with small limits the way the engine does
// (feed.TailCommits): every batch read ends at a commit boundary of the
// node's interest, and the node gets every change of it once, in order.
func TestTailWholeGroups(t *testing.T) {
	for _, both := range []bool{false, true} {
		t.Run(fmt.Sprintf("both=%v", both), func(t *testing.T) {
			nc := connect(t)
			f := newFeed()
			opts := testOptions(t, nc)
			opts.Prefetch = 2
			pub := publisher(t, nc, f, opts, 0)
			node := newBus(t, nc, f, opts)
			ctx := testCtx(t, 60*time.Second)
			topics := []feed.Topic{{Resource: "items", Tenant: "t1"}}
			if both {
				topics = append(topics, feed.Topic{Resource: "items", Tenant: "t2"})
			}
			if _, err := node.AddInterest(ctx, topics); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 9))
			// 120 groups of 1 to 5 changes over both tenants; some without
			// a group (Tx zero).
			var all [][]feed.Change
			pos := feed.Position(0)
			for g := range 120 {
				var group []feed.Change
				tx := uint64(g + 1)
				if g%11 == 0 {
					tx = 0
				}
				for range 1 + rng.IntN(5) {
					pos++
					c := change(pos, "items", []string{"t1", "t2"}[rng.IntN(2)])
					c.Tx = tx
					group = append(group, c)
					if tx == 0 {
						break
					}
				}
				all = append(all, group)
			}
			mine := func(c feed.Change) bool { return both || c.Scope[0] == "t1" }
			var want []feed.Position
			end := map[feed.Position]feed.Position{} // a change → the last change of its group the node gets
			for _, g := range all {
				var last feed.Position
				for _, c := range g {
					if mine(c) {
						want, last = append(want, c.Pos), c.Pos
					}
				}
				for _, c := range g {
					end[c.Pos] = last
				}
			}
			done := make(chan error, 1)
			go func() { // batches of 1 to 3 groups, while the node reads
				rng := rand.New(rand.NewPCG(7, 10))
				for i := 0; i < len(all); {
					var batch []feed.Change
					for n := 1 + rng.IntN(3); n > 0 && i < len(all); n-- {
						batch, i = append(batch, all[i]...), i+1
					}
					if _, _, err := pub.Publish(ctx, batch); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			var got []feed.Position
			after := feed.Position(0)
			for len(got) < len(want) {
				limit := 1 + rng.IntN(4)
				cs, err := feed.TailCommits(ctx, checked{t, node, end}, after, limit)
				if err != nil {
					t.Fatalf("tail after %d (have %d of %d): %v", after, len(got), len(want), err)
				}
				last := cs[len(cs)-1].Pos
				if end[last] != last {
					t.Fatalf("a batch (limit %d) ends at %d, inside a group that goes on to %d: %v", limit, last, end[last], positions(cs))
				}
				got, after = append(got, positions(cs)...), last
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		})
	}
}

// checked is a bus whose Tail results must hold the Bus contract: at most
// limit changes, and a shorter result ends at a commit boundary (end maps a
// change to the last change of its group the node gets).
type checked struct {
	t   *testing.T
	b   *Bus
	end map[feed.Position]feed.Position
}

func (c checked) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	cs, err := c.b.Tail(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	last := cs[len(cs)-1].Pos
	switch {
	case len(cs) > limit:
		c.t.Errorf("Tail(%d, %d) returned %d changes: %v", after, limit, len(cs), positions(cs))
	case len(cs) < limit && c.end[last] != last:
		c.t.Errorf("Tail(%d, %d) returned %v, ending inside a group that goes on to %d", after, limit, positions(cs), c.end[last])
	}
	return cs, nil
}
