package tide_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

// This file holds every ```go block of README.md, in order, each between
// "// README begins" and "// README ends" inside a function of its own,
// indented by one tab: the README's code is compiled (and vetted) with the
// tests, and TestReadmeGoBlocks checks that the README shows exactly that
// code. The harness around a block is what the README leaves to the
// reader: the function's parameters are the names a block uses without
// declaring them (ctx, currentUser, the app's own types below), and the
// lines after "README ends" use what a block declares but does not use.
// None of these functions runs.

// The README's blocks, compiled and never run.
var _ = []any{readmeQuickStart, readmeGoClient, readmeSeveralResources, readmeMutators,
	readmeChannels, readmePostgres, readmeDependsOn, readmeTidetest}

// The app's own types and policies the README's blocks name.
type (
	Todo struct {
		ID        string `tide:"id,pk"`
		ProjectID string `tide:"project_id,scope"`
		Title     string `tide:"title"`
		Done      bool   `tide:"done"`
	}
	PutArgs struct {
		ID        string `json:"id"`
		ProjectID string `json:"project_id"`
		Title     string `json:"title"`
	}
	CursorMove struct {
		X, Y int
	}
)

func mayWrite(context.Context, authz.Principal, PutArgs) error { return nil }
func isMember(context.Context, authz.Request) error            { return nil }

func readmeQuickStart(ctx context.Context, currentUser middleware.PrincipalFunc) {
	// README begins
	type Todo struct {
		ID        string `tide:"id,pk"`
		ProjectID string `tide:"project_id,scope"`
		Title     string `tide:"title"`
		Done      bool   `tide:"done"`
	}

	var todos *core.Table[Todo]
	app, err := tide.Open(ctx, nil, tide.Config{}, func(e *core.Engine) (err error) { // nil pool: in memory
		todos, err = core.Register(e, core.Resource[Todo]{
			Table:     "todos",
			Authorize: authz.Authenticated, // deny by default: every resource needs a policy
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(context.Background())
	mux := http.NewServeMux() // your app
	handler := middleware.Middleware(app.Engine, middleware.WithPrincipal(currentUser))(mux)
	_ = todos.Upsert(ctx, Todo{ID: "t1", ProjectID: "p7", Title: "ship it"})
	http.ListenAndServe(":8080", handler) // clients connect to ws://host/tide/ws
	// README ends
}

func readmeGoClient(ctx context.Context) {
	// README begins
	store, _ := client.NewFileStore("todos.json")
	c, _ := client.New(client.Config{URL: "ws://localhost:8080/tide/ws", Store: store})
	sub, _ := c.Sync(client.Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p7"}})
	go c.Run(ctx)
	rows := sub.Rows() // the client keeps the scope's rows, persisted with their cursor
	// README ends
	_ = rows
}

func readmeSeveralResources(ctx context.Context, c *client.Client) {
	// README begins
	project, _ := c.Sync(client.Scope{Resources: []string{"todos", "comments", "attachments"},
		Conditions: map[string]any{"project_id": "p7"}})
	comments := project.RowsOf("comments")
	followed, _ := c.Followed(ctx) // what a restart resumes; c.Forget(ctx, scope) drops one
	// README ends
	_, _ = comments, followed
}

func readmeMutators(ctx context.Context, todos *core.Table[Todo], c *client.Client, a PutArgs) {
	// README begins
	core.AddMutator(todos, "put", core.Mutator[PutArgs]{
		Authorize: mayWrite, // deny by default
		Run: func(ctx context.Context, tx *core.Tx, a PutArgs) error {
			return todos.UpsertTx(ctx, tx, Todo{ID: a.ID, ProjectID: a.ProjectID, Title: a.Title})
		},
	})
	// in the Go client: shown at once, queued while offline, rebased on the server's answer
	c.Mutate(ctx, client.Mutation{Resource: "todos", Name: "put", Args: a,
		Local: func(tx *client.LocalTx) error { return tx.Upsert("todos", a.ID, a) }})
	// README ends
}

func readmeChannels(engine *core.Engine) {
	// README begins
	core.RegisterChannel(engine, core.Channel[CursorMove]{
		Pattern:   "board:{board_id}",
		Subscribe: authz.RequireClaim("board_id", "boards"), // deny by default
		Publish:   authz.RequireClaim("board_id", "boards"), // deny by default
		Presence:  true,
	})
	// README ends
}

func readmePostgres(ctx context.Context, currentUser middleware.PrincipalFunc, mux *http.ServeMux, r *http.Request) {
	// README begins
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	app, err := tide.Open(ctx, pool, tide.Config{}, func(e *core.Engine) error {
		_, err := core.Register(e, core.Resource[Todo]{Table: "todos", Authorize: authz.Authenticated})
		return err
	}) // registers, checks each declaration against its table, migrates, starts retention
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(context.Background()) // the engine first, then the feed
	handler := middleware.Middleware(app.Engine, middleware.WithPrincipal(currentUser))(mux)
	// in a handler: a transaction whose writes carry the request's origin
	tx, err := tide.Begin(r.Context(), pool)
	// README ends
	_, _, _ = handler, tx, err
}

func readmeDependsOn(e *core.Engine) {
	// README begins
	// memberships (user_id, project_id, role), PRIMARY KEY (user_id, project_id)
	type Membership struct {
		UserID    string `tide:"user_id,pk"` // a composite key: each part tagged pk, in order
		ProjectID string `tide:"project_id,pk,scope"`
		Role      string `tide:"role"`
	}
	core.Register(e, core.Resource[Membership]{Table: "memberships"}) // synced, not subscribable
	core.Register(e, core.Resource[Todo]{
		Table:     "todos",
		Authorize: isMember, // reads memberships
		DependsOn: []core.Dependency{{Resource: "memberships", Principal: "user_id",
			Scope: map[string]string{"project_id": "project_id"}}}, // re-check only that user's todos of that project
	})
	// README ends
}

func readmeTidetest(t *testing.T, wsURL string) {
	// README begins
	c := tidetest.Dial(t, wsURL, tidetest.WithHeader("Cookie", "session=alice"))
	c.Hello(protocol.ClientFrame{})
	c.Subscribe("theirs", "todos", map[string]any{"project_id": "p9"})
	c.ExpectErrorFor("theirs", protocol.CodeForbidden)
	// README ends
}

// TestReadmeGoBlocks: every ```go block of README.md is, in order, the
// code of one region of this file, so each compiles with the current API.
func TestReadmeGoBlocks(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for rest := string(readme); ; {
		_, after, ok := strings.Cut(rest, "\n```go\n")
		if !ok {
			break
		}
		block, after, ok := strings.Cut(after, "\n```")
		if !ok {
			t.Fatal("README.md: a ```go block does not end")
		}
		blocks, rest = append(blocks, block), after
	}
	var regions []string
	for rest := string(src); ; {
		_, after, ok := strings.Cut(rest, "\t// README begins\n")
		if !ok {
			break
		}
		region, after, ok := strings.Cut(after, "\t// README ends\n")
		if !ok {
			t.Fatal("readme_test.go: a region does not end")
		}
		lines := strings.Split(strings.TrimSuffix(region, "\n"), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimPrefix(l, "\t")
		}
		regions, rest = append(regions, strings.Join(lines, "\n")), after
	}
	if len(regions) < 8 {
		t.Fatalf("found %d regions in readme_test.go: the markers are not found", len(regions))
	}
	for i := range max(len(blocks), len(regions)) {
		switch {
		case i >= len(blocks):
			t.Errorf("readme_test.go region %d is not in README.md:\n%s", i+1, regions[i])
		case i >= len(regions):
			t.Errorf("README.md go block %d has no region in readme_test.go (add it there, inside a function):\n%s", i+1, blocks[i])
		case blocks[i] != regions[i]:
			t.Errorf("README.md go block %d differs from readme_test.go region %d:\nREADME:\n%s\nreadme_test.go:\n%s", i+1, i+1, blocks[i], regions[i])
		}
	}
}
