package core_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

// TestChannelPresenceConverges runs a random sequence of joins, state
// updates, unsubscribes and killed connections on three nodes sharing each
// bus; afterwards every subscriber's presence list, on every node, is
// exactly the members still subscribed with their latest state. Set
// TIDE_SEED to replay a sequence.
func TestChannelPresenceConverges(t *testing.T) {
	seed := rand.Uint64() >> 1
	if v := os.Getenv("TIDE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TIDE_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("presence: seed %d (set TIDE_SEED=%d to replay)", seed, seed)
	for _, kind := range busKinds {
		t.Run(kind, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			nodes := channelCluster(t, kind, 3, core.ChannelConfig{PublishRate: 1000, PublishBurst: 1000})
			const topic = "board:b1"
			type actor struct {
				c     *chanClient
				state string
			}
			var live []*actor
			want := func() []string {
				var out []string
				for _, a := range live {
					out = append(out, a.c.user+"="+a.state)
				}
				return out
			}
			stateOf := func() string { return fmt.Sprintf(`{"x":%d}`, rng.IntN(1000)) }
			for step := range 40 {
				op := rng.IntN(10)
				switch {
				case op < 4 || len(live) < 2: // join
					a := &actor{c: dialChan(t, nodes[rng.IntN(3)], fmt.Sprint("a", step), "b1"), state: stateOf()}
					a.c.join(topic, json.RawMessage(a.state))
					live = append(live, a)
				case op < 7: // update
					a := live[rng.IntN(len(live))]
					a.state = stateOf()
					a.c.send(protocol.FramePresenceUpdate, topic, json.RawMessage(a.state))
				case op < 9: // unsubscribe
					i := rng.IntN(len(live))
					live[i].c.send(protocol.FrameTopicUnsubscribe, topic, nil)
					live = append(live[:i], live[i+1:]...)
				default: // kill the connection
					i := rng.IntN(len(live))
					_ = live[i].c.conn.WebSocket().NetConn().Close()
					live = append(live[:i], live[i+1:]...)
				}
			}
			// Watchers join last, one per node, and must see the same list.
			final := want()
			var watchers []*chanClient
			for i, n := range nodes {
				w := dialChan(t, n, fmt.Sprint("w", i), "b1")
				w.join(topic, nil)
				watchers = append(watchers, w)
				final = append(final, w.user+"=")
			}
			for _, a := range live {
				a.c.waitPresence(topic, final...)
			}
			for _, w := range watchers {
				w.waitPresence(topic, final...)
			}
		})
	}
}
