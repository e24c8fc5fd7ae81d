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
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
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
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "docs", "types.md"))
	if err != nil {
		t.Fatal(err)
	}
	var regions []string
	rest := string(src)
	for {
		i := strings.Index(rest, "// types.md begins\n")
		if i < 0 {
			break
		}
		indent := rest[strings.LastIndex(rest[:i], "\n")+1 : i]
		rest = rest[i+len("// types.md begins\n"):]
		j := strings.Index(rest, indent+"// types.md ends")
		if j < 0 {
			t.Fatal("a region does not end")
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(rest[:j], "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(l, indent))
		}
		regions = append(regions, strings.Join(lines, "\n"))
		rest = rest[j:]
	}
	var blocks []string
	rest = string(doc)
	for {
		i := strings.Index(rest, "```go\n")
		if i < 0 {
			break
		}
		rest = rest[i+len("```go\n"):]
		j := strings.Index(rest, "```")
		if j < 0 {
			t.Fatal("a go block of types.md does not end")
		}
		blocks = append(blocks, strings.TrimSuffix(rest[:j], "\n"))
		rest = rest[j+3:]
	}
	if len(blocks) < 4 {
		t.Fatalf("%d go blocks in types.md", len(blocks))
	}
	for _, b := range blocks {
		if !slices.Contains(regions, b) {
			t.Errorf("this go block of docs/types.md is not compiled by %s:\n%s", filepath.Base(file), b)
		}
	}
	for _, r := range regions {
		if !slices.Contains(blocks, r) {
			t.Errorf("this region of %s is not a go block of docs/types.md:\n%s", filepath.Base(file), r)
		}
	}
}
