package core_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

// gatedFeed holds every snapshot read until the test lets it go, and
// records how many run at once for each principal (named in the scope's
// project id: "alice-…", "bob-…").
type gatedFeed struct {
	*memfeed.Feed
	gate    map[string]chan struct{} // per principal: one receive lets one snapshot read go
	entered chan string              // the principal of each read that starts

	mu      sync.Mutex
	running map[string]int
	max     map[string]int
}

func (g *gatedFeed) Snapshot(ctx context.Context, q feed.SnapshotQuery) (feed.SnapshotPage, error) {
	who := "other"
	for _, p := range []string{"alice", "bob"} {
		if strings.Contains(q.Scope.Key(), p+"-") {
			who = p
		}
	}
	g.mu.Lock()
	g.running[who]++
	g.max[who] = max(g.max[who], g.running[who])
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running[who]--
		g.mu.Unlock()
	}()
	g.entered <- who
	select {
	case <-g.gate[who]:
	case <-ctx.Done():
		return feed.SnapshotPage{}, ctx.Err()
	}
	return g.Feed.Snapshot(ctx, q)
}

// TestCatchUpsBoundedPerPrincipal: a principal with many subscriptions
// never runs more than MaxCatchUpsPerPrincipal snapshot reads at once, the
// others wait (queued, not refused, counted in Stats), and another
// principal's catch-up runs meanwhile on the node's remaining slots.
func TestCatchUpsBoundedPerPrincipal(t *testing.T) {
	const subs, perPrincipal = 12, 2
	g := &gatedFeed{Feed: memfeed.New(memfeed.Options{}), gate: map[string]chan struct{}{"alice": make(chan struct{}), "bob": make(chan struct{})}, entered: make(chan string, 4*subs),
		running: map[string]int{}, max: map[string]int{}}
	s := newServer(t, core.Config{Feed: g, MaxCatchUps: perPrincipal + 1, MaxCatchUpsPerPrincipal: perPrincipal})
	var aliceProjects []string
	for i := range subs {
		aliceProjects = append(aliceProjects, fmt.Sprintf("alice-%d", i))
	}
	alice := s.dial(t, "alice", aliceProjects...)
	alice.hello()
	for i, p := range aliceProjects {
		alice.Subscribe(fmt.Sprintf("s%d", i), "todos", project(p))
	}
	// Alice takes her two slots, and waits for more.
	for range perPrincipal {
		if who := <-g.entered; who != "alice" {
			t.Fatalf("a read of %s started", who)
		}
	}
	awaitStats(t, s.e, func(st core.Stats) bool { return st.CatchUpsWaiting == subs-perPrincipal })

	// Bob's catch-up gets the node's third slot while alice's wait.
	bob := s.dial(t, "bob", "bob-1")
	bob.hello()
	bob.Subscribe("b", "todos", project("bob-1"))
	if who := <-g.entered; who != "bob" {
		t.Fatalf("a read of %s started before bob's", who)
	}
	g.gate["bob"] <- struct{}{}
	bob.Collect("b")

	// Let alice's reads go one by one; every subscription catches up.
	go func() {
		for range subs {
			g.gate["alice"] <- struct{}{}
		}
	}()
	caught := map[string]bool{}
	for len(caught) < subs {
		caught[alice.Expect(protocol.FrameCaughtUp).ID] = true // in any order
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.max["alice"] != perPrincipal {
		t.Fatalf("alice ran %d snapshot reads at once, want %d", g.max["alice"], perPrincipal)
	}
	if st := s.e.Stats(); st.CatchUpsQueued < subs-perPrincipal || st.CatchUpsWaiting != 0 || st.CatchUpsRunning != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// awaitStats waits until ok holds for the engine's stats: a wait on an
// event the engine reports, bounded only by the test's timeout.
func awaitStats(t *testing.T, e *core.Engine, ok func(core.Stats) bool) {
	t.Helper()
	for !ok(e.Stats()) {
		runtime.Gosched()
	}
}
