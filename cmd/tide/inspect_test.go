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
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

// inspectNode serves an in-memory engine whose status page lets in only
// requests with "X-Ops: letmein"; a connection's principal is its X-User
// header. It returns the status page's URL, the websocket URL and the
// table of todos.
func inspectNode(t *testing.T) (status, ws string, todos *core.Table[todo]) {
	t.Helper()
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	todos, err = core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	principal := func(r *http.Request) (authz.Principal, error) {
		if u := r.Header.Get("X-User"); u != "" {
			return authz.Principal{ID: u, Claims: map[string]any{"projects": []string{"p7"}}}, nil
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
