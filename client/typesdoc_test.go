package client_test

// The Go examples of docs/types.md, compiled: every ```go block of the
// page is one of the regions below (between "types.md begins" and
// "types.md ends", one tab in), and every region is a block of the page.
// TestTypesDocExamples checks both; the compiler checks the code, and the
// test runs it.

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/docsample"
)

// The app's declarations, as the page shows them.
type (
	Card struct {
		ID      string `tide:"id,pk"`
		BoardID string `tide:"board_id,scope"`
		Title   string `tide:"title"`
	}
	AddCard struct {
		BoardID string `json:"board_id"`
		Title   string `json:"title"`
	}
)

// types.md begins
// Package shared: what the server and its Go clients both import.
var (
	Cards       = protocol.NewResourceRef[Card]("cards")
	AddCardMut  = protocol.NewMutatorRef[Card, AddCard](Cards, "add")
	policyCards = authz.Allow // the app's policy
)

// types.md ends

// types.md begins
// register declares the app's resources, mutators and channels.
func register(e *core.Engine) error {
	cards, err := core.RegisterRef(e, Cards, core.Resource[Card]{Table: "cards", Authorize: policyCards})
	if err != nil {
		return err
	}
	return core.AddMutatorRef(cards, AddCardMut, core.Mutator[AddCard]{
		Authorize: func(context.Context, authz.Principal, AddCard) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a AddCard) error {
			return cards.UpsertTx(ctx, tx, Card{ID: a.Title, BoardID: a.BoardID, Title: a.Title})
		},
	})
}

// types.md ends

// writeTypes is the generating program's body.
func writeTypes(w io.Writer) error {
	// types.md begins
	ctx := context.Background()
	td, err := tide.Open(ctx, nil, tide.Config{Engine: core.Config{Logger: slog.New(slog.DiscardHandler)}}, register)
	if err != nil {
		return err
	}
	defer td.Close(ctx)
	return td.Engine.TypeScript(w, "go generate ./web")
	// types.md ends
}

func docGoClient(ctx context.Context, c *client.Client) error {
	// types.md begins
	scope, err := client.ScopeOf(Cards, map[string]any{"board_id": "b1"})
	if err != nil {
		return err // a condition on a column that is not a scope column of Card
	}
	sub, err := c.Sync(scope)
	if err != nil {
		return err
	}
	if _, err := client.MutateRef(ctx, c, AddCardMut, AddCard{BoardID: "b1", Title: "hello"}, client.Mutation{}); err != nil {
		return err
	}
	cards, err := client.RowsOf(sub, Cards) // map[string]Card
	// types.md ends
	_ = cards
	return err
}

func TestTypesDocExamples(t *testing.T) {
	var b strings.Builder
	if err := writeTypes(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "cards: {") || !strings.Contains(b.String(), "add: {") {
		t.Fatalf("the page's generator wrote:\n%s", b.String())
	}
	_ = docGoClient
	docsample.Same(t, "types.md", 4)
}
