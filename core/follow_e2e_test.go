package core_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// followNode is one engine of a cluster sharing an in-memory feed, with
// memberships and todos whose policy reads the memberships.
type followNode struct {
	e       *core.Engine
	members *core.Table[membership]
	url     string
}

// memberPolicy allows a subscription to todos of the projects its
// conditions name if the principal has a membership in each, as the
// memberships resource says now.
func memberPolicy(members func() *core.Table[membership]) authz.Policy {
	return func(ctx context.Context, r authz.Request) error {
		if r.Principal.IsAnonymous() {
			return authz.ErrUnauthenticated
		}
		projects := r.Conditions["project_id"]
		if len(projects) == 0 {
			return fmt.Errorf("%w: a condition on project_id is required", authz.ErrForbidden)
		}
		for _, p := range projects {
			rows, err := members().Rows(ctx, map[string]any{"user_id": r.Principal.ID, "project_id": p})
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				return fmt.Errorf("%w: not a member of %s", authz.ErrForbidden, p)
			}
		}
		return nil
	}
}

// followedTodos is the narrowest declaration: a membership concerns its
// user's subscriptions to its project.
var followedTodos = core.Dependency{Resource: "memberships", Principal: "user_id", Scope: map[string]string{"project_id": "project_id"}}

func newFollowNode(t *testing.T, f feed.Feed, dep core.Dependency) *followNode {
	t.Helper()
	e, err := core.New(core.Config{Feed: f})
	if err != nil {
		t.Fatal(err)
	}
	n := &followNode{e: e}
	if n.members, err = core.Register(e, core.Resource[membership]{Table: "memberships"}); err != nil {
		t.Fatal(err)
	}
	res := core.Resource[todo]{Table: "todos", Authorize: memberPolicy(func() *core.Table[membership] { return n.members }), DependsOn: []core.Dependency{dep}}
	if _, err := core.Register(e, res); err != nil {
		t.Fatal(err)
	}
	n.url = serveEngine(t, e)
	return n
}

// serveEngine serves e on loopback with the header principal of these
// tests, shuts it down when the test ends, and returns its WebSocket URL.
func serveEngine(t *testing.T, e *core.Engine) string {
	t.Helper()
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	return "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
}

func member(user, projectID string) membership {
	return membership{ID: user + "/" + projectID, UserID: user, ProjectID: projectID, Role: "member"}
}

// settle waits until every node has re-checked what the feed's changes so
// far call for. The deadline is a failure bound only.
func settle(t *testing.T, f feed.Feed, nodes ...*followNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head, err := f.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := n.e.AwaitRechecks(ctx, head); err != nil {
			t.Fatalf("AwaitRechecks(%d): %v", head, err)
		}
	}
}

// TestFollowEveryNode: three engines share an in-memory feed. Deleting a
// membership, with no call to Reauthorize, ends on every node the
// subscriptions that relied on it (forbidden, as Reauthorize would), and
// leaves the others open. How many policies run again depends on how the
// dependency narrows: by principal and scope only the subscriptions of
// that user to that project, by one of them a wider set, by neither every
// subscription of todos.
func TestFollowEveryNode(t *testing.T) {
	narrow := []struct {
		name string
		dep  core.Dependency
		runs int64 // policies re-run per node
	}{
		{"principal and scope", followedTodos, 2},                                                                    // alice/p7, alice/{p7,p8}
		{"principal", core.Dependency{Resource: "memberships", Principal: "user_id"}, 3},                             // alice's
		{"scope", core.Dependency{Resource: "memberships", Scope: map[string]string{"project_id": "project_id"}}, 3}, // p7's
		{"neither", core.Dependency{Resource: "memberships"}, 5},                                                     // all
	}
	for _, tc := range narrow {
		t.Run(tc.name, func(t *testing.T) {
			f := memfeed.New(memfeed.Options{})
			nodes := []*followNode{newFollowNode(t, f, tc.dep), newFollowNode(t, f, tc.dep), newFollowNode(t, f, tc.dep)}
			ctx := context.Background()
			if err := nodes[0].members.Upsert(ctx, member("alice", "p7"), member("alice", "p8"), member("bob", "p7"), member("carol", "p9")); err != nil {
				t.Fatal(err)
			}
			settle(t, f, nodes...)
			type node struct {
				affected, others []*wsClient
				runs             int64
			}
			var conns []node
			for _, n := range nodes {
				sub := func(user string, projects ...string) *wsClient {
					c := dialAt(t, n.url, user)
					c.hello()
					var conds map[string]any
					if len(projects) == 1 {
						conds = project(projects[0])
					} else {
						conds = map[string]any{"project_id": map[string]any{"in": projects}}
					}
					c.Subscribe("s", "todos", conds)
					c.Collect("s")
					return c
				}
				conns = append(conns, node{
					affected: []*wsClient{sub("alice", "p7"), sub("alice", "p7", "p8")},
					others:   []*wsClient{sub("alice", "p8"), sub("bob", "p7"), sub("carol", "p9")},
					runs:     n.e.Stats().PolicyRechecks,
				})
			}
			settle(t, f, nodes...)

			if err := nodes[1].members.Delete(ctx, membership{ID: "alice/p7"}); err != nil {
				t.Fatal(err)
			}
			for i, n := range conns {
				for _, c := range n.affected {
					if fr := c.ExpectErrorFor("s", protocol.CodeForbidden); !strings.Contains(fr.Message, "not a member of p7") {
						t.Fatalf("node %d: %q", i, fr.Message)
					}
				}
			}
			settle(t, f, nodes...)
			for i, n := range conns {
				for _, c := range append(n.affected, n.others...) {
					c.Probe() // the connection stays; the others' subscriptions too
				}
				st := nodes[i].e.Stats()
				if got := st.PolicyRechecks - n.runs; got != tc.runs {
					t.Errorf("node %d re-ran %d policies, want %d", i, got, tc.runs)
				}
				if st.RechecksEnded != 2 || st.Subscriptions != 3 {
					t.Errorf("node %d: re-checks ended %d subscriptions, %d left; want 2 and 3", i, st.RechecksEnded, st.Subscriptions)
				}
			}
		})
	}
}

// TestFollowChangeDuringPolicy: a membership deleted after a subscription's
// policy read it but before the subscription joined the fan-out (so no
// re-check round could see it) still ends the subscription: it is
// checked again once it joins.
func TestFollowChangeDuringPolicy(t *testing.T) {
	f := memfeed.New(memfeed.Options{})
	e, err := core.New(core.Config{Feed: f})
	if err != nil {
		t.Fatal(err)
	}
	members, err := core.Register(e, core.Resource[membership]{Table: "memberships"})
	if err != nil {
		t.Fatal(err)
	}
	read, gate := make(chan struct{}), make(chan struct{})
	var first sync.Once
	check := memberPolicy(func() *core.Table[membership] { return members })
	policy := func(ctx context.Context, r authz.Request) error {
		err := check(ctx, r)
		first.Do(func() { // the first run only: it read the membership, and waits
			close(read)
			<-gate
		})
		return err
	}
	if _, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: policy, DependsOn: []core.Dependency{followedTodos}}); err != nil {
		t.Fatal(err)
	}
	n := &followNode{e: e, members: members, url: serveEngine(t, e)}
	ctx := context.Background()
	if err := members.Upsert(ctx, member("alice", "p7")); err != nil {
		t.Fatal(err)
	}
	settle(t, f, n)

	c := dialAt(t, n.url, "alice")
	c.hello()
	c.Subscribe("s", "todos", project("p7"))
	<-read // the policy allowed
	if err := members.Delete(ctx, membership{ID: "alice/p7"}); err != nil {
		t.Fatal(err)
	}
	settle(t, f, n) // the deletion's round ran, without the subscription
	close(gate)
	for { // its catch-up may be cut short
		fr := c.Next()
		if fr.Type == protocol.FrameError {
			if fr.ID != "s" || fr.Code != protocol.CodeForbidden {
				t.Fatalf("got %+v, want s forbidden", fr)
			}
			break
		}
	}
}
