package pgfeed_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// TestRetentionResetOverWebSocket: a device goes offline with a stored
// cursor; while it is away its scope changes (updates, deletes, moves out
// and in) and the change log is pruned past its cursor. When it comes back
// with the same cursor and copy, the server sends reset (cursor_expired)
// and a snapshot, and the copy converges to the table.
func TestRetentionResetOverWebSocket(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	// ReplayCache 1: the engine's memory of recent changes would otherwise
	// serve this client without touching the pruned log (correctly, but
	// this test is about the log's retention).
	srv := newE2EServer(t, pool, name, pgfeed.Options{}, core.Config{PageSize: 7, ReplayCache: 1})
	ctx := testCtx(t)
	var rows []tItem
	for i := range 30 {
		rows = append(rows, tItem{ID: fmt.Sprintf("k%02d", i), Tenant: []string{"t1", "t2"}[i%2], Grp: int64(i % 3), Title: "v1"})
	}
	// Written through core.Table: the Postgres feed's Writer.
	if err := srv.items.Upsert(ctx, rows...); err != nil {
		t.Fatal(err)
	}

	store := client.NewMemoryStore()
	var mu sync.Mutex
	var resets []string
	onEvent := func(e client.Event) {
		if e.Kind == client.EventReset {
			mu.Lock()
			resets = append(resets, e.Reason)
			mu.Unlock()
		}
	}
	spec := scopeTenant("t1")
	sub := newSubscriber(t, srv.url, "device", spec, store, onEvent)
	sub.subscribe(t)
	runCtx, stop := context.WithCancel(ctx)
	sub.run(runCtx)
	h, err := srv.feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.chk.waitCaughtUp(ctx, h); err != nil {
		t.Fatal(err)
	}
	if d := sub.chk.diff(srv.rows(t, spec.match)); d != "" {
		t.Fatalf("before going offline: %s", d)
	}
	stop()
	<-sub.done

	// Offline: the scope changes in every way, then the log is pruned.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"UPDATE e2e_items SET title = 'v2' WHERE id IN ('k00', 'k02')",
		"DELETE FROM e2e_items WHERE id IN ('k04', 'k05')",
		"UPDATE e2e_items SET tenant = 't2' WHERE id = 'k06'", // out of the scope
		"UPDATE e2e_items SET tenant = 't1' WHERE id = 'k07'", // into it
		"INSERT INTO e2e_items (id, tenant, grp, title) VALUES ('new', 't1', 1, 'new')",
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	h, err = srv.feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if floor, err := srv.feed.PruneThrough(ctx, h); err != nil || floor != h {
		t.Fatalf("PruneThrough(%d) = %d, %v", h, floor, err)
	}

	// Back online with the stored cursor and the old copy.
	back := newSubscriber(t, srv.url, "device", spec, store, onEvent)
	back.chk = sub.chk
	back.chk.mark()
	back.subscribe(t)
	runCtx, stop = context.WithCancel(ctx)
	defer func() { stop(); <-back.done }()
	back.run(runCtx)
	if err := back.chk.waitCaughtUp(ctx, h); err != nil {
		t.Fatal(err)
	}
	if d := back.chk.diff(srv.rows(t, spec.match)); d != "" {
		t.Fatalf("after the reset: %s", d)
	}
	back.chk.mu.Lock()
	if len(back.chk.violations) > 0 {
		t.Errorf("violations: %q", back.chk.violations)
	}
	back.chk.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if len(resets) != 1 || resets[0] != "cursor_expired" {
		t.Fatalf("reset events %q, want one cursor_expired", resets)
	}
}
