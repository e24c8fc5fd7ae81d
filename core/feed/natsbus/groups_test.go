package natsbus

import (
	"fmt"
	"slices"
	"testing"

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
