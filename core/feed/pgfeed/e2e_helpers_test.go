package pgfeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// tItem is the synced resource of the end-to-end tests.
type tItem struct {
	ID     string `tide:"id,pk" json:"id"`
	Tenant string `tide:"tenant,scope" json:"tenant"`
	Grp    int64  `tide:"grp,scope" json:"grp"`
	Title  string `tide:"title" json:"title"`
	N      int64  `tide:"n" json:"n"`
}

const tItemsDDL = `CREATE TABLE e2e_items (id text PRIMARY KEY, tenant text NOT NULL, grp bigint NOT NULL, title text NOT NULL, n bigint NOT NULL DEFAULT 0)`

// e2eServer is an engine on the Postgres feed, served over a real WebSocket
// on loopback by the net/http middleware.
type e2eServer struct {
	pool   *pgxpool.Pool
	feed   *pgfeed.Feed
	engine *core.Engine
	items  *core.Table[tItem]
	url    string
}

func newE2EServer(t testing.TB, pool *pgxpool.Pool, name string, opts pgfeed.Options, cfg core.Config) *e2eServer {
	t.Helper()
	if _, err := pool.Exec(testCtx(t), tItemsDDL); err != nil {
		t.Fatal(err)
	}
	return newE2ENode(t, pool, name, opts, cfg)
}

// newE2ENode is newE2EServer over an existing e2e_items table: another app
// node on the same database and tide schema.
func newE2ENode(t testing.TB, pool *pgxpool.Pool, name string, opts pgfeed.Options, cfg core.Config) *e2eServer {
	t.Helper()
	ctx := testCtx(t)
	if opts.Schema == "" {
		opts.Schema = name + "_tide"
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	f, err := pgfeed.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Feed = f
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	items, err := core.Register(e, core.Resource[tItem]{Name: "items", Table: "e2e_items", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e)(http.NotFoundHandler()))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Shutdown(sctx); err != nil {
			t.Errorf("engine Shutdown: %v", err)
		}
		srv.Close()
		f.Close()
	})
	return &e2eServer{pool: pool, feed: f, engine: e, items: items, url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"}
}

// rows returns the table's rows that match, by key.
func (s *e2eServer) rows(t testing.TB, match func(tItem) bool) map[string]tItem {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), "SELECT id, tenant, grp, title, n FROM e2e_items")
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tItem])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]tItem{}
	for _, it := range all {
		if match(it) {
			out[it.ID] = it
		}
	}
	return out
}

// scopeSpec is a scope and the predicate it stands for.
type scopeSpec struct {
	scope client.Scope
	match func(tItem) bool
}

func scopeTenant(ts ...string) scopeSpec {
	var cond any = ts[0]
	if len(ts) > 1 {
		cond = map[string]any{"in": ts}
	}
	return scopeSpec{client.Scope{Resource: "items", Conditions: map[string]any{"tenant": cond}},
		func(it tItem) bool { return contains(ts, it.Tenant) }}
}

func scopeGrp(g int64) scopeSpec {
	return scopeSpec{client.Scope{Resource: "items", Conditions: map[string]any{"grp": g}},
		func(it tItem) bool { return it.Grp == g }}
}

func scopeTenantGrp(tenant string, g int64) scopeSpec {
	return scopeSpec{client.Scope{Resource: "items", Conditions: map[string]any{"tenant": tenant, "grp": g}},
		func(it tItem) bool { return it.Tenant == tenant && it.Grp == g }}
}

func scopeAll() scopeSpec {
	return scopeSpec{client.Scope{Resource: "items"}, func(tItem) bool { return true }}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checker is a subscriber's Handler: it keeps the copy of its scope and
// records every violation of the invariants it can see from the client
// side: a cursor going backwards, a change applied twice (a batch with
// entries whose position is not past the last applied one), a row outside
// the scope, an undecodable row.
type checker struct {
	name string
	spec scopeSpec

	mu         sync.Mutex
	rows       map[string]tItem
	last       feed.Position // position of the last applied change cursor
	caught     feed.Position // largest caught-up position since the last mark
	changed    chan struct{} // closed and replaced after every apply
	violations []string
	batches    int
	entries    int
	resets     int
}

func newChecker(name string, spec scopeSpec) *checker {
	return &checker{name: name, spec: spec, rows: map[string]tItem{}, changed: make(chan struct{})}
}

func (c *checker) violate(format string, args ...any) {
	if len(c.violations) < 20 {
		c.violations = append(c.violations, c.name+": "+fmt.Sprintf(format, args...))
	}
}

// Apply implements client.Handler.
func (c *checker) Apply(_ context.Context, b client.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		close(c.changed)
		c.changed = make(chan struct{})
	}()
	c.batches++
	if b.Reset {
		clear(c.rows)
		c.last = 0
		c.resets++
	}
	if b.Cursor != "" {
		cur, err := protocol.ParseCursor(b.Cursor)
		if err != nil {
			c.violate("batch cursor %q: %v", b.Cursor, err)
		} else if !cur.Snapshot {
			if feed.Position(cur.Pos) < c.last {
				c.violate("cursor went backwards from %d to %d", c.last, cur.Pos)
			}
			if len(b.Entries) > 0 && feed.Position(cur.Pos) <= c.last {
				c.violate("a batch of %d entries at %d applied again (last applied %d)", len(b.Entries), cur.Pos, c.last)
			}
			c.last = max(c.last, feed.Position(cur.Pos))
			if b.CaughtUp {
				c.caught = max(c.caught, feed.Position(cur.Pos))
			}
		}
	}
	for _, e := range b.Entries {
		c.entries++
		switch e.Op {
		case "upsert":
			var it tItem
			if err := json.Unmarshal(e.Row, &it); err != nil {
				c.violate("row %s: %v", e.Row, err)
				continue
			}
			if it.ID != e.Key || !c.spec.match(it) {
				c.violate("received row %s outside the scope %s (key %q)", e.Row, c.spec.scope, e.Key)
			}
			c.rows[e.Key] = it
		case "delete":
			delete(c.rows, e.Key)
		default:
			c.violate("entry op %q", e.Op)
		}
	}
	return nil
}

// mark forgets the caught-up positions seen so far.
func (c *checker) mark() {
	c.mu.Lock()
	c.caught = 0
	c.mu.Unlock()
}

// waitCaughtUp waits for a caught-up at or past p since the last mark.
func (c *checker) waitCaughtUp(ctx context.Context, p feed.Position) error {
	for {
		c.mu.Lock()
		ok, ch := c.caught >= p, c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: no caught-up at or past %d: %w", c.name, p, ctx.Err())
		}
	}
}

// waitRows waits until ok holds for the copy (checked now and after every
// applied batch).
func (c *checker) waitRows(ctx context.Context, what string, ok func(map[string]tItem) bool) error {
	for {
		c.mu.Lock()
		done, ch := ok(c.rows), c.changed
		c.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: %s: %w", c.name, what, ctx.Err())
		}
	}
}

// diff compares the copy with want and returns what differs, or "".
func (c *checker) diff(want map[string]tItem) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if maps.Equal(c.rows, want) {
		return ""
	}
	var b strings.Builder
	n := 0
	for k, w := range want {
		if g, ok := c.rows[k]; !ok || g != w {
			n++
			if n <= 3 {
				fmt.Fprintf(&b, " %s: have %+v (present %v), want %+v;", k, g, ok, w)
			}
		}
	}
	for k, g := range c.rows {
		if _, ok := want[k]; !ok {
			n++
			if n <= 6 {
				fmt.Fprintf(&b, " %s: have %+v, want none;", k, g)
			}
		}
	}
	return fmt.Sprintf("%d of %d rows differ:%s", n, len(want), b.String())
}

// subscriber is a Go client with one checked scope.
type subscriber struct {
	c    *client.Client
	chk  *checker
	done chan error
}

func newSubscriber(t testing.TB, url, name string, spec scopeSpec, store client.CursorStore, onEvent func(client.Event)) *subscriber {
	t.Helper()
	c, err := client.New(client.Config{URL: url, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Store: store, OnEvent: onEvent})
	if err != nil {
		t.Fatal(err)
	}
	return &subscriber{c: c, chk: newChecker(name, spec), done: make(chan error, 1)}
}

func (s *subscriber) subscribe(t testing.TB) {
	t.Helper()
	if _, err := s.c.Subscribe(s.chk.spec.scope, s.chk); err != nil {
		t.Error(err)
	}
}

func (s *subscriber) run(ctx context.Context) {
	go func() { s.done <- s.c.Run(ctx) }()
}
