package client

// Presentable errors: a rejection's Message is the server's short message,
// fit to show a person; Detail is for developers; Error() is the code and
// the message.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

type renameArgs struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

func TestRejectionIsPresentable(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{})
	err := core.AddMutator(srv.todos, "rename", core.Mutator[renameArgs]{
		Authorize: func(context.Context, authz.Principal, renameArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a renameArgs) error {
			if n := len(a.Title); n < 1 || n > 200 {
				return fmt.Errorf("%w: title must be 1-200 characters (got %d)", core.ErrInvalidArgs, n)
			}
			return srv.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p1", Title: a.Title})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, events := newTestClient(t, Config{URL: srv.url})
	start(t, c)

	m, err := c.Mutate(ctx, Mutation{Resource: "todos", Name: "rename", Args: renameArgs{ID: "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Wait(ctx)
	re := wantRefused(t, err, protocol.CodeInvalidArgs)
	if re.Message != "title must be 1-200 characters (got 0)" {
		t.Errorf("Message = %q, want the mutator's own words", re.Message)
	}
	if got, want := re.Error(), "tide: invalid_args: title must be 1-200 characters (got 0)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !strings.Contains(re.Detail, "title must be 1-200 characters") {
		t.Errorf("Detail = %q, want the whole error", re.Detail)
	}
	es := events.waitKind(ctx, t, EventMutationRejected, 1)
	if e := es[0]; e.Key != m.Key() || e.Message != re.Message || e.Detail != re.Detail {
		t.Errorf("event %v, want the rejection's message and detail", e)
	}

	// Arguments of the wrong type: no Go in what a person reads.
	m, err = c.Mutate(ctx, Mutation{Resource: "todos", Name: "rename", Args: map[string]any{"id": 5, "title": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Wait(ctx)
	re = wantRefused(t, err, protocol.CodeInvalidArgs)
	for _, goWord := range []string{"Go ", "struct", "unmarshal", "renameArgs", "tide:", m.Key()} {
		if strings.Contains(re.Message, goWord) || strings.Contains(strings.TrimPrefix(re.Error(), "tide: "), goWord) {
			t.Errorf("the rejection %q (message %q) shows %q", re.Error(), re.Message, goWord)
		}
	}
	if re.Message == "" {
		t.Error("no message")
	}
}
