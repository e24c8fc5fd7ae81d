package pgfeed_test

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
)

// notSecret is the row filter of TestBacklogSnapshotE2E.
func notSecret(_ authz.Principal, it *tItem) bool { return !strings.HasPrefix(it.Title, "secret") }

// TestBacklogSnapshotE2E: on Postgres, a client resuming behind a backlog
// (written by the app's own SQL) with more changes than its scope has rows
// gets a reset with reason backlog, then the scope's rows. Its copy
// converges: rows deleted, moved out or hidden by the row filter during
// the backlog are gone, and no hidden row reaches it in the snapshot, not
// even by key. It runs on a table never analyzed, whose rows are counted
// to decide, and on one analyzed, whose rows Postgres's statistics
// estimate instead.
func TestBacklogSnapshotE2E(t *testing.T) {
	t.Parallel()
	for _, analyzed := range []bool{false, true} {
		t.Run(map[bool]string{false: "counted", true: "estimated"}[analyzed], func(t *testing.T) {
			t.Parallel()
			testBacklogSnapshotE2E(t, analyzed)
		})
	}
}

func testBacklogSnapshotE2E(t *testing.T, analyzed bool) {
	ctx := testCtx(t)
	pool, name := testenv.PostgresSchema(t)
	if _, err := pool.Exec(ctx, tItemsDDL); err != nil {
		t.Fatal(err)
	}
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	e, err := core.New(core.Config{Feed: f, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	items, err := core.Register(e, core.Resource[tItem]{Name: "items", Table: "e2e_items", Authorize: authz.Allow, Filter: notSecret})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	url := serveEngine(t, e)
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// settle makes Head cover every earlier commit: a write through the
	// feed is covered when it returns, and positions follow commit order.
	settle := func() {
		t.Helper()
		if err := items.Upsert(ctx, tItem{ID: "marker", Tenant: "z"}); err != nil {
			t.Fatal(err)
		}
	}
	catchUp := func(c *tidetest.Conn, id string, start map[string]tItem) (map[string]tItem, []protocol.Entry, protocol.ResetReason, string) {
		t.Helper()
		rows := maps.Clone(start)
		var reason protocol.ResetReason
		var entries []protocol.Entry
		for {
			fr := c.Next()
			switch fr.Type {
			case protocol.FrameReset:
				reason, rows, entries = fr.Reason, map[string]tItem{}, nil
			case protocol.FrameChanges:
				for _, en := range fr.Entries {
					entries = append(entries, en)
					if en.Op == "delete" {
						delete(rows, en.Key)
						continue
					}
					var it tItem
					if err := json.Unmarshal(en.Row, &it); err != nil {
						t.Fatalf("row %s: %v", en.Row, err)
					}
					rows[en.Key] = it
				}
			case protocol.FrameCaughtUp:
				return rows, entries, reason, fr.Cursor
			default:
				t.Fatalf("unexpected frame %+v", fr)
			}
		}
	}
	visible := func() map[string]tItem {
		var s e2eServer
		s.pool = pool
		return s.rows(t, func(it tItem) bool { return it.Tenant == "a" && notSecret(authz.Principal{}, &it) })
	}

	exec(`INSERT INTO e2e_items (id, tenant, grp, title) SELECT 'k' || lpad(i::text, 4, '0'), 'a', i % 3, CASE WHEN i % 10 = 0 THEN 'secret' ELSE 'v0' END FROM generate_series(1, 300) i`)
	settle()
	if analyzed {
		exec(`ANALYZE e2e_items`)
	}
	c := tidetest.Dial(t, url)
	c.Hello(protocol.ClientFrame{})
	conds := map[string]any{"tenant": "a"}
	c.Subscribe("s", "items", conds)
	copy0, _, reason, cursor := catchUp(c, "s", map[string]tItem{})
	if reason != "" || !maps.Equal(copy0, visible()) {
		t.Fatalf("first snapshot: %d rows, reset %q", len(copy0), reason)
	}
	c.Close()

	// The backlog: 40 rewrites of every row (12,000 changes for 300 rows),
	// then deletes, moves out, rows hidden and shown by the filter.
	for range 40 {
		exec(`UPDATE e2e_items SET n = n + 1 WHERE tenant = 'a'`)
	}
	exec(`DELETE FROM e2e_items WHERE id IN ('k0001', 'k0002', 'k0100')`)
	exec(`UPDATE e2e_items SET tenant = 'b' WHERE id IN ('k0003', 'k0004')`)
	exec(`UPDATE e2e_items SET title = 'secret now' WHERE id IN ('k0005', 'k0006')`)
	exec(`UPDATE e2e_items SET title = 'shown' WHERE id = 'k0010'`)
	settle()

	c = tidetest.Dial(t, url)
	c.Hello(protocol.ClientFrame{})
	c.SubscribeFrom("s", "items", conds, cursor)
	got, entries, reason, _ := catchUp(c, "s", copy0)
	if reason != protocol.ResetBacklog {
		t.Fatalf("reset %q, want %q", reason, protocol.ResetBacklog)
	}
	want := visible()
	if !maps.Equal(got, want) {
		t.Fatalf("after the backlog: %d rows, want %d", len(got), len(want))
	}
	for _, en := range entries {
		var it tItem
		if en.Op != "upsert" || json.Unmarshal(en.Row, &it) != nil || it.Tenant != "a" || !notSecret(authz.Principal{}, &it) {
			t.Fatalf("the snapshot sent %+v", en)
		}
	}
	for _, k := range []string{"k0001", "k0002", "k0100", "k0003", "k0004", "k0005", "k0006", "k0020"} {
		if _, ok := got[k]; ok {
			t.Fatalf("%s survived the reset", k)
		}
	}
	if got["k0010"].Title != "shown" || got["k0011"].N != 40 {
		t.Fatalf("k0010 %+v, k0011 %+v", got["k0010"], got["k0011"])
	}
	if st := e.Stats(); st.BacklogSnapshots != 1 {
		t.Fatalf("backlog snapshots %d, want 1", st.BacklogSnapshots)
	}
}
