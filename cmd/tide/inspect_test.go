package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

// inspectNode serves an in-memory engine whose status page lets in only
// requests with "X-Ops: letmein"; a connection's principal is its X-User
// header, with projects p7 and p8. It returns the status page's URL, the
// websocket URL and the table of todos.
func inspectNode(t *testing.T) (status, ws string, todos *core.Table[todo]) {
	t.Helper()
	return inspectNodeOn(t, core.Config{})
}

// inspectNodeOn is inspectNode with the engine configured by cfg (its
// feed).
func inspectNodeOn(t *testing.T, cfg core.Config) (status, ws string, todos *core.Table[todo]) {
	t.Helper()
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	todos, err = core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	principal := func(r *http.Request) (authz.Principal, error) {
		if u := r.Header.Get("X-User"); u != "" {
			return authz.Principal{ID: u, Claims: map[string]any{"projects": []string{"p7", "p8"}}}, nil
		}
		return authz.Anonymous, nil
	}
	ops := func(r *http.Request, _ authz.Principal) error {
		if r.Header.Get("X-Ops") == "letmein" {
			return nil
		}
		return authz.ErrForbidden
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(principal),
		middleware.WithStatusPage(ops, middleware.NewStatusRecorder()))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		srv.Close()
	})
	return srv.URL + "/tide/status", "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws", todos
}

// TestInspect: tide inspect asks each node's status page with the
// operator's header and prints a line per node and subscription, or the
// reports as JSON; without the header the node refuses and the command
// fails; missing flags are usage errors.
func TestInspect(t *testing.T) {
	status1, ws1, todos := inspectNode(t)
	status2, _, _ := inspectNode(t)
	if err := todos.Upsert(context.Background(), todo{ID: "t1", ProjectID: "p7", Title: "x"}); err != nil {
		t.Fatal(err)
	}
	c := tidetest.Dial(t, ws1, tidetest.WithHeader("X-User", "alice"))
	c.Hello(protocol.ClientFrame{Origin: "laptop"})
	c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
	c.Collect("s")

	args := []string{"inspect", "--url", status1, "--url", status2, "--principal", "alice", "--resource", "todos", "--key", "t1"}
	code, out, errs := tide(t, append(args, "--header", "X-Ops: letmein")...)
	if code != exitOK || !strings.Contains(out, "delivered") || !strings.Contains(out, "not_connected") || !strings.Contains(out, "laptop") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	t.Logf("tide inspect:\n%s", out)

	code, out, errs = tide(t, append(args, "--header", "X-Ops: letmein", "--json")...)
	var res inspectResult
	if err := json.Unmarshal([]byte(out), &res); code != exitOK || err != nil || len(res.Reports) != 2 ||
		res.Reports[0].Verdict != core.VerdictDelivered || res.Reports[1].Verdict != core.VerdictNotConnected {
		t.Fatalf("json: exit %d %v\n%s\n%s", code, err, out, errs)
	}

	if code, _, errs := tide(t, args...); code != exitFail || !strings.Contains(errs, "401 Unauthorized") {
		t.Fatalf("without the header: exit %d: %s", code, errs)
	}
	if code, _, errs := tide(t, "inspect", "--url", status1, "--principal", "alice", "--resource", "nope", "--key", "t1", "--header", "X-Ops: letmein"); code != exitFail || !strings.Contains(errs, "unknown_resource") {
		t.Fatalf("unknown resource: exit %d: %s", code, errs)
	}
	for _, bad := range [][]string{
		{"inspect", "--principal", "alice", "--resource", "todos", "--key", "t1"},
		{"inspect", "--url", status1, "--resource", "todos", "--key", "t1"},
		{"inspect", "--url", "ftp://x", "--principal", "alice", "--resource", "todos", "--key", "t1"},
		{"inspect", "--url", status1, "--principal", "alice", "--resource", "todos", "--key", "t1", "--header", "nocolon"},
	} {
		if code, _, _ := tide(t, bad...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", bad, code, exitUsage)
		}
	}
}

// TestInspectTwoNodesOnePostgresFeed: two nodes share one Postgres feed,
// and alice has a subscription on each, to another project. A row written
// through node A reaches node B's subscriber through the feed; tide inspect
// asks both nodes and each answers for its own subscription: for a row of
// p7, A (alice's p7 subscription) says delivered and B (her p8
// subscription) out_of_scope, and the other way round for a row of p8.
func TestInspectTwoNodesOnePostgresFeed(t *testing.T) {
	pool, schema := setup(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	feedOf := func(node string) *pgfeed.Feed {
		f, err := pgfeed.New(pool, pgfeed.Options{Schema: schema, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	fa, fb := feedOf("web-a"), feedOf("web-b")
	statusA, wsA, todosA := inspectNodeOn(t, core.Config{Feed: fa})
	statusB, wsB, _ := inspectNodeOn(t, core.Config{Feed: fb})
	if err := fa.Migrate(ctx, todosA.Schema()); err != nil {
		t.Fatal(err)
	}
	subscribe := func(ws, origin, project string) *tidetest.Conn {
		c := tidetest.Dial(t, ws, tidetest.WithHeader("X-User", "alice"))
		c.Hello(protocol.ClientFrame{Origin: origin})
		c.Subscribe("s", "todos", map[string]any{"project_id": project})
		c.Collect("s")
		return c
	}
	laptop, phone := subscribe(wsA, "laptop", "p7"), subscribe(wsB, "phone", "p8")

	inspectKey := func(key string) []core.InspectReport {
		t.Helper()
		code, out, errs := tide(t, "inspect", "--url", statusA, "--url", statusB, "--principal", "alice", "--resource", "todos",
			"--key", key, "--header", "X-Ops: letmein", "--json")
		var res inspectResult
		if err := json.Unmarshal([]byte(out), &res); code != exitOK || err != nil || len(res.Reports) != 2 {
			t.Fatalf("inspect %s: exit %d %v\n%s\n%s", key, code, err, out, errs)
		}
		return res.Reports
	}
	for _, tc := range []struct {
		key, project string
		got          *tidetest.Conn // the client whose scope holds the row
		verdicts     [2]string      // on node A, on node B
		origins      [2]string
	}{
		{"t1", "p7", laptop, [2]string{core.VerdictDelivered, core.VerdictOutOfScope}, [2]string{"laptop", "phone"}},
		{"t2", "p8", phone, [2]string{core.VerdictOutOfScope, core.VerdictDelivered}, [2]string{"laptop", "phone"}},
	} {
		// Written through node A; the subscriber holding its scope gets it.
		if err := todosA.Upsert(ctx, todo{ID: tc.key, ProjectID: tc.project, Title: "x"}); err != nil {
			t.Fatal(err)
		}
		if f := tc.got.Expect(protocol.FrameChanges); len(f.Entries) != 1 || f.Entries[0].Key != tc.key {
			t.Fatalf("%s: want the row's change: %+v", tc.key, f)
		}
		reps := inspectKey(tc.key)
		for i, node := range []string{"web-a", "web-b"} {
			rep := reps[i]
			if rep.Node != node || rep.Verdict != tc.verdicts[i] || len(rep.Connections) != 1 ||
				rep.Connections[0].Origin != tc.origins[i] || len(rep.Connections[0].Subscriptions) != 1 {
				t.Fatalf("%s on %s: want %s from %s: %+v", tc.key, node, tc.verdicts[i], tc.origins[i], rep)
			}
			// The Postgres feed finds a row by reading the scopes followed:
			// the node whose subscription holds it finds it and its last
			// change; the other reads its own scope and does not.
			sub := rep.Connections[0].Subscriptions[0]
			if tc.verdicts[i] == core.VerdictDelivered {
				if rep.Row != "found" || rep.LastChange == nil || sub.Delivered < *rep.LastChange || !sub.InScope {
					t.Fatalf("%s on %s: %+v", tc.key, node, rep)
				}
			} else if rep.Row != "unknown" || sub.InScope || sub.Reason != "row not found in this scope" {
				t.Fatalf("%s on %s: %+v", tc.key, node, rep)
			}
		}
	}
	// The text form names both nodes, each with its verdict.
	code, out, errs := tide(t, "inspect", "--url", statusA, "--url", statusB, "--principal", "alice", "--resource", "todos",
		"--key", "t1", "--header", "X-Ops: letmein")
	if code != exitOK || !strings.Contains(out, "web-a") || !strings.Contains(out, "web-b") ||
		!strings.Contains(out, core.VerdictDelivered) || !strings.Contains(out, core.VerdictOutOfScope) {
		t.Fatalf("text: exit %d\n%s\n%s", code, out, errs)
	}
	t.Logf("tide inspect, two nodes:\n%s", out)
}
