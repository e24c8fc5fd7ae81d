package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
)

// TestShareCoalesces (the snapshot path's exact sharing): callers asking for the same read while it runs get its
// result without reading again; a different key reads on its own; the
// leader's read is not cancelled by a waiter giving up.
func TestShareCoalesces(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	var m map[snapshotKey]*flight[[]feed.Change]
	key := snapshotKey{scope: "todos?project_id=p7", after: "k", hasAfter: true, limit: 100}
	release := make(chan struct{})
	reads := 0
	read := func(ctx context.Context) ([]feed.Change, error) {
		reads++
		<-release
		return []feed.Change{{Pos: 11}, {Pos: 12}}, nil
	}
	const joiners = 50
	var wg sync.WaitGroup
	results := make(chan int, joiners+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, led, err := share(context.Background(), e, &m, key, read)
		if err != nil || !led {
			t.Errorf("leader: led=%v err=%v", led, err)
		}
		results <- len(got)
	}()
	waitFor(t, func() bool { e.cache.mu.Lock(); defer e.cache.mu.Unlock(); return m[key] != nil })
	for i := 0; i < joiners; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, led, err := share(context.Background(), e, &m, key, read)
			if err != nil || led {
				t.Errorf("joiner: led=%v err=%v", led, err)
			}
			results <- len(got)
		}()
	}
	// A joiner that gives up does not disturb the others.
	quit, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := share(quit, e, &m, key, read); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled joiner got %v", err)
	}
	waitFor(t, func() bool { e.cache.mu.Lock(); defer e.cache.mu.Unlock(); return m[key].waiters == joiners+1 })
	close(release)
	wg.Wait()
	close(results)
	for n := range results {
		if n != 2 {
			t.Fatalf("a caller got %d changes", n)
		}
	}
	if reads != 1 {
		t.Fatalf("%d reads for %d callers", reads, joiners+1)
	}
	// Once done, the next caller reads again.
	if _, led, _ := share(context.Background(), e, &m, key, func(context.Context) ([]feed.Change, error) { return nil, nil }); !led {
		t.Fatal("a finished read was reused")
	}
}

// waitFor spins until cond holds; the deadline only bounds a broken test.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		runtime.Gosched()
	}
}

// gatedFeed is a memfeed whose Replay blocks until released and counts its
// calls.
type gatedFeed struct {
	*memfeed.Feed
	gate  chan struct{}
	mu    sync.Mutex
	calls int
}

func (g *gatedFeed) Replay(ctx context.Context, q feed.ReplayQuery) ([]feed.Change, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	<-g.gate
	return g.Feed.Replay(ctx, q)
}

// TestReplayJoinsReadInProgress: subscriptions whose cursor lies inside a
// replay read in progress share it, each taking its own rows; one whose
// high-water lies beyond continues with its own read from where it ended.
func TestReplayJoinsReadInProgress(t *testing.T) {
	g := &gatedFeed{Feed: memfeed.New(memfeed.Options{}), gate: make(chan struct{})}
	e, err := New(Config{Feed: g})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	type row struct {
		ID    string `tide:"id,pk"`
		Scope string `tide:"scope,scope"`
	}
	tbl, err := Register(e, Resource[row]{Table: "rows"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		if err := tbl.Upsert(ctx, row{ID: fmt.Sprint(i), Scope: "s"}); err != nil {
			t.Fatal(err)
		}
	}
	sc := feed.NewScope(tbl.Schema(), nil)
	type req struct{ after, until feed.Position }
	leader := req{0, 20}
	joiners := []req{{0, 20}, {5, 20}, {10, 15}, {19, 25}}
	results := make([]replaySlice, len(joiners)+1)
	var wg sync.WaitGroup
	run := func(i int, r req) {
		defer wg.Done()
		sl, err := e.sharedReplay(ctx, feed.ReplayQuery{Scope: sc, After: r.after, Until: r.until, Limit: 100})
		if err != nil {
			t.Error(err)
		}
		results[i] = sl
	}
	wg.Add(1)
	go run(0, leader)
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.calls == 1 })
	for i, r := range joiners {
		wg.Add(1)
		go run(i+1, r)
	}
	waitFor(t, func() bool {
		e.cache.mu.Lock()
		defer e.cache.mu.Unlock()
		fs := e.cache.replays[replayKey{sc.Key(), 100}]
		return len(fs) == 1 && fs[0].waiters == len(joiners)
	})
	close(g.gate)
	wg.Wait()
	if g.calls != 1 {
		t.Fatalf("%d feed reads for %d callers", g.calls, len(joiners)+1)
	}
	for i, r := range append([]req{leader}, joiners...) {
		sl := results[i]
		want := min(r.until, 20) - r.after
		if feed.Position(len(sl.changes)) != want {
			t.Errorf("caller %v got %d changes, want %d", r, len(sl.changes), want)
		}
		for _, c := range sl.changes {
			if c.Pos <= r.after || c.Pos > r.until {
				t.Errorf("caller %v got position %d", r, c.Pos)
			}
		}
		if wantDone := r.until <= 20; sl.done != wantDone || (!sl.done && sl.next != 20) {
			t.Errorf("caller %v: done=%v next=%d", r, sl.done, sl.next)
		}
	}
}
