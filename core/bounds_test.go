package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	routes "github.com/tidesync/tide/internal/transport"
)

// TestPrincipalConnectionBound: a principal's connection beyond
// MaxConnsPerPrincipal is refused at hello with too_many_connections and
// closed with 1013 (try again later); another principal, and anonymous
// callers, still connect; once one of the principal's connections ends, it
// connects again.
func TestPrincipalConnectionBound(t *testing.T) {
	s := newServer(t, core.Config{MaxConnsPerPrincipal: 2})
	a1 := s.dial(t, "alice", "p7")
	a1.hello()
	a2 := s.dial(t, "alice", "p7")
	a2.hello()
	a3 := s.dial(t, "alice", "p7")
	a3.Send(tidetest.HelloFrame(protocol.ClientFrame{}))
	a3.ExpectErrorClose(protocol.CodeTooManyConnections, protocol.CloseOverloaded)
	if !protocol.CloseOverloaded.Reconnect() {
		t.Fatal("clients must reconnect (with backoff) after the close of a connection over the bound")
	}
	s.dial(t, "bob", "p7").hello()
	for range 3 {
		s.dial(t, "", "").hello() // the anonymous principal has per-connection bounds only
	}
	a1.Close()
	// The server forgets a1 once its reader sees the close: until then a
	// new connection is refused. Bounded in count, not time.
	for i := 0; ; i++ {
		c := s.dial(t, "alice", "p7")
		c.Send(tidetest.HelloFrame(protocol.ClientFrame{}))
		if f := c.Next(); f.Type == protocol.FrameWelcome {
			break
		} else if f.Code != protocol.CodeTooManyConnections || i == 200 {
			t.Fatalf("after a connection of alice closed, hello answered by %+v (attempt %d)", f, i)
		}
		c.Close()
	}
}

// TestPrincipalSubscriptionBound: subscriptions count per principal across
// its connections; one beyond MaxSubscriptionsPerPrincipal is refused with
// too_many_subscriptions, others' are not, and an ended one frees its
// place.
func TestPrincipalSubscriptionBound(t *testing.T) {
	s := newServer(t, core.Config{MaxSubscriptionsPerPrincipal: 2})
	a1, a2 := s.dial(t, "alice", "p7"), s.dial(t, "alice", "p7")
	a1.hello()
	a2.hello()
	a1.Subscribe("s1", "todos", project("p7"))
	a1.Collect("s1")
	a2.Subscribe("s2", "todos", project("p7"))
	a2.Collect("s2")
	a2.Subscribe("s3", "todos", project("p7"))
	a2.ExpectErrorFor("s3", protocol.CodeTooManySubscriptions)
	b := s.dial(t, "bob", "p7")
	b.hello()
	b.Subscribe("s1", "todos", project("p7"))
	b.Collect("s1")
	a1.Unsubscribe("s1")
	a1.Probe()
	a2.Subscribe("s3", "todos", project("p7"))
	a2.Collect("s3")
}

// TestPrincipalMutationBound: the mutations waiting on a principal's
// connections are bounded in count and bytes across them, and on each
// connection; one beyond is rejected with rate_limited (clients resend it
// later), the others' mutations still run, and the principal's run once
// the queue drains.
func TestPrincipalMutationBound(t *testing.T) {
	cases := []struct {
		name string
		cfg  core.Config
		pad  int // title bytes of each mutation
		// sends[i] mutations go on alice's connection i, in turn; refused
		// lists the keys rejected rate_limited.
		sends   []int
		refused []string
	}{
		{
			name:    "count per principal",
			cfg:     core.Config{MaxQueuedMutationsPerPrincipal: 4},
			sends:   []int{3, 3},
			refused: []string{"c1-1", "c1-2"},
		},
		{
			name:    "count per connection",
			cfg:     core.Config{MaxQueuedMutations: 2},
			sends:   []int{4, 2},
			refused: []string{"c0-2", "c0-3"}, // the one running counts
		},
		{
			name:    "bytes per connection",
			cfg:     core.Config{MaxFrameBytes: 4096, MaxQueuedMutationBytes: 4096, MaxQueuedMutationBytesPerPrincipal: 1 << 20},
			pad:     3000,
			sends:   []int{2, 1},
			refused: []string{"c0-1"},
		},
		{
			name:    "bytes per principal",
			cfg:     core.Config{MaxFrameBytes: 4096, MaxQueuedMutationBytes: 4096, MaxQueuedMutationBytesPerPrincipal: 8192},
			pad:     3000,
			sends:   []int{1, 1, 1},
			refused: []string{"c2-0"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.cfg)
			release := make(chan struct{})
			if err := core.AddMutator(s.todos, "hold", core.Mutator[addArgs]{
				Authorize: memberOf,
				Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
					if a.ID == "hold" {
						select {
						case <-release:
						case <-ctx.Done():
						}
					}
					return nil
				},
			}); err != nil {
				t.Fatal(err)
			}
			title := strings.Repeat("x", tc.pad)
			conns := make([]*wsClient, len(tc.sends))
			var refused []string
			held := make([]int, len(tc.sends))
			for i, n := range tc.sends {
				c := s.dial(t, "alice", "p7")
				c.hello()
				conns[i] = c
				for j := range n {
					k := fmt.Sprintf("c%d-%d", i, j)
					c.Send(mutateFrame(k, "hold", addArgs{ID: "hold", ProjectID: "p7", Title: title}, time.Now()))
				}
				// Every mutation is queued or rejected once the unsubscribe
				// after them is answered; nothing is acknowledged before
				// release.
				c.Unsubscribe("probe")
				for held[i] = n; ; {
					f := c.Next()
					if f.Type == protocol.FrameError && f.ID == "probe" {
						break
					}
					if f.Type != protocol.FrameReject || f.Code != protocol.CodeRateLimited {
						t.Fatalf("while alice's mutations wait: %+v, want reject rate_limited", f)
					}
					refused = append(refused, f.Key)
					held[i]--
				}
			}
			// Another principal is served while alice's mutations wait.
			b := s.dial(t, "bob", "p7")
			b.hello()
			b.Send(mutateFrame("b", "hold", addArgs{ID: "go", ProjectID: "p7"}, time.Now()))
			if f := b.Expect(protocol.FrameAck); f.Key != "b" {
				t.Fatalf("bob's ack %+v", f)
			}
			close(release)
			for i, c := range conns {
				for range held[i] {
					c.Expect(protocol.FrameAck)
				}
			}
			if strings.Join(refused, " ") != strings.Join(tc.refused, " ") {
				t.Fatalf("rejected %v, want %v", refused, tc.refused)
			}
			// Drained: alice's resends are taken again.
			for i, k := range tc.refused {
				c := conns[k[1]-'0']
				c.Send(mutateFrame(k, "hold", addArgs{ID: fmt.Sprint("again", i), ProjectID: "p7", Title: title}, time.Now()))
				if f := c.Expect(protocol.FrameAck); f.Key != k {
					t.Fatalf("resend of %s answered %+v", k, f)
				}
			}
		})
	}
}

// TestPresencePerPrincipal: one principal's connections cannot fill a
// topic's presence list: past MaxPresencePerPrincipal members its join is
// refused with too_many_presences, and another principal still joins; its
// topics across connections are bounded by MaxTopicsPerPrincipal
// (too_many_topics).
func TestPresencePerPrincipal(t *testing.T) {
	node := channelCluster(t, "memory", 1, core.ChannelConfig{MaxPresence: 3, MaxPresencePerPrincipal: 2, MaxTopicsPerPrincipal: 3})[0]
	var alice []*chanClient
	for range 3 {
		alice = append(alice, dialChan(t, node, "alice", "b1", "b2"))
	}
	alice[0].join("board:b1", nil)
	alice[1].join("board:b1", nil)
	alice[2].send(protocol.FrameTopicSubscribe, "board:b1", nil)
	alice[2].waitError("board:b1", protocol.CodeTooManyPresences)
	bob := dialChan(t, node, "bob", "b1")
	bob.join("board:b1", nil)
	bob.waitPresence("board:b1", "alice=", "alice=", "bob=")

	// Topics: alice holds 2; one more is allowed, then none.
	alice[2].subscribeAck("chat:b1")
	alice[2].send(protocol.FrameTopicSubscribe, "chat:b2", nil)
	alice[2].waitError("chat:b2", protocol.CodeTooManyTopics)
	alice[0].send(protocol.FrameTopicUnsubscribe, "board:b1", nil)
	bob.waitPresence("board:b1", "alice=", "bob=")
	alice[2].subscribeAck("chat:b2")
}

// TestPresenceChurnBounded: a client toggling its subscription to a
// presence topic makes every member receive a diff per join and leave; the
// joins a connection may make are bounded by PresenceJoinRate and
// PresenceJoinBurst (the rest refused with publish_rate_limited), so the
// presence traffic it causes is bounded whatever it sends.
func TestPresenceChurnBounded(t *testing.T) {
	const burst, rate = 4, 1
	node := channelCluster(t, "memory", 1, core.ChannelConfig{PresenceJoinRate: rate, PresenceJoinBurst: burst})[0]
	dialChan(t, node, "bob", "b1").join("board:b1", nil)
	c := dialRaw(t, node.url, "mallory", "b1")
	c.Hello(protocol.ClientFrame{})
	began := time.Now()
	const toggles = 40
	joined := 0
	for range toggles {
		c.Send(topicFrame(protocol.FrameTopicSubscribe, "board:b1"))
		c.Send(topicFrame(protocol.FrameTopicUnsubscribe, "board:b1"))
		switch f := c.Next(); {
		case f.Type == protocol.FrameTopicSubscribed:
			c.Expect(protocol.FramePresence)
			joined++
		case f.Type == protocol.FrameError && f.Code == protocol.CodePublishRateLimit:
			if f := c.Next(); f.Code != protocol.CodeNotTopicMember { // the leave of a refused join
				t.Fatalf("topic-unsubscribe answered by %+v", f)
			}
		default:
			t.Fatalf("topic-subscribe answered by %+v", f)
		}
	}
	c.Probe()
	// The bound holds by construction, whatever the machine's speed: at
	// most the burst plus what refilled meanwhile.
	if most := burst + int(time.Since(began).Seconds()*rate) + 1; joined > most {
		t.Fatalf("%d of %d joins accepted, want at most %d", joined, toggles, most)
	}
	if joined == 0 {
		t.Fatal("no join accepted")
	}
}

// TestChannelFramesCountAgainstFrameRate: topic-subscribe and
// topic-unsubscribe frames count against the connection's frame rate like
// every other client frame.
func TestChannelFramesCountAgainstFrameRate(t *testing.T) {
	node := channelClusterOnConfig(t, core.Config{FrameRate: 1, FrameBurst: 5})
	c := dialRaw(t, node.url, "mallory", "b1")
	c.Hello(protocol.ClientFrame{})
	for i := range 10 {
		typ := protocol.FrameTopicSubscribe
		if i%2 == 1 {
			typ = protocol.FrameTopicUnsubscribe
		}
		c.Send(topicFrame(typ, "chat:b1"))
	}
	for {
		f := c.Next()
		if f.Type == protocol.FrameError && f.Code == protocol.CodeRateLimited {
			return
		}
	}
}

// TestMutateOverHTTPCountsAgainstPrincipal: a mutation run over POST
// <prefix>/mutate counts against its principal's
// bound of waiting mutations while it runs, as a queued mutate frame does.
func TestMutateOverHTTPCountsAgainstPrincipal(t *testing.T) {
	s := newServer(t, core.Config{MaxQueuedMutationsPerPrincipal: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	if err := core.AddMutator(s.todos, "hold", core.Mutator[addArgs]{
		Authorize: func(ctx context.Context, p authz.Principal, a addArgs) error {
			if a.ID == "hold" {
				close(entered)
				<-release
			}
			return memberOf(ctx, p, a)
		},
		Run: func(context.Context, *core.Tx, addArgs) error { return nil },
	}); err != nil {
		t.Fatal(err)
	}
	frame := func(key, id string) protocol.ClientFrame {
		b, err := json.Marshal(mutateFrame(key, "hold", addArgs{ID: id, ProjectID: "p7"}, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		f, perr := protocol.DecodeClientFrame(b)
		if perr != nil {
			t.Fatal(perr)
		}
		return f
	}
	alice := authz.Principal{ID: "alice", Claims: map[string]any{"projects": []string{"p7"}}}
	bob := authz.Principal{ID: "bob", Claims: map[string]any{"projects": []string{"p7"}}}
	ctx := context.Background()
	held := make(chan *protocol.Error)
	go func() {
		_, err := routes.Of(s.e).Mutate(ctx, alice, "o", frame("k1", "hold"))
		held <- err
	}()
	<-entered
	if _, err := routes.Of(s.e).Mutate(ctx, alice, "o", frame("k2", "x")); err == nil || err.Code != protocol.CodeRateLimited {
		t.Fatalf("alice's second mutation while one runs: %v, want rate_limited", err)
	}
	if _, err := routes.Of(s.e).Mutate(ctx, bob, "o", frame("k3", "x")); err != nil {
		t.Fatalf("bob's mutation: %v", err)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the held mutation: %v", err)
	}
	if _, err := routes.Of(s.e).Mutate(ctx, alice, "o", frame("k2", "x")); err != nil {
		t.Fatalf("alice's resend once the first ran: %v", err)
	}
}
