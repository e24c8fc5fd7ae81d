package client

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// TestColumnHiddenFromClient: a row without a column the principal may not
// see (a column policy on the server) applies and decodes without error,
// the column's field at its zero value; a change of that column alone
// never reaches the client, a later visible change does.
func TestColumnHiddenFromClient(t *testing.T) {
	ctx := testCtx(t)
	e, err := core.New(core.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.Allow,
		ColumnPolicies: map[string]authz.ColumnPolicy[todo]{"title": func(authz.Principal, *todo) bool { return false }}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e)(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		srv.Close()
	})
	if err := todos.Upsert(ctx, todo{ID: "t1", ProjectID: "p1", Title: "secret title", Done: true}); err != nil {
		t.Fatal(err)
	}
	c, _ := newTestClient(t, Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"})
	rec := newRecorder()
	if _, err := c.Subscribe(p1, rec); err != nil {
		t.Fatal(err)
	}
	start(t, c)
	rec.wait(ctx, t, "caught-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })
	expectRows(ctx, t, &rec.mirror, map[string]todo{"t1": {ID: "t1", ProjectID: "p1", Done: true}})

	// The title alone changes, then done: only the second arrives.
	if err := todos.Upsert(ctx, todo{ID: "t1", ProjectID: "p1", Title: "another secret", Done: true}); err != nil {
		t.Fatal(err)
	}
	if err := todos.Upsert(ctx, todo{ID: "t1", ProjectID: "p1", Title: "another secret", Done: false}); err != nil {
		t.Fatal(err)
	}
	expectRows(ctx, t, &rec.mirror, map[string]todo{"t1": {ID: "t1", ProjectID: "p1"}})
	var live int
	for _, b := range rec.all() {
		for _, en := range b.Entries {
			if bytes.Contains(en.Row, []byte("title")) || bytes.Contains(en.Row, []byte("secret")) {
				t.Fatalf("the client received the hidden column: %s", en.Row)
			}
			if _, err := protocol.DecodeRow[todo](en.Row); err != nil {
				t.Fatalf("a row without the column does not decode: %s: %v", en.Row, err)
			}
		}
		if !b.Reset && !b.CaughtUp {
			live += len(b.Entries)
		}
	}
	if live != 1 {
		t.Fatalf("%d live entries, want 1 (the change of the title alone is not sent):\n%s", live, describeBatches(rec.all()))
	}
}
