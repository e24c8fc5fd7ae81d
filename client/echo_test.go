package client

// Own writes converge: a Handler's scope skips only the echo of a row its
// own mutation's ack delivered; rows a mutator wrote with plain SQL, and a
// row the mutation moved out of the scope, reach it.

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
)

type idArgs struct {
	ID string `json:"id"`
}

func TestOwnWritesReachAHandlersScope(t *testing.T) {
	ctx := testCtx(t)
	srv := newPGServer(t, core.Config{}, authz.Allow)
	allow := func(context.Context, authz.Principal, idArgs) error { return nil }
	mutators := map[string]func(ctx context.Context, tx *core.Tx, a idArgs) error{
		// Plain SQL: the ack carries nothing of it.
		"sqlput": func(ctx context.Context, tx *core.Tx, a idArgs) error {
			_, err := pgfeed.TxOf(tx.Feed()).Exec(ctx, "INSERT INTO todos (id, project_id, title) VALUES ($1, 'p1', 'by sql')", a.ID)
			return err
		},
		// The row leaves p1 for p2: the ack carries its new row, p1 a delete.
		"move": func(ctx context.Context, tx *core.Tx, a idArgs) error {
			return srv.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p2", Title: "moved"})
		},
		// A typed write: the ack carries the row, its echo is skipped.
		"put": func(ctx context.Context, tx *core.Tx, a idArgs) error {
			return srv.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p1", Title: "put"})
		},
	}
	for name, run := range mutators {
		if err := core.AddMutator(srv.todos, name, core.Mutator[idArgs]{Authorize: allow, Run: run}); err != nil {
			t.Fatal(err)
		}
	}
	srv.upsert(t, ctx, todo{ID: "m1", ProjectID: "p1", Title: "here"})
	c, _ := newTestClient(t, Config{URL: srv.url})
	rec := newRecorder()
	// The put's echo after its ack (below): the hook runs where batches
	// and acks are handled, one at a time, so a Done handle there means
	// the ack came first.
	var put atomic.Pointer[PendingMutation]
	var echoed atomic.Bool
	rec.hook = func(b Batch) error {
		if m := put.Load(); m != nil && hasKey([]Batch{b}, "x1") {
			select {
			case <-m.Done():
				echoed.Store(true)
			default:
			}
		}
		return nil
	}
	sub, err := c.Subscribe(p1, rec)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	expectRows(ctx, t, &rec.mirror, map[string]todo{"m1": {ID: "m1", ProjectID: "p1", Title: "here"}})
	mutate := func(name, id string) Result {
		t.Helper()
		m, err := c.Mutate(ctx, Mutation{Resource: "todos", Name: name, Args: idArgs{ID: id}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Wait(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}

	if res := mutate("sqlput", "s1"); len(res.Entries) != 0 {
		t.Fatalf("the ack of a plain SQL write carries %v", res.Entries)
	}
	mutate("move", "m1")
	expectRows(ctx, t, &rec.mirror, map[string]todo{"s1": {ID: "s1", ProjectID: "p1", Title: "by sql"}})
	for _, b := range rec.all() {
		for _, e := range b.Entries {
			if (e.Key == "s1" || e.Key == "m1" && e.Op == "delete") && e.Origin != c.Origin() {
				t.Errorf("entry %s %s has origin %q, want the client's", e.Op, e.Key, e.Origin)
			}
		}
	}

	// The echo of a row the ack delivered is skipped once the ack is in
	// (an echo pushed before the ack arrives is delivered: the app does not
	// hold the row yet).
	m, err := c.Mutate(ctx, Mutation{Resource: "todos", Name: "put", Args: idArgs{ID: "x1"}})
	if err != nil {
		t.Fatal(err)
	}
	put.Store(m)
	if res, err := m.Wait(ctx); err != nil || len(res.Entries) != 1 || res.Entries[0].Key != "x1" {
		t.Fatalf("the ack of put: %+v, %v", res, err)
	}
	srv.upsert(t, ctx, todo{ID: "z1", ProjectID: "p1", Title: "theirs"}) // a later write of another origin
	rec.wait(ctx, t, "z1", func(bs []Batch) bool { return hasKey(bs, "z1") })
	if echoed.Load() {
		t.Error("the echo of a row the ack delivered reached the handler after the ack")
	}
}
