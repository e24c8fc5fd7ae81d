package client

import (
	"context"
	"errors"
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

// The declarations a server and its Go clients share.
type refRenameArgs struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

var (
	refTodos  = protocol.NewResourceRef[todo]("todos")
	refRename = protocol.NewMutatorRef[todo, refRenameArgs](refTodos, "rename")
)

// TestRefsEndToEnd registers a resource and a mutator from shared
// references, and syncs, mutates and decodes rows through the same
// references in the client.
func TestRefsEndToEnd(t *testing.T) {
	ctx := testCtx(t)
	e, err := core.New(core.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.RegisterRef(e, refTodos, core.Resource[todo]{Table: "todos", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	err = core.AddMutatorRef(todos, refRename, core.Mutator[refRenameArgs]{
		Authorize: func(context.Context, authz.Principal, refRenameArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a refRenameArgs) error {
			return todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p1", Title: a.Title})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e)(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		srv.Close()
	})
	if err := todos.Upsert(ctx, todo{ID: "t1", ProjectID: "p1", Title: "one"}, todo{ID: "t2", ProjectID: "p2", Title: "elsewhere"}); err != nil {
		t.Fatal(err)
	}

	c, _ := newTestClient(t, Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"})
	scope, err := ScopeOf(refTodos, map[string]any{"project_id": "p1"})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Sync(scope)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := MutateRef(ctx, c, refRename, refRenameArgs{ID: "t1", Title: "renamed"}, Mutation{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Settled():
	case <-ctx.Done():
		t.Fatal("the mutation did not settle")
	}
	rows, err := RowsOf(sub, refTodos)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows["t1"] != (todo{ID: "t1", ProjectID: "p1", Title: "renamed"}) {
		t.Fatalf("rows %+v, want t1 renamed only", rows)
	}
}

// TestRefsRefuseMismatches checks the errors of the reference helpers.
func TestRefsRefuseMismatches(t *testing.T) {
	for _, conds := range []map[string]any{{"title": "x"}, {"nope": 1}, {"project_id": 1.5}} {
		if _, err := ScopeOf(refTodos, conds); !errors.Is(err, ErrInvalidScope) {
			t.Errorf("ScopeOf(%v): %v, want ErrInvalidScope", conds, err)
		}
	}
	if _, err := ScopeOf(protocol.NewResourceRef[struct{ X int }]("bad"), nil); !errors.Is(err, ErrInvalidScope) {
		t.Errorf("ScopeOf of a type without a key: %v, want ErrInvalidScope", err)
	}
	e, err := core.New(core.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	if _, err := core.RegisterRef(e, refTodos, core.Resource[todo]{Name: "other", Table: "todos"}); !errors.Is(err, core.ErrInvalidResource) {
		t.Errorf("RegisterRef with another Name: %v, want ErrInvalidResource", err)
	}
	notes, err := core.Register(e, core.Resource[todo]{Name: "notes", Table: "notes"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(context.Context, *core.Tx, refRenameArgs) error { return nil }
	if err := core.AddMutatorRef(notes, refRename, core.Mutator[refRenameArgs]{Run: run}); !errors.Is(err, core.ErrInvalidResource) {
		t.Errorf("AddMutatorRef to another resource: %v, want ErrInvalidResource", err)
	}
}
