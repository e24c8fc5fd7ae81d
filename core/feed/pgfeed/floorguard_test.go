package pgfeed_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// TestPruneNeverPassesTheHead: pruning through a position beyond the head,
// at the head, and while writes commit never places the floor above a
// committed position, and a connected client receives every write made
// after each prune.
func TestPruneNeverPassesTheHead(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	srv := newE2EServer(t, pool, name, pgfeed.Options{}, core.Config{PageSize: 7})
	ctx := testCtx(t)
	n := 0
	write := func(k int) {
		t.Helper()
		var rows []tItem
		for range k {
			rows = append(rows, tItem{ID: fmt.Sprintf("k%03d", n), Tenant: "t1", Grp: int64(n % 3), Title: "v1"})
			n++
		}
		if err := srv.items.Upsert(ctx, rows...); err != nil {
			t.Fatal(err)
		}
	}
	write(10)
	spec := scopeTenant("t1")
	sub := newSubscriber(t, srv.url, "device", spec, nil, nil)
	sub.subscribe(t)
	runCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); <-sub.done }()
	sub.run(runCtx)
	delivered := func(what string) {
		t.Helper()
		h, err := srv.feed.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.chk.waitRows(ctx, what, func(got map[string]tItem) bool { return len(got) == n && sub.chk.last >= h }); err != nil {
			t.Fatal(err)
		}
		if d := sub.chk.diff(srv.rows(t, spec.match)); d != "" {
			t.Fatalf("%s: %s", what, d)
		}
	}
	delivered("before pruning")

	check := func(what string, through feed.Position) {
		t.Helper()
		head, err := srv.feed.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		floor, err := srv.feed.PruneThrough(ctx, through)
		if err != nil {
			t.Fatalf("%s: PruneThrough(%d): %v", what, through, err)
		}
		if floor > head {
			t.Fatalf("%s: PruneThrough(%d) placed the floor at %d, above the head %d", what, through, floor, head)
		}
		if after, err := srv.feed.Head(ctx); err != nil || after != head {
			t.Fatalf("%s: Head after pruning = %d, %v; want %d (no write since)", what, after, err, head)
		}
		write(5)
		delivered(what)
	}
	head, _ := srv.feed.Head(ctx)
	check("beyond the head", head+999_999)
	head, _ = srv.feed.Head(ctx)
	check("at the head", head)

	// Concurrently with writes: every prune asks for far beyond the head.
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wctx, wstop := context.WithCancel(ctx)
	wg.Go(func() {
		for wctx.Err() == nil {
			h, err := srv.feed.Head(ctx)
			if err == nil {
				_, err = srv.feed.PruneThrough(ctx, h+1_000_000)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	})
	for range 20 {
		write(3)
	}
	wstop()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	delivered("pruning while writing")
	if floor, err := srv.feed.Floor(ctx); err != nil {
		t.Fatal(err)
	} else if h, _ := srv.feed.Head(ctx); floor > h {
		t.Fatalf("floor %d above the head %d", floor, h)
	}
}

// TestRepairFloorAboveHead: a floor found above the head (set by hand, or
// by an older version's pruning) is repaired by the check each sequencer
// term starts with: positions continue above the floor, so a connected
// client receives the writes made after it.
func TestRepairFloorAboveHead(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	srv := newE2EServer(t, pool, name, pgfeed.Options{}, core.Config{PageSize: 7})
	ctx := testCtx(t)
	if err := srv.items.Upsert(ctx, tItem{ID: "a", Tenant: "t1", Title: "v1"}); err != nil {
		t.Fatal(err)
	}
	// A consistent floor is left alone.
	if err := srv.feed.CheckFloor(ctx); err != nil {
		t.Fatal(err)
	}
	spec := scopeTenant("t1")
	sub := newSubscriber(t, srv.url, "device", spec, nil, nil)
	sub.subscribe(t)
	runCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); <-sub.done }()
	sub.run(runCtx)
	head, err := srv.feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.chk.waitCaughtUp(ctx, head); err != nil {
		t.Fatal(err)
	}
	far := head + 1000
	if _, err := pool.Exec(ctx, "UPDATE "+srv.feed.MetaTable()+" SET floor = $1", int64(far)); err != nil {
		t.Fatal(err)
	}
	if err := srv.feed.CheckFloor(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.items.Upsert(ctx, tItem{ID: "b", Tenant: "t1", Title: "v1"}); err != nil {
		t.Fatal(err)
	}
	if h, err := srv.feed.Head(ctx); err != nil || h <= far {
		t.Fatalf("Head after a write = %d, %v; want above the floor %d", h, err, far)
	}
	if err := sub.chk.waitRows(ctx, "the write after the repair", func(got map[string]tItem) bool { _, ok := got["b"]; return ok }); err != nil {
		t.Fatal(err)
	}
}
