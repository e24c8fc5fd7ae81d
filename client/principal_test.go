package client

// A store belongs to one principal: a Client whose welcome names another
// principal than the store's stops before it subscribes anything or sends
// its queue.

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

func TestStoreOfAnotherPrincipalIsNotUsed(t *testing.T) {
	ctx := testCtx(t)
	var mu sync.Mutex
	var subscribers, mutators []string // principals, in order
	policy := func(_ context.Context, r authz.Request) error {
		mu.Lock()
		defer mu.Unlock()
		subscribers = append(subscribers, r.Principal.ID)
		return nil
	}
	srv := newRealServerWith(t, core.Config{}, policy, middleware.WithPrincipal(headerPrincipal))
	err := core.AddMutator(srv.todos, "add", core.Mutator[addArgs]{
		Authorize: func(context.Context, authz.Principal, addArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			mu.Lock()
			mutators = append(mutators, tx.Principal().ID)
			mu.Unlock()
			return srv.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p1", Title: a.Title})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1", Title: "u1's"})
	path := filepath.Join(t.TempDir(), "store.json")
	as := func(user string) *Client {
		store, err := NewFileStore(path)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := newTestClient(t, Config{URL: srv.url, Store: store, Header: http.Header{"X-User": {user}}})
		return c
	}

	// u1 syncs a scope: the store is bound to u1.
	c1 := as("u1")
	sub, err := c1.Sync(p1)
	if err != nil {
		t.Fatal(err)
	}
	h1 := start(t, c1)
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_ = h1.stop(t)
	// u1 queues a mutation while offline.
	c1b := as("u1")
	if _, err := c1b.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: addArgs{ID: "m1", Title: "by u1"}}); err != nil {
		t.Fatal(err)
	}

	// u2 on u1's store: Run stops at welcome.
	c2 := as("u2")
	if n := len(c2.Pending()); n != 1 {
		t.Fatalf("restored %d mutations, want 1", n)
	}
	err = start(t, c2).result(ctx, t)
	if !errors.Is(err, ErrOtherPrincipal) {
		t.Fatalf("Run on another principal's store = %v, want ErrOtherPrincipal", err)
	}
	mu.Lock()
	if slices.Contains(subscribers, "u2") || len(mutators) != 0 {
		t.Errorf("u2's connection subscribed %v and ran mutations for %v; want nothing", subscribers, mutators)
	}
	mu.Unlock()

	// u1 again: the queue is sent under u1.
	c3 := as("u1")
	pending := c3.Pending()
	if len(pending) != 1 {
		t.Fatalf("restored %d mutations, want 1", len(pending))
	}
	start(t, c3)
	if _, err := pending[0].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !slices.Equal(mutators, []string{"u1"}) {
		t.Errorf("the queued mutation ran for %v, want u1", mutators)
	}
	mu.Unlock()
}
