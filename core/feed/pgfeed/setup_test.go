package pgfeed_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// logBuffer collects log lines, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveEngine serves e on loopback and returns its WebSocket URL.
func serveEngine(t *testing.T, e *core.Engine) string {
	t.Helper()
	srv := httptest.NewServer(middleware.Middleware(e)(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		srv.Close()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"
}

// lateNotesFeed returns a feed on a schema of the test's own, with the
// tables e2e_items and late_notes and nothing migrated.
func lateNotesFeed(t *testing.T) *pgfeed.Feed {
	t.Helper()
	pool, name := testenv.PostgresSchema(t)
	if _, err := pool.Exec(testCtx(t), tItemsDDL+"; CREATE TABLE late_notes (id text PRIMARY KEY, title text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

type lateNote struct {
	ID    string `tide:"id,pk"`
	Title string `tide:"title"`
}

// TestLateRegistration: a resource registered after Migrate is refused at
// subscribe with not_captured (no snapshot that no live change would
// follow), its writes through tide are refused, and the server log says
// what to call; after Migrate with every schema it syncs, live.
func TestLateRegistration(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := lateNotesFeed(t)
	var logs logBuffer
	e, err := core.New(core.Config{Feed: f, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[tItem]{Name: "items", Table: "e2e_items", Authorize: authz.Allow}); err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	notes, err := core.Register(e, core.Resource[lateNote]{Table: "late_notes", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	url := serveEngine(t, e)

	c := tidetest.Dial(t, url)
	c.Hello(protocol.ClientFrame{})
	c.Subscribe("n", "late_notes", nil)
	fr := c.ExpectErrorFor("n", protocol.CodeNotCaptured)
	if !strings.Contains(fr.Message, "late_notes") {
		t.Errorf("error frame %+v does not name the resource", fr)
	}
	if l := logs.String(); !strings.Contains(l, "not_captured") || !strings.Contains(l, "Migrate(ctx, engine.Schemas()...)") {
		t.Errorf("the server log does not say what to call:\n%s", l)
	}
	// The resource registered before Migrate is served.
	c.Subscribe("i", "items", nil)
	c.Expect(protocol.FrameCaughtUp)

	// A write through tide is refused rather than written uncaptured.
	if err := notes.Upsert(ctx, lateNote{ID: "a", Title: "lost?"}); !errors.Is(err, feed.ErrNotCaptured) {
		t.Fatalf("Upsert of an uncaptured resource: %v, want ErrNotCaptured", err)
	}

	// Migrate with every schema: the resource syncs, live.
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	c.Subscribe("n2", "late_notes", nil)
	c.Expect(protocol.FrameCaughtUp)
	if err := notes.Upsert(ctx, lateNote{ID: "a", Title: "live"}); err != nil {
		t.Fatal(err)
	}
	if fr := c.Expect(protocol.FrameChanges); fr.ID != "n2" || len(fr.Entries) != 1 {
		t.Fatalf("live change: %+v", fr)
	}
}

// TestMissingMigrate: with a feed whose Migrate never ran, a subscriber gets
// not_migrated instead of waiting, Ready names the cause, tide's own writes
// are refused, and the rows the app wrote meanwhile reach subscribers once
// Migrate runs (in their snapshot).
func TestMissingMigrate(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx := testCtx(t)
	if _, err := pool.Exec(ctx, tItemsDDL); err != nil {
		t.Fatal(err)
	}
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var logs logBuffer
	e, err := core.New(core.Config{Feed: f, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	items, err := core.Register(e, core.Resource[tItem]{Name: "items", Table: "e2e_items", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	url := serveEngine(t, e)

	c := tidetest.Dial(t, url)
	c.Hello(protocol.ClientFrame{})
	c.Subscribe("i", "items", nil)
	fr := c.ExpectErrorFor("i", protocol.CodeNotMigrated)
	if !strings.Contains(fr.Message, "migration") {
		t.Errorf("error frame %+v does not say what is missing", fr)
	}
	err = e.Ready()
	if !errors.Is(err, feed.ErrNotInstalled) || !strings.Contains(err.Error(), "not ready: the change feed is not installed") || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Ready: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "feed.Migrate(ctx, engine.Schemas()...)") {
		t.Errorf("the server log does not say what to call:\n%s", l)
	}
	if err := items.Upsert(ctx, tItem{ID: "x", Tenant: "t", Title: "through tide"}); !errors.Is(err, feed.ErrNotInstalled) {
		t.Fatalf("Upsert before Migrate: %v, want ErrNotInstalled", err)
	}
	// The app's own SQL is not captured (there is no trigger yet), but
	// its rows are in the table, so the snapshot after Migrate has them.
	if _, err := pool.Exec(ctx, "INSERT INTO e2e_items (id, tenant, grp, title) VALUES ('y', 't', 1, 'app sql')"); err != nil {
		t.Fatal(err)
	}

	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	// A server started after Migrate serves the rows written before it.
	e2, err := core.New(core.Config{Feed: f, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e2, core.Resource[tItem]{Name: "items", Table: "e2e_items", Authorize: authz.Allow}); err != nil {
		t.Fatal(err)
	}
	c2 := tidetest.Dial(t, serveEngine(t, e2))
	c2.Hello(protocol.ClientFrame{})
	c2.Subscribe("i", "items", nil)
	if fr := c2.Expect(protocol.FrameChanges); len(fr.Entries) != 1 || !strings.Contains(string(fr.Entries[0].Row), "app sql") {
		t.Fatalf("snapshot after Migrate: %+v", fr)
	}
	c2.Expect(protocol.FrameCaughtUp)
	if err := e2.Ready(); err != nil {
		t.Fatalf("Ready after Migrate: %v", err)
	}
}
