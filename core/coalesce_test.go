package core

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// TestShareCoalesces: callers asking for the same read while it runs get its
// result without reading again; a different key reads on its own; the
// leader's read is not cancelled by a waiter giving up.
func TestShareCoalesces(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	var m map[replayKey]*flight[[]feed.Change]
	key := replayKey{scope: "todos?project_id=p7", after: 10, until: 20, limit: 100}
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
	waitFor(t, func() bool { e.coalesce.mu.Lock(); defer e.coalesce.mu.Unlock(); return m[key] != nil })
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
	waitFor(t, func() bool { e.coalesce.mu.Lock(); defer e.coalesce.mu.Unlock(); return m[key].waiters == joiners+1 })
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
