package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
)

// TestOfflineQueueAboveFrameBurst: a client whose offline queue holds more
// mutations than the server takes frames at once (its frame burst) sends
// them on connecting, and every one is acknowledged on that very
// connection: none waits, answered by nobody, for a reconnect that a
// healthy connection never brings.
func TestOfflineQueueAboveFrameBurst(t *testing.T) {
	ctx := testCtx(t)
	s := newRealServer(t, core.Config{FrameRate: 50, FrameBurst: 8, MaxSubscriptions: 4})
	err := core.AddMutator(s.todos, "put", core.Mutator[todo]{
		Authorize: func(context.Context, authz.Principal, todo) error { return nil },
		Run:       func(ctx context.Context, tx *core.Tx, a todo) error { return s.todos.UpsertTx(ctx, tx, a) },
	})
	if err != nil {
		t.Fatal(err)
	}
	c, events := newTestClient(t, Config{URL: s.url, MaxBackoff: 50 * time.Millisecond})
	const n = 60 // far above the burst, below 4×burst refused frames
	var pending []*PendingMutation
	for i := range n {
		id := fmt.Sprintf("t%02d", i)
		m, err := c.Mutate(ctx, Mutation{Resource: "todos", Name: "put", Args: todo{ID: id, ProjectID: "p1", Title: id}})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, m)
	}
	start(t, c)
	for _, m := range pending {
		if _, err := m.Wait(ctx); err != nil {
			t.Fatalf("mutation %s: %v", m.Key(), err)
		}
	}
	if got := events.count(EventConnected); got != 1 {
		t.Fatalf("%d connections: the queue drained only by reconnecting", got)
	}
}
