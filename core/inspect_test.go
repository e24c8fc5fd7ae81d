package core_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

type note struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
	Secret    bool   `tide:"secret"`
}

type inspectServer struct {
	e      *core.Engine
	notes  *core.Table[note]
	url    string
	refuse atomic.Bool // the policy refuses everyone while set
}

// newInspectServer serves "notes" (project policy, plus a switch that
// refuses everyone; a row filter hiding secret rows) and "tasks" (same
// policy) on loopback.
func newInspectServer(t *testing.T, cfg core.Config) *inspectServer {
	t.Helper()
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &inspectServer{e: e}
	policy := func(ctx context.Context, r authz.Request) error {
		if s.refuse.Load() {
			return fmt.Errorf("%w: access withdrawn", authz.ErrForbidden)
		}
		return projectPolicy(ctx, r)
	}
	s.notes, err = core.Register(e, core.Resource[note]{Table: "notes", Authorize: policy,
		Filter: func(_ authz.Principal, n *note) bool { return !n.Secret }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[note]{Table: "tasks", Authorize: policy}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	s.url = "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
	return s
}

func inspect(t *testing.T, e *core.Engine, q core.InspectQuery) core.InspectReport {
	t.Helper()
	rep, err := e.Inspect(context.Background(), q)
	if err != nil {
		t.Fatalf("inspect %+v: %v", q, err)
	}
	return rep
}

// onlySub returns the report's one subscription.
func onlySub(t *testing.T, rep core.InspectReport) core.InspectSubscription {
	t.Helper()
	if len(rep.Connections) != 1 || len(rep.Connections[0].Subscriptions) != 1 {
		t.Fatalf("want one connection with one subscription: %+v", rep)
	}
	return rep.Connections[0].Subscriptions[0]
}

// TestInspectVerdicts: each verdict the inspector can give a caught-up
// subscription, from the row's place, the row filter and the policy now.
func TestInspectVerdicts(t *testing.T) {
	s := newInspectServer(t, core.Config{})
	ctx := context.Background()
	c := dialAt(t, s.url, "u", "p7")
	c.hello()
	c.Subscribe("s", "notes", project("p7"))
	c.collect("s")

	if err := s.notes.Upsert(ctx, note{ID: "n1", ProjectID: "p7", Title: "open"}); err != nil {
		t.Fatal(err)
	}
	if f := c.expect(protocol.FrameChanges); len(f.Entries) != 1 || f.Entries[0].Key != "n1" {
		t.Fatalf("want n1: %+v", f)
	}
	if err := s.notes.Upsert(ctx,
		note{ID: "n2", ProjectID: "p7", Title: "hidden", Secret: true},
		note{ID: "n3", ProjectID: "p8", Title: "elsewhere"}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		q       core.InspectQuery
		refuse  bool
		verdict string
		reason  string // a part of the subscription's reason
	}{
		{"delivered", core.InspectQuery{Principal: "u", Resource: "notes", Key: "n1"}, false, core.VerdictDelivered, "at or below"},
		{"delivered for its origin", core.InspectQuery{Principal: "u", Origin: "me", Resource: "notes", Key: "n1"}, false, core.VerdictDelivered, ""},
		{"filtered", core.InspectQuery{Principal: "u", Resource: "notes", Key: "n2"}, false, core.VerdictFiltered, "row filter"},
		{"out of scope", core.InspectQuery{Principal: "u", Resource: "notes", Key: "n3"}, false, core.VerdictOutOfScope, "project_id = p8"},
		{"no such row", core.InspectQuery{Principal: "u", Resource: "notes", Key: "n9"}, false, core.VerdictOutOfScope, "not found"},
		{"refused now", core.InspectQuery{Principal: "u", Resource: "notes", Key: "n1"}, true, core.VerdictRefused, "access withdrawn"},
		{"not subscribed", core.InspectQuery{Principal: "u", Resource: "tasks", Key: "n1"}, false, core.VerdictNotSubscribed, ""},
		{"not connected", core.InspectQuery{Principal: "v", Resource: "notes", Key: "n1"}, false, core.VerdictNotConnected, ""},
		{"not connected from that origin", core.InspectQuery{Principal: "u", Origin: "other", Resource: "notes", Key: "n1"}, false, core.VerdictNotConnected, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.refuse.Store(tc.refuse)
			defer s.refuse.Store(false)
			rep := inspect(t, s.e, tc.q)
			if rep.Verdict != tc.verdict {
				t.Fatalf("verdict %q, want %q: %+v", rep.Verdict, tc.verdict, rep)
			}
			if rep.Node == "" || rep.Node != s.e.Node() {
				t.Fatalf("node %q, want %q", rep.Node, s.e.Node())
			}
			if tc.reason == "" {
				return
			}
			sub := onlySub(t, rep)
			if !strings.Contains(sub.Reason, tc.reason) {
				t.Fatalf("reason %q, want it to mention %q", sub.Reason, tc.reason)
			}
			if sub.Scope != "notes where project_id = p7" || sub.State != "live" {
				t.Fatalf("scope %q state %q", sub.Scope, sub.State)
			}
		})
	}
	if _, err := s.e.Inspect(ctx, core.InspectQuery{Principal: "u", Resource: "nope", Key: "n1"}); !errors.Is(err, core.ErrInspectUnknownResource) {
		t.Fatalf("unknown resource: %v", err)
	}
}

// TestInspectPendingAndDesynced: a client that stops reading has the
// rows written meanwhile pending in its send queue, then, once the queue
// is full, its subscription desynced; when it reads again the replay
// from its delivered cursor brings it back and the last row is delivered.
func TestInspectPendingAndDesynced(t *testing.T) {
	s := newInspectServer(t, core.Config{SendBuffer: 64 << 10, MaxDrops: 1 << 20, WriteTimeout: time.Minute})
	ctx := context.Background()
	c := dialAt(t, s.url, "u", "p7")
	c.hello()
	c.Subscribe("s", "notes", project("p7"))
	c.collect("s")

	// The client reads nothing from here on.
	title := strings.Repeat("x", 2000)
	const maxRows = 20000 // 40 MB: well beyond loopback socket buffers
	sawPending, sawDesynced := false, false
	var last string
	for i := 0; i < maxRows && !sawDesynced; i++ {
		last = fmt.Sprintf("n%05d", i)
		if err := s.notes.Upsert(ctx, note{ID: last, ProjectID: "p7", Title: title}); err != nil {
			t.Fatal(err)
		}
		q := core.InspectQuery{Principal: "u", Resource: "notes", Key: last}
		// Wait for the fan-out to take the change: queued, handed to the
		// socket, or dropped.
		var sub core.InspectSubscription
		for spins := 0; ; spins++ {
			rep := inspect(t, s.e, q)
			sub = onlySub(t, rep)
			if rep.LastChange == nil {
				t.Fatalf("memfeed did not tell the last change: %+v", rep)
			}
			if sub.Delivered >= *rep.LastChange || sub.State != "live" {
				break
			}
			if spins > 10_000_000 {
				t.Fatalf("the fan-out never took %s: %+v", last, sub)
			}
			runtime.Gosched()
		}
		switch sub.Verdict {
		case core.VerdictPending:
			if sub.Queued == 0 {
				t.Fatalf("pending without a queued entry: %+v", sub)
			}
			sawPending = true
		case core.VerdictDesynced:
			if sub.Desyncs == 0 {
				t.Fatalf("desynced without a desync counted: %+v", sub)
			}
			sawDesynced = true
		case core.VerdictDelivered:
		default:
			t.Fatalf("row %s: unexpected verdict %+v", last, sub)
		}
	}
	if !sawPending || !sawDesynced {
		t.Fatalf("after %s: pending seen %v, desynced seen %v", last, sawPending, sawDesynced)
	}

	// The client reads again: the queue drains, the replay follows.
	for {
		f := c.Next()
		if f.Type == protocol.FrameCaughtUp {
			break
		}
	}
	sub := onlySub(t, inspect(t, s.e, core.InspectQuery{Principal: "u", Resource: "notes", Key: last}))
	if sub.Verdict != core.VerdictDelivered || sub.Resyncs == 0 || sub.State != "live" {
		t.Fatalf("after the resync: %+v", sub)
	}
}

// TestInspectPostgresLastChange: on the Postgres feed the inspector finds
// the row by reading the subscription's scope, then its last change's
// position through the change log's scope index: it equals the delivered
// cursor once the client has the change, and the row is out of scope once
// it moved to another project.
func TestInspectPostgresLastChange(t *testing.T) {
	pool, name := testenv.PostgresSchema(t)
	ctx := context.Background()
	for _, tbl := range []string{"notes", "tasks"} {
		if _, err := pool.Exec(ctx, "CREATE TABLE "+tbl+" (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL, secret boolean NOT NULL)"); err != nil {
			t.Fatal(err)
		}
	}
	f := newPgFeed(t, pool, name, pgfeed.Options{})
	s := newInspectServer(t, core.Config{Feed: f})
	if err := f.Migrate(ctx, s.e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	c := dialAt(t, s.url, "u", "p7")
	c.hello()
	c.Subscribe("s", "notes", project("p7"))
	c.collect("s")

	q := core.InspectQuery{Principal: "u", Resource: "notes", Key: "n1"}
	var firstPos uint64
	for i, title := range []string{"one", "two"} {
		if err := s.notes.Upsert(ctx, note{ID: "n1", ProjectID: "p7", Title: title}); err != nil {
			t.Fatal(err)
		}
		if f := c.expect(protocol.FrameChanges); len(f.Entries) != 1 || f.Entries[0].Key != "n1" {
			t.Fatalf("want n1: %+v", f)
		}
		rep := inspect(t, s.e, q)
		sub := onlySub(t, rep)
		if rep.Row != "found" || rep.LastChange == nil || rep.LastChangeOp != "upsert" || *rep.LastChange != sub.Delivered || sub.Verdict != core.VerdictDelivered {
			t.Fatalf("write %d: %+v", i, rep)
		}
		if i == 1 && *rep.LastChange <= firstPos {
			t.Fatalf("the second write's position %d is not after the first's %d", *rep.LastChange, firstPos)
		}
		firstPos = *rep.LastChange
	}
	if err := s.notes.Upsert(ctx, note{ID: "n1", ProjectID: "p8", Title: "moved"}); err != nil {
		t.Fatal(err)
	}
	if f := c.expect(protocol.FrameChanges); len(f.Entries) != 1 || f.Entries[0].Op != "delete" {
		t.Fatalf("want the delete of n1: %+v", f)
	}
	if sub := onlySub(t, inspect(t, s.e, q)); sub.Verdict != core.VerdictOutOfScope {
		t.Fatalf("after the move: %+v", sub)
	}
}
