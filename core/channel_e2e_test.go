package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

// TestChannelsEndToEnd runs app channels on one node and on three nodes
// sharing each bus: every subscriber of a topic receives each message
// once, a subscriber of another topic none, a principal denied publish is
// refused with forbidden, and presence lists converge after joins,
// updates, leaves and a killed connection.
func TestChannelsEndToEnd(t *testing.T) {
	for _, kind := range busKinds {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d-nodes", kind, n), func(t *testing.T) {
				testChannels(t, channelCluster(t, kind, n, core.ChannelConfig{}))
			})
		}
	}
}

func testChannels(t *testing.T, nodes []*chanNode) {
	on := func(i int) *chanNode { return nodes[i%len(nodes)] }
	const topic, other = "board:b1", "board:b2"
	users := []string{"alice", "bob", "carol", "eve"}
	clients := make([]*chanClient, len(users))
	for i, u := range users {
		clients[i] = dialChan(t, on(i), u, "b1")
	}
	dave := dialChan(t, on(0), "dave", "b2")
	dave.join(other, nil)

	// Joins: every member sees every member, whichever node it is on.
	var want []string
	for i, c := range clients {
		state := fmt.Sprintf(`{"x":%d}`, i)
		c.join(topic, json.RawMessage(state))
		want = append(want, users[i]+"="+state)
	}
	for _, c := range clients {
		c.waitPresence(topic, want...)
	}
	dave.waitPresence(other, "dave=")

	// Messages: clients that may publish, and the server on every node.
	const perPublisher = 20
	sent := map[string]bool{}
	for k := range perPublisher {
		for i, c := range clients[:3] {
			id := fmt.Sprintf("%s-%d", users[i], k)
			c.send(protocol.FramePublish, topic, cursorMsg{ID: id, X: k, Y: i})
			sent[id] = true
		}
		id := fmt.Sprintf("server-%d", k)
		if err := on(k).e.Publish(context.Background(), topic, cursorMsg{ID: id, X: k}); err != nil {
			t.Fatal(err)
		}
		sent[id] = true
	}
	for _, c := range clients {
		c.waitFor("every message", func() bool { return len(c.messages[topic]) >= len(sent) })
	}
	for i, c := range clients {
		got := map[string]int{}
		for _, f := range c.messagesOf(topic) {
			var m cursorMsg
			if err := json.Unmarshal(f.Data, &m); err != nil {
				t.Fatalf("%s: message %s: %v", users[i], f.Data, err)
			}
			got[m.ID]++
			if wantFrom := m.ID[:len(m.ID)-len(fmt.Sprint("-", m.X))]; wantFrom != "server" && f.From != wantFrom {
				t.Errorf("%s: message %s from %q, want %q", users[i], m.ID, f.From, wantFrom)
			}
		}
		for id := range sent {
			if got[id] != 1 {
				t.Errorf("%s received %s %d times, want once", users[i], id, got[id])
			}
		}
		if len(got) != len(sent) {
			t.Errorf("%s received %d distinct messages, want %d", users[i], len(got), len(sent))
		}
	}
	// dave's topic received nothing of board:b1: a marker published on his
	// topic after them is the first and only message he has.
	if err := on(2).e.Publish(context.Background(), other, cursorMsg{ID: "marker"}); err != nil {
		t.Fatal(err)
	}
	dave.waitFor("the marker", func() bool { return len(dave.messages[other]) == 1 })
	if n := len(dave.messagesOf(topic)); n != 0 {
		t.Errorf("dave received %d messages of %s", n, topic)
	}

	// eve may watch but not publish.
	eve := clients[3]
	eve.send(protocol.FramePublish, topic, cursorMsg{ID: "eve-1"})
	eve.waitError(topic, protocol.CodeForbidden)

	// Update: bob moves his cursor.
	clients[1].send(protocol.FramePresenceUpdate, topic, json.RawMessage(`{"x":99}`))
	want[1] = `bob={"x":99}`
	for _, c := range clients {
		c.waitPresence(topic, want...)
	}

	// Leave: carol unsubscribes.
	clients[2].send(protocol.FrameTopicUnsubscribe, topic, nil)
	want = append(want[:2], want[3:]...)
	for _, c := range []*chanClient{clients[0], clients[1], clients[3]} {
		c.waitPresence(topic, want...)
	}

	// Killed connection: alice's TCP connection is cut without a close.
	_ = clients[0].conn.WebSocket().NetConn().Close()
	want = want[1:]
	for _, c := range []*chanClient{clients[1], clients[3]} {
		c.waitPresence(topic, want...)
	}

	// A newcomer on another node sees who is there, and is seen.
	frank := dialChan(t, on(2), "frank", "b1")
	frank.join(topic, json.RawMessage(`{"x":7}`))
	want = append(want, `frank={"x":7}`)
	for _, c := range []*chanClient{clients[1], clients[3], frank} {
		c.waitPresence(topic, want...)
	}
}
