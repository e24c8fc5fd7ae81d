package replicator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
)

// membership and todo are the app tables of TestFollowEveryNode: the todos
// policy reads memberships with SQL.
type membership struct {
	ID        string `tide:"id,pk"`
	UserID    string `tide:"user_id,scope"`
	ProjectID string `tide:"project_id,scope"`
}

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
}

// registerFollowed creates the tables (once) and registers memberships and
// todos, whose policy queries memberships through the node's pool and is
// declared to depend on them.
func registerFollowed(t testing.TB, n *node) {
	ctx := testCtx(t, 30*time.Second)
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS memberships (id text PRIMARY KEY, user_id text NOT NULL, project_id text NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL)`,
	} {
		if _, err := n.pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	isMember := func(ctx context.Context, r authz.Request) error {
		if len(r.Conditions["project_id"]) == 0 {
			return authz.ErrForbidden
		}
		for _, p := range r.Conditions["project_id"] {
			var ok bool
			if err := n.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM memberships WHERE user_id = $1 AND project_id = $2)`, r.Principal.ID, p).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: not a member of %s", authz.ErrForbidden, p)
			}
		}
		return nil
	}
	if _, err := core.Register(n.engine, core.Resource[membership]{Table: "memberships"}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(n.engine, core.Resource[todo]{Table: "todos", Authorize: authz.All(authz.Authenticated, isMember),
		DependsOn: []core.Dependency{{Resource: "memberships", Principal: "user_id", Scope: map[string]string{"project_id": "project_id"}}},
	}); err != nil {
		t.Fatal(err)
	}
}

// TestFollowEveryNode: on each bus (Postgres, NATS), three nodes; a
// membership row deleted with plain SQL, with no tide call, ends on every
// node the subscriptions whose policy relied on it, and no other. Each
// round's latency (DELETE committed → error frame read, on each node) is
// logged: run with -v to see the measured bound.
func TestFollowEveryNode(t *testing.T) {
	for _, kind := range []busKind{busPostgres, busNATS} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			testFollowEveryNode(t, kind)
		})
	}
}

func testFollowEveryNode(t *testing.T, kind busKind) {
	ctx := testCtx(t, 120*time.Second)
	c := newCluster(t, clusterConfig{nodes: 3, kind: kind, rep: fastElection, register: registerFollowed})
	c.start()
	c.waitLeader(ctx, -1)
	settle := func() {
		t.Helper()
		head, err := c.nodes[0].feed.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range c.nodes {
			if err := n.engine.AwaitRechecks(ctx, head); err != nil {
				t.Fatalf("node %d: AwaitRechecks(%d): %v", n.i, head, err)
			}
		}
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := c.admin.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO memberships VALUES ('alice/p8', 'alice', 'p8'), ('bob/p7', 'bob', 'p7')`)
	// Every node's tailer has dispatched that write: each engine serves
	// subscriptions (on the NATS bus a node starts reading the stream only
	// once it is set up, and a subscribe before then is answered
	// unavailable).
	settle()
	dial := func(n *node, user string, projects ...string) *tidetest.Conn {
		conn := tidetest.Dial(t, n.url, tidetest.WithHeader("X-User", user), tidetest.WithTimeout(30*time.Second))
		conn.Hello(protocol.ClientFrame{})
		conds := map[string]any{"project_id": map[string]any{"in": projects}}
		conn.Subscribe("s", "todos", conds)
		conn.Collect("s")
		return conn
	}
	var others, bobs []*tidetest.Conn
	for _, n := range c.nodes {
		bob := dial(n, "bob", "p7")
		others, bobs = append(others, dial(n, "alice", "p8"), bob), append(bobs, bob)
	}

	const rounds = 5
	var lat, live []time.Duration
	for r := range rounds {
		exec(`INSERT INTO memberships VALUES ('alice/p7', 'alice', 'p7')`)
		settle()
		type affected struct {
			n    *node
			conn *tidetest.Conn
		}
		var conns []affected
		base := map[int]core.Stats{}
		for _, n := range c.nodes {
			conns = append(conns, affected{n, dial(n, "alice", "p7")}, affected{n, dial(n, "alice", "p7", "p8")})
			base[n.i] = n.engine.Stats()
		}
		start := time.Now()
		exec(`DELETE FROM memberships WHERE id = 'alice/p7'`)
		for _, a := range conns {
			a.conn.ExpectErrorFor("s", protocol.CodeForbidden)
			lat = append(lat, time.Since(start))
		}
		settle()
		for _, n := range c.nodes {
			st := n.engine.Stats()
			if runs, ended := st.PolicyRechecks-base[n.i].PolicyRechecks, st.RechecksEnded-base[n.i].RechecksEnded; runs != 2 || ended != 2 {
				t.Errorf("round %d, node %d: %d policies re-run, %d subscriptions ended; want 2 and 2 (alice's on p7 only)", r, n.i, runs, ended)
			}
		}
		for _, a := range conns {
			a.conn.Probe() // the connection stays
		}
		for _, o := range others {
			o.Probe() // and so do the others' subscriptions
		}
		// For comparison, in the same run: a plain change's delivery.
		start = time.Now()
		exec(`INSERT INTO todos VALUES ($1, 'p7', 'x')`, fmt.Sprint("t", r))
		for _, b := range bobs {
			if f := b.Next(); f.Type != protocol.FrameChanges || f.ID != "s" {
				t.Fatalf("round %d: bob got %+v, want the todo", r, f)
			}
			live = append(live, time.Since(start))
		}
	}
	slices.Sort(lat)
	slices.Sort(live)
	t.Logf("%s bus: membership DELETE committed → subscription ended on each node, over %d subscriptions: median %v, max %v; a todo INSERT committed → delivered, over %d: median %v, max %v",
		kind, len(lat), lat[len(lat)/2], lat[len(lat)-1], len(live), live[len(live)/2], live[len(live)-1])
}
