package core_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// secretFilter hides the todos whose title starts with "secret".
func secretFilter(_ authz.Principal, t *todo) bool { return !strings.HasPrefix(t.Title, "secret") }

// newFilteredServer is newServer with secretFilter on todos.
func newFilteredServer(t *testing.T, cfg core.Config) *server {
	t.Helper()
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: projectPolicy, Filter: secretFilter})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	return &server{e: e, todos: todos, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
}

// copyOf applies a catch-up's frames to a client's copy of a scope as a
// client does: a reset empties it, upserts and deletes apply in order. It
// reads up to caught-up and returns the copy, whether a reset came (and
// its reason) and the caught-up cursor.
func copyOf(t *testing.T, s *server, c *wsClient, id string, start map[string]todo) (map[string]todo, protocol.ResetReason, string) {
	t.Helper()
	rows := maps.Clone(start)
	if rows == nil {
		rows = map[string]todo{}
	}
	var reason protocol.ResetReason
	for {
		f := c.Next()
		if f.ID != id {
			t.Fatalf("frame for %q, want %q: %+v", f.ID, id, f)
		}
		switch f.Type {
		case protocol.FrameReset:
			reason, rows = f.Reason, map[string]todo{}
		case protocol.FrameChanges:
			for _, en := range f.Entries {
				if en.Op == "delete" {
					delete(rows, en.Key)
					continue
				}
				td, err := s.todos.Decode(en.Row)
				if err != nil {
					t.Fatalf("row %s: %v", en.Row, err)
				}
				rows[en.Key] = td
			}
		case protocol.FrameCaughtUp:
			return rows, reason, f.Cursor
		default:
			t.Fatalf("unexpected %+v", f)
		}
	}
}

// visibleRows is the database's copy of project p as secretFilter lets a
// member see it.
func visibleRows(t *testing.T, s *server, p string) map[string]todo {
	t.Helper()
	all, err := s.todos.Rows(context.Background(), project(p))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]todo{}
	for _, td := range all {
		if secretFilter(authz.Principal{}, &td) {
			out[td.ID] = td
		}
	}
	return out
}

// TestBacklogLargerThanScopeIsASnapshot: a client resuming behind a
// backlog that holds more changes than its scope has rows gets a reset
// (reason backlog) and the scope's rows instead of the changes. Its copy
// converges (rows deleted or moved out meanwhile are gone, rows hidden by
// the row filter meanwhile too), no hidden row reaches it, not even by
// key, and the resumed subscription stays live. A smaller backlog, and a
// large one of a scope more than twice as large, are replayed.
func TestBacklogLargerThanScopeIsASnapshot(t *testing.T) {
	s := newFilteredServer(t, core.Config{})
	ctx := context.Background()
	const n = 200
	var rows []todo
	for i := range n {
		title := "v0"
		if i%10 == 0 {
			title = "secret v0"
		}
		rows = append(rows, todo{ID: fmt.Sprintf("t%03d", i), ProjectID: "p7", Title: title})
	}
	if err := s.todos.Upsert(ctx, rows...); err != nil {
		t.Fatal(err)
	}
	c := s.dial(t, "u1", "p7")
	c.hello()
	c.Subscribe("s", "todos", project("p7"))
	copy0, reason, cursor := copyOf(t, s, c, "s", nil)
	if reason != "" || len(copy0) != n-n/10 {
		t.Fatalf("snapshot: %d rows, reset %q", len(copy0), reason)
	}
	c.Close()

	// A small backlog is replayed.
	if err := s.todos.Upsert(ctx, todo{ID: "t001", ProjectID: "p7", Title: "v1"}); err != nil {
		t.Fatal(err)
	}
	c = s.dial(t, "u1", "p7")
	c.hello()
	c.SubscribeFrom("s", "todos", project("p7"), cursor)
	got, reason, cursor := copyOf(t, s, c, "s", copy0)
	if reason != "" || got["t001"].Title != "v1" {
		t.Fatalf("small backlog: reset %q, t001 %+v", reason, got["t001"])
	}
	copy1 := got
	c.Close()

	// The backlog: every row rewritten many times (more changes than
	// rows), rows deleted, moved to another project, hidden by the filter
	// and shown by it; rows of another project in between.
	for round := range 60 {
		batch := rows[:0:0]
		for i := range n {
			title := fmt.Sprintf("v%d", round+2)
			if i%10 == 0 {
				title = "secret " + title
			}
			batch = append(batch, todo{ID: fmt.Sprintf("t%03d", i), ProjectID: "p7", Title: title}, todo{ID: fmt.Sprintf("o%03d", i), ProjectID: "p8", Title: "other"})
		}
		if err := s.todos.Upsert(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	var gone, moved, hidden []todo
	for i := 1; i < n; i += 7 {
		switch i % 3 {
		case 0:
			gone = append(gone, todo{ID: fmt.Sprintf("t%03d", i)})
		case 1:
			moved = append(moved, todo{ID: fmt.Sprintf("t%03d", i), ProjectID: "p8", Title: "moved"})
		case 2:
			hidden = append(hidden, todo{ID: fmt.Sprintf("t%03d", i), ProjectID: "p7", Title: "secret now"})
		}
	}
	shown := todo{ID: "t000", ProjectID: "p7", Title: "shown now"}
	if err := s.todos.Delete(ctx, gone...); err != nil {
		t.Fatal(err)
	}
	if err := s.todos.Upsert(ctx, append(append(moved, hidden...), shown)...); err != nil {
		t.Fatal(err)
	}
	resets := s.e.Stats().Resets

	c = s.dial(t, "u1", "p7")
	c.hello()
	c.SubscribeFrom("s", "todos", project("p7"), cursor)
	f := c.Next()
	if f.Type != protocol.FrameReset || f.ID != "s" || f.Reason != protocol.ResetBacklog {
		t.Fatalf("first frame %+v, want reset backlog", f)
	}
	var seen []protocol.Entry
	for {
		f := c.Next()
		if f.Type == protocol.FrameCaughtUp {
			break
		}
		if f.Type != protocol.FrameChanges {
			t.Fatalf("unexpected %+v", f)
		}
		seen = append(seen, f.Entries...)
	}
	got = map[string]todo{}
	for _, en := range seen {
		td, err := s.todos.Decode(en.Row)
		if en.Op != "upsert" || err != nil {
			t.Fatalf("a snapshot of unchanged rows has only upserts, got %+v", en)
		}
		if !secretFilter(authz.Principal{}, &td) || td.ProjectID != "p7" {
			t.Fatalf("leak: %+v", td)
		}
		got[en.Key] = td
	}
	want := visibleRows(t, s, "p7")
	if !maps.Equal(got, want) {
		t.Fatalf("after the backlog snapshot: %d rows, want %d (copy before: %d)", len(got), len(want), len(copy1))
	}
	for _, td := range append(append(gone, moved...), hidden...) {
		if _, ok := got[td.ID]; ok {
			t.Fatalf("%s survived the reset", td.ID)
		}
	}
	if got[shown.ID] != shown {
		t.Fatalf("%s = %+v, want %+v", shown.ID, got[shown.ID], shown)
	}
	if st := s.e.Stats(); st.Resets != resets+1 || st.BacklogSnapshots != 1 {
		t.Fatalf("resets %d → %d, backlog snapshots %d", resets, st.Resets, st.BacklogSnapshots)
	}
	// Live after the snapshot.
	if err := s.todos.Upsert(ctx, todo{ID: "live", ProjectID: "p7", Title: "x"}); err != nil {
		t.Fatal(err)
	}
	if f := c.Expect(protocol.FrameChanges); len(f.Entries) != 1 || f.Entries[0].Key != "live" {
		t.Fatalf("live: %+v", f)
	}

	// A large backlog of a scope with more than twice as many rows as
	// changes is replayed: p8 holds 200 rows rewritten 60 times, the moved
	// ones and 12,000 more, and only the 12,000 changes after p8's own
	// cursor count.
	var base []todo
	for i := range 12_000 {
		base = append(base, todo{ID: fmt.Sprintf("b%05d", i), ProjectID: "p8", Title: "old"})
	}
	if err := s.todos.Upsert(ctx, base...); err != nil {
		t.Fatal(err)
	}
	c8 := s.dial(t, "u1", "p8")
	c8.hello()
	c8.Subscribe("s8", "todos", project("p8"))
	copy8, _, cursor8 := copyOf(t, s, c8, "s8", nil)
	c8.Close()
	var many []todo
	for i := range 12_000 {
		many = append(many, todo{ID: fmt.Sprintf("m%05d", i), ProjectID: "p8", Title: "new"})
	}
	if err := s.todos.Upsert(ctx, many...); err != nil {
		t.Fatal(err)
	}
	c8 = s.dial(t, "u1", "p8")
	c8.hello()
	c8.SubscribeFrom("s8", "todos", project("p8"), cursor8)
	got8, reason, _ := copyOf(t, s, c8, "s8", copy8)
	if reason != "" || !maps.Equal(got8, visibleRows(t, s, "p8")) {
		t.Fatalf("a backlog of new rows: reset %q, %d rows", reason, len(got8))
	}
}
