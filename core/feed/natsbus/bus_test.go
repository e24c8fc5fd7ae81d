package natsbus

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
)

func TestFilterFor(t *testing.T) {
	b := &Bus{opts: Options{Prefix: "p", MaxFilterSubjects: 3}.withDefaults(), all: "p.change.>"}
	tp := func(r, ten string) feed.Topic { return feed.Topic{Resource: r, Tenant: ten} }
	whole := func(r string) feed.Topic { return feed.Topic{Resource: r, All: true} }
	set := func(ts ...feed.Topic) map[feed.Topic]struct{} {
		m := map[feed.Topic]struct{}{}
		for _, t := range ts {
			m[t] = struct{}{}
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		multi bool
		want  map[feed.Topic]struct{}
		out   []string
	}{
		{"one tenant", true, set(tp("a", "t1")), []string{"p.change.a.t1"}},
		{"tenants", true, set(tp("a", "t2"), tp("a", "t1"), tp("b", "x.y")), []string{"p.change.a.t1", "p.change.a.t2", "p.change.b.x%2Ey"}},
		{"whole wins", true, set(tp("a", "t1"), whole("a"), tp("b", "t")), []string{"p.change.a.*", "p.change.b.t"}},
		{"collapse biggest", true, set(tp("a", "1"), tp("a", "2"), tp("a", "3"), tp("b", "1")), []string{"p.change.a.*", "p.change.b.1"}},
		{"collapse all", true, set(whole("a"), whole("b"), whole("c"), whole("d")), []string{"p.change.>"}},
		{"old server one", false, set(tp("a", "t1")), []string{"p.change.a.t1"}},
		{"old server one resource", false, set(tp("a", "t1"), tp("a", "t2")), []string{"p.change.a.*"}},
		{"old server resources", false, set(tp("a", "t1"), tp("b", "t2")), []string{"p.change.>"}},
	} {
		b.opts.multiFilter = 1
		if tc.multi {
			b.opts.multiFilter = 2
		}
		if got := b.filterFor(tc.want); !slices.Equal(got, tc.out) {
			t.Errorf("%s: filter %q, want %q", tc.name, got, tc.out)
		}
	}
}

// TestInterestSwap: a node receives only its topics' messages (counted),
// and when its interest grows it returns, after the last change it had
// returned, every change of the old and the new topics: messages it had
// fetched but not returned are read again through the new consumer.
func TestInterestSwap(t *testing.T) {
	for _, multi := range []int{0, 1} {
		name := map[int]string{0: "server filters", 1: "one filter subject"}[multi]
		t.Run(name, func(t *testing.T) {
			nc := connect(t)
			f := newFeed()
			opts := testOptions(t, nc)
			opts.multiFilter = multi
			opts.Prefetch = 4
			pub := publisher(t, nc, f, opts, 0)
			node := newBus(t, nc, f, opts)
			if multi == 0 && !node.supportsMultiFilter() {
				t.Logf("nats-server %s takes one filter subject per consumer: several topics are filtered by the node", nc.ConnectedServerVersion())
			}
			ctx := testCtx(t, 20*time.Second)
			if _, err := node.AddInterest(ctx, []feed.Topic{{Resource: "items", Tenant: "t1"}}); err != nil {
				t.Fatal(err)
			}
			// 60 changes over three tenants, round robin, and another resource.
			var all []feed.Change
			for p := feed.Position(1); p <= 60; p++ {
				res, ten := "items", []string{"t1", "t2", "t3"}[p%3]
				if p%10 == 0 {
					res = "other"
				}
				all = append(all, change(p, res, ten))
			}
			publish(t, pub, all...)
			want := func(after feed.Position, keep func(feed.Change) bool) []feed.Position {
				var out []feed.Position
				for _, c := range all {
					if c.Pos > after && keep(c) {
						out = append(out, c.Pos)
					}
				}
				return out
			}
			t1 := func(c feed.Change) bool { return c.Resource == "items" && c.Scope[0] == "t1" }
			// Phase 1: only t1, in small batches; stop after 5.
			got := tailN(t, node, 0, 5, 2)
			if ps := positions(got); !slices.Equal(ps, want(0, t1)[:len(ps)]) {
				t.Fatalf("t1 only: got %v (%s)", ps, tenants(got))
			}
			st := node.Stats()
			if st.Received != st.Returned || st.Filtered != 0 {
				t.Fatalf("one topic: received %d, returned %d, filtered %d; want only t1's messages delivered", st.Received, st.Returned, st.Filtered)
			}
			last := got[len(got)-1].Pos
			// Phase 2: add t2; everything of t1 and t2 after `last` follows.
			covered, err := node.AddInterest(ctx, []feed.Topic{{Resource: "items", Tenant: "t2"}})
			if err != nil {
				t.Fatal(err)
			}
			if covered < last {
				t.Fatalf("AddInterest returned %d, below the last position returned %d", covered, last)
			}
			// t1 after the last returned, t2 after what AddInterest
			// returned (the engine replays t2 up to there).
			t12 := func(c feed.Change) bool {
				return c.Resource == "items" && (c.Scope[0] == "t1" || c.Scope[0] == "t2" && c.Pos > covered)
			}
			exp := want(last, t12)
			got = tailN(t, node, last, len(exp), 3)
			if ps := positions(got); !slices.Equal(ps, exp) {
				t.Fatalf("after adding t2: got %v, want %v", ps, exp)
			}
			st = node.Stats()
			t.Logf("received %d messages, returned %d changes, filtered %d, consumers %d", st.Received, st.Returned, st.Filtered, st.Readers)
			if st.Readers < 2 {
				t.Errorf("the consumer was not swapped (%d consumers)", st.Readers)
			}
			if node.supportsMultiFilter() && st.Filtered != 0 {
				t.Errorf("server-side filtering delivered %d messages of other topics", st.Filtered)
			}
			// Nothing of t3 or of the other resource was returned.
			more := tailNone(t, node, got[len(got)-1].Pos)
			if len(more) != 0 {
				t.Errorf("returned changes outside the interest: %s", tenants(more))
			}
		})
	}
}

// tailNone checks that Tail returns nothing for a short while (a bound
// on waiting for something that must not come, not a synchronization).
func tailNone(t *testing.T, b *Bus, after feed.Position) []feed.Change {
	t.Helper()
	ctx := testCtx(t, 300*time.Millisecond)
	cs, err := b.Tail(ctx, after, 10)
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	return cs
}

func positions(cs []feed.Change) []feed.Position {
	out := make([]feed.Position, len(cs))
	for i, c := range cs {
		out[i] = c.Pos
	}
	return out
}

// TestRetentionExpired: when the stream's limits dropped messages a node
// had not read, Tail returns ErrCursorExpired (the engine then resyncs from
// Postgres), both when positioning and for a running consumer; and the
// node's topics being interleaved with others is not mistaken for a loss.
func TestRetentionExpired(t *testing.T) {
	nc := connect(t)
	f := newFeed()
	opts := testOptions(t, nc)
	opts.MaxMsgs = 10
	opts.Prefetch = 2
	pub := publisher(t, nc, f, opts, 0)
	ctx := testCtx(t, 20*time.Second)
	interest := []feed.Topic{{Resource: "items", Tenant: "t1"}}

	// Interleaved tenants within retention: no false alarm.
	node := newBus(t, nc, f, opts)
	if _, err := node.AddInterest(ctx, interest); err != nil {
		t.Fatal(err)
	}
	for p := feed.Position(1); p <= 8; p++ {
		publish(t, pub, change(p, "items", map[bool]string{true: "t1", false: "t2"}[p%4 == 0]))
	}
	got := tailN(t, node, 0, 2, 10)
	if ps := positions(got); !slices.Equal(ps, []feed.Position{4, 8}) {
		t.Fatalf("got %v, want [4 8]", ps)
	}

	// A running consumer that stops reading: retention drops what it had
	// not fetched.
	for p := feed.Position(9); p <= 40; p++ {
		publish(t, pub, change(p, "items", "t1"))
	}
	after := feed.Position(8)
	var err error
	for err == nil {
		var cs []feed.Change
		cs, err = node.Tail(ctx, after, 1)
		if err == nil {
			after = cs[len(cs)-1].Pos
		}
	}
	if !errors.Is(err, feed.ErrCursorExpired) {
		t.Fatalf("running consumer: Tail after %d: %v, want ErrCursorExpired", after, err)
	}
	t.Logf("running consumer returned up to %d, then ErrCursorExpired", after)

	// Positioning after a position the stream no longer holds.
	node2 := newBus(t, nc, f, opts)
	if _, err := node2.AddInterest(ctx, interest); err != nil {
		t.Fatal(err)
	}
	if _, err := node2.Tail(ctx, 5, 10); !errors.Is(err, feed.ErrCursorExpired) {
		t.Fatalf("positioning after 5: %v, want ErrCursorExpired", err)
	}
	// From a position it holds, it resumes (the engine calls Tail again
	// from the feed's head).
	got = tailN(t, node2, 35, 5, 10)
	if ps := positions(got); !slices.Equal(ps, []feed.Position{36, 37, 38, 39, 40}) {
		t.Fatalf("after 35: %v", ps)
	}
	if s := node.Stats().Expired + node2.Stats().Expired; s != 2 {
		t.Errorf("Expired counters: %d, want 2", s)
	}
}

// TestNewChain: a publisher that finds the stream empty starts a chain after
// the feed's head; a node that knows less than that resyncs, one that knows
// as much reads on.
func TestNewChain(t *testing.T) {
	nc := connect(t)
	f := newFeed()
	opts := testOptions(t, nc)
	ctx := testCtx(t, 20*time.Second)
	behind := newBus(t, nc, f, opts)
	current := newBus(t, nc, f, opts)
	for _, n := range []*Bus{behind, current} {
		if _, err := n.AddInterest(ctx, []feed.Topic{{Resource: "items", All: true}}); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := behind.Tail(ctx, 50, 10)
		errc <- err
	}()
	done := make(chan []feed.Change, 1)
	go func() {
		cs, err := current.Tail(ctx, 100, 10)
		if err != nil {
			t.Error(err)
		}
		done <- cs
	}()
	pub := publisher(t, nc, f, opts, 100) // empty stream: chain after 100
	publish(t, pub, change(101, "items", "a"), change(105, "items", "b"))
	if err := <-errc; !errors.Is(err, feed.ErrCursorExpired) {
		t.Fatalf("node at 50, chain after 100: %v, want ErrCursorExpired", err)
	}
	if cs := <-done; len(cs) == 0 || cs[0].Pos != 101 {
		t.Fatalf("node at 100: %v", positions(cs))
	}
	// A later publisher continues the chain: Prev links to the last message.
	pub2 := publisher(t, nc, f, opts, 200)
	publish(t, pub2, change(106, "items", "a"))
	m, err := pub2.getMsg(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := decodeMeta(m.Header)
	if err != nil || meta.Prev != 105 || meta.Base != 100 {
		t.Fatalf("continued chain: %+v %v, want prev 105 base 100", meta, err)
	}
}

// TestPublisherFence: two publishers for one stream never store a change
// twice or out of order; the one that falls behind is refused and resumes
// after the other's last change.
func TestPublisherFence(t *testing.T) {
	nc := connect(t)
	f := newFeed()
	opts := testOptions(t, nc)
	ctx := testCtx(t, 20*time.Second)
	a := publisher(t, nc, f, opts, 0)
	b := publisher(t, nc, f, opts, 0)
	publish(t, a, change(1, "items", "t"), change(2, "items", "t"))
	// b is behind: 1 and 2 are duplicates; 3 extends the stream exactly
	// where b expected, so it is stored, consistently.
	stored, dups, err := b.Publish(ctx, []feed.Change{change(1, "items", "t"), change(2, "items", "t"), change(3, "items", "t")})
	if !errors.Is(err, ErrFenced) || stored != 1 || dups != 2 {
		t.Fatalf("behind publisher: stored %d, dups %d, err %v; want 1, 2, fenced", stored, dups, err)
	}
	if _, _, err := b.Publish(ctx, []feed.Change{change(4, "items", "t")}); err == nil {
		t.Fatal("Publish after a failure without Resume succeeded")
	}
	last, err := b.Resume(ctx, f.Epoch(), 0, false)
	if err != nil || last != 3 {
		t.Fatalf("Resume = %d, %v; want 3", last, err)
	}
	publish(t, b, change(4, "items", "t"))
	// a, still believing the stream ends at 2, is refused.
	stored, dups, err = a.Publish(ctx, []feed.Change{change(3, "items", "t"), change(5, "items", "t")})
	if !errors.Is(err, ErrFenced) || stored != 0 {
		t.Fatalf("old publisher: stored %d, dups %d, err %v; want fenced", stored, dups, err)
	}
	node := newBus(t, nc, f, opts)
	if _, err := node.AddInterest(ctx, []feed.Topic{{Resource: "items", All: true}}); err != nil {
		t.Fatal(err)
	}
	got := tailN(t, node, 0, 4, 10)
	if ps := positions(got); !slices.Equal(ps, []feed.Position{1, 2, 3, 4}) {
		t.Fatalf("stream holds %v, want [1 2 3 4]", ps)
	}
	if more := tailNone(t, node, 4); len(more) > 0 {
		t.Fatalf("extra messages %v", positions(more))
	}
}

// TestReconnect: a node keeps every change, once and in order, across
// forced reconnects of its NATS connection.
func TestReconnect(t *testing.T) {
	nc := connect(t)
	nodeConn := connect(t)
	f := newFeed()
	opts := testOptions(t, nc)
	ctx := testCtx(t, 30*time.Second)
	pub := publisher(t, nc, f, opts, 0)
	node := newBus(t, nodeConn, f, opts)
	if _, err := node.AddInterest(ctx, []feed.Topic{{Resource: "items", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	const n = 300
	// The publisher is waited for: the node may return the last change
	// before its publish is acknowledged.
	published := make(chan struct{})
	go func() {
		defer close(published)
		for p := feed.Position(1); p <= n; p++ {
			if _, _, err := pub.Publish(ctx, []feed.Change{change(p, "items", "t1")}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var got []feed.Position
	after := feed.Position(0)
	reconnects := 0
	for len(got) < n {
		cs, err := node.Tail(ctx, after, 7)
		if err != nil {
			t.Fatalf("Tail after %d: %v", after, err)
		}
		for _, c := range cs {
			got = append(got, c.Pos)
		}
		after = cs[len(cs)-1].Pos
		if len(got) > reconnects*60+30 && reconnects < 4 {
			reconnects++
			if err := nodeConn.ForceReconnect(); err != nil {
				t.Fatal(err)
			}
		}
	}
	<-published
	for i, p := range got {
		if p != feed.Position(i+1) {
			t.Fatalf("change %d at position %d: lost or repeated (%v)", i, p, got[max(0, i-3):min(len(got), i+3)])
		}
	}
	t.Logf("%d reconnects, stats %+v", reconnects, node.Stats())
}

// TestFastForward: a node with no subscribers that gets its first one
// starts at the stream's end instead of reading what it did not need.
func TestFastForward(t *testing.T) {
	nc := connect(t)
	f := newFeed()
	opts := testOptions(t, nc)
	ctx := testCtx(t, 20*time.Second)
	pub := publisher(t, nc, f, opts, 0)
	node := newBus(t, nc, f, opts)
	// The engine's first Tail, with nobody interested yet.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := node.Tail(cancelled, 0, 100); !errors.Is(err, context.Canceled) {
		t.Fatalf("Tail: %v", err)
	}
	var cs []feed.Change
	for p := feed.Position(1); p <= 50; p++ {
		cs = append(cs, change(p, "items", "t1"))
	}
	publish(t, pub, cs...)
	if _, err := node.AddInterest(ctx, []feed.Topic{{Resource: "items", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, change(51, "items", "t1"))
	got, err := node.Tail(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := positions(got); !slices.Equal(got, []feed.Position{51}) {
		t.Fatalf("got %v, want [51]", got)
	}
	if st := node.Stats(); st.FastForwards != 1 || st.Received != 1 {
		t.Fatalf("stats %+v: want one fast-forward and one message received", st)
	}
}
