package pgfeed_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// Todo is the README's resource.
type Todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
	Done      bool   `tide:"done"`
}

// fatalLog stands in for package log in the quick start, failing the test
// instead of exiting.
type fatalLog struct{ t *testing.T }

func (l fatalLog) Fatal(v ...any) { l.t.Helper(); l.t.Fatal(v...) }

// TestQuickStart runs the README's Postgres quick start, verbatim (the
// test checks that the README shows the code between the markers below),
// against the test database: a client subscribes, a write made in a
// handler's transaction reaches it live, tagged with the request's origin.
func TestQuickStart(t *testing.T) {
	// The quick start reads DATABASE_URL and keeps tide's tables in the
	// default schema: point it at a database of this test's own.
	dbURL := testenv.PostgresDatabase(t)
	ctx := testCtx(t)
	pool0, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool0.Close()
	if _, err := pool0.Exec(ctx, "CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL, done boolean NOT NULL DEFAULT false)"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", dbURL)

	log := fatalLog{t}
	mux := http.NewServeMux()
	currentUser := func(*http.Request) (authz.Principal, error) { return authz.Principal{ID: "u1"}, nil }
	r := httptest.NewRequest(http.MethodPost, "/api/todos", nil)
	r = r.WithContext(core.WithOrigin(ctx, "device-1"))
	{
		// quick start begins
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
		// quick start ends
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close) // after the deferred app.Close
		srv := httptest.NewServer(handler)
		defer srv.Close()
		c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws")
		c.Hello(protocol.ClientFrame{Origin: "device-1"}) // the request's device: its writes' entries name it
		c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
		c.Expect(protocol.FrameCaughtUp)
		if _, err := tx.Exec(ctx, "INSERT INTO todos (id, project_id, title) VALUES ('t1', 'p7', 'ship it')"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		fr := c.Expect(protocol.FrameChanges)
		if len(fr.Entries) != 1 || fr.Entries[0].Key != "t1" || fr.Entries[0].Origin != "device-1" {
			t.Fatalf("live change: %+v", fr)
		}
		rec := httptest.NewRecorder()
		app.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != 200 {
			t.Errorf("readiness: %d %s", rec.Code, rec.Body)
		}
	}

	// The README shows exactly the code between the markers.
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(filepath.Dir(file), "../../../README.md"))
	if err != nil {
		t.Fatal(err)
	}
	between := func(s, begin, end string) string {
		i := strings.Index(s, begin)
		if i < 0 {
			t.Fatalf("no %q", begin)
		}
		rest := s[i+len(begin):]
		j := strings.Index(rest, end)
		if j < 0 {
			t.Fatalf("no %q after %q", end, begin)
		}
		return rest[:j]
	}
	code := between(string(src), "// quick start begins\n", "\t\t// quick start ends")
	var want []string
	for _, l := range strings.Split(strings.TrimRight(code, "\n"), "\n") {
		want = append(want, strings.TrimPrefix(l, "\t\t"))
	}
	block := between(string(readme), "<!-- the Postgres quick start: core/feed/pgfeed/quickstart_test.go runs it -->\n```go\n", "```")
	got := strings.Split(strings.TrimRight(block, "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the README's Postgres quick start is not the code this test runs:\nREADME:\n%s\ntest:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(got) > 12 {
		t.Errorf("the Postgres quick start has %d lines, more than 12", len(got))
	}
}
