package tide_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

type note struct {
	ID      string `tide:"id,pk"`
	Project string `tide:"project,scope"`
	Text    string `tide:"text"`
}

type putNote struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// TestOpenInMemory: Open without a pool serves the in-memory app end to
// end: a client subscribes, a mutation it sends is acknowledged and
// arrives on its subscription, and a write the app makes while serving a
// request carries the request's client origin.
func TestOpenInMemory(t *testing.T) {
	ctx := context.Background()
	allow := func(context.Context, authz.Request) error { return nil }
	var notes *core.Table[note]
	app, err := tide.Open(ctx, nil, tide.Config{}, func(e *core.Engine) (err error) {
		if notes, err = core.Register(e, core.Resource[note]{Table: "notes", Authorize: allow}); err != nil {
			return err
		}
		return core.AddMutator(notes, "put", core.Mutator[putNote]{
			Authorize: func(context.Context, authz.Principal, putNote) error { return nil },
			Run: func(ctx context.Context, tx *core.Tx, a putNote) error {
				return notes.UpsertTx(ctx, tx, note{ID: a.ID, Project: "p1", Text: a.Text})
			},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	if app.Feed != nil {
		t.Errorf("Feed = %v, want nil in memory", app.Feed)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := notes.Upsert(r.Context(), note{ID: r.PathValue("id"), Project: "p1", Text: "from the app"}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	user := func(*http.Request) (authz.Principal, error) { return authz.Principal{ID: "u1"}, nil }
	srv := httptest.NewServer(middleware.Middleware(app.Engine, middleware.WithPrincipal(user))(mux))
	defer srv.Close()

	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws")
	c.Hello(protocol.ClientFrame{Origin: "device-1"})
	c.Subscribe("s", "notes", map[string]any{"project": "p1"})
	c.Expect(protocol.FrameCaughtUp)
	rec := httptest.NewRecorder()
	app.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("readiness: %d %s", rec.Code, rec.Body)
	}

	c.Send(protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameMutate, Resource: "notes", Name: "put",
		Key: "k1", Seq: 1, At: time.Now().UnixMilli(), Args: json.RawMessage(`{"id":"n1","text":"hello"}`)})
	var acked, changed bool
	for !acked || !changed {
		switch f := c.Next(); f.Type {
		case protocol.FrameAck:
			acked = true
		case protocol.FrameChanges:
			if len(f.Entries) != 1 || f.Entries[0].Key != "n1" || f.Entries[0].Origin != "device-1" {
				t.Fatalf("the mutation's change: %+v", f)
			}
			changed = true
		default:
			t.Fatalf("unexpected %s frame: %+v", f.Type, f)
		}
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/notes/n2", nil)
	req.Header.Set(middleware.ClientOriginHeader, "device-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("app write: %d", resp.StatusCode)
	}
	f := c.Expect(protocol.FrameChanges)
	if len(f.Entries) != 1 || f.Entries[0].Key != "n2" || f.Entries[0].Origin != "device-1" {
		t.Fatalf("the app's write: %+v", f)
	}
	c.Close()
}

// TestOpenRefusesAFeed: Open chooses the feed, and says so when the
// configuration names one.
func TestOpenRefusesAFeed(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	_, err = tide.Open(context.Background(), nil, tide.Config{Engine: core.Config{Feed: e.Feed()}}, func(*core.Engine) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "Open chooses the feed") {
		t.Errorf("Open with Engine.Feed set: %v", err)
	}
	_, err = tide.Open(context.Background(), nil, tide.Config{}, nil)
	if err == nil {
		t.Error("Open with a nil register succeeded")
	}
	boom := errors.New("boom")
	_, err = tide.Open(context.Background(), nil, tide.Config{}, func(*core.Engine) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("Open with a failing register: %v", err)
	}
}

// TestExamplesStartWithOpen: every example sets tide up with tide.Open,
// none by hand with the pieces Open puts together. The framework examples
// start through examples/internal/taskapp; each example's own test runs
// it (in memory).
func TestExamplesStartWithOpen(t *testing.T) {
	pieces := []string{"core.New(", "pgfeed.New(", ".Migrate(", ".StartSequencer(", ".StartPruner(", ".Start()"}
	opens := map[string]bool{}
	err := filepath.WalkDir("examples", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, p := range pieces {
			if strings.Contains(string(src), p) {
				t.Errorf("%s calls %s: set tide up with tide.Open", path, p)
			}
		}
		if strings.Contains(string(src), "tide.Open(") {
			opens[filepath.ToSlash(path)] = true
		}
		if strings.Contains(string(src), "taskapp.Main(") { // Main runs taskapp.Run, which runs openStore
			opens[filepath.ToSlash(filepath.Dir(path))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"examples/todo/main.go", "examples/internal/taskapp/store.go",
		"examples/chi", "examples/echo", "examples/gin", "examples/nethttp"} {
		if !opens[want] {
			t.Errorf("%s does not start through tide.Open (or taskapp.Main)", want)
		}
	}
}
