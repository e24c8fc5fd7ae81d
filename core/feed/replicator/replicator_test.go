package replicator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/natsbus"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
	"github.com/tidesync/tide/internal/testenv"
)

// fastElection keeps tests short: standbys retry at least every 200 ms and
// leaders check their lock connection every 50 ms.
var fastElection = replicator.Config{MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CheckInterval: 50 * time.Millisecond}

// TestFailover runs three nodes, each with its own pool, feed, engine,
// WebSocket server and replicator, with Go clients spread over them and a
// steady writer writing SQL into Postgres. Every client converges; then the
// leader's lock session is killed with pg_terminate_backend while the
// writer goes on: a standby takes over, no change is lost and no client
// applies a change twice. It runs for both buses.
func TestFailover(t *testing.T) {
	for _, kind := range []busKind{busPostgres, busNATS} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			testFailover(t, kind)
		})
	}
}

func testFailover(t *testing.T, kind busKind) {
	ctx := testCtx(t, 120*time.Second)
	c := newCluster(t, clusterConfig{nodes: 3, kind: kind, rep: fastElection})
	c.start()
	first := c.waitLeader(ctx, -1)
	if n := c.lockHolders(ctx); n != 1 {
		t.Fatalf("%d sessions hold the replicator lock, want 1", n)
	}
	tenants := []string{"t0", "t1", "t2", "t.3 é"} // the last has no tenant subscriber: only "all" scopes see it
	var subs []*subscriber
	for _, n := range c.nodes {
		own, next := tenants[n.i], tenants[(n.i+1)%3]
		subs = append(subs,
			c.subscribe(ctx, n, "node"+string(rune('0'+n.i))+"/"+own, client.Scope{Resource: "items", Conditions: map[string]any{"tenant": own}},
				func(it item) bool { return it.Tenant == own }),
			c.subscribe(ctx, n, "node"+string(rune('0'+n.i))+"/"+next+"+t.3", client.Scope{Resource: "items", Conditions: map[string]any{"tenant": map[string]any{"in": []string{next, "t.3 é"}}}},
				func(it item) bool { return it.Tenant == next || it.Tenant == "t.3 é" }),
			c.subscribe(ctx, n, "node"+string(rune('0'+n.i))+"/all", client.Scope{Resource: "items"},
				func(item) bool { return true }),
		)
	}
	w := newWriter(c.admin, 7, tenants)
	const phase1, phase2 = 150, 250
	for range phase1 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range subs {
		if err := c.converged(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: %d clients converged after %d writes; node %d leads", kind, len(subs), phase1, first)

	// Kill the leader's lock session while the writer goes on.
	killed := c.nodes[first].rep.Status().LockPID
	done := make(chan error, 1)
	go func() {
		for i := range phase2 {
			if i == 20 {
				if _, err := c.admin.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(killed)); err != nil {
					done <- err
					return
				}
			}
			if err := w.step(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	next := c.waitLeader(ctx, first)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[first].rep.Wait(ctx, func(s replicator.Status) bool { return s.Role != replicator.RoleLeader }); err != nil {
		t.Fatalf("the old leader never stepped down: %v", err)
	}
	// Readiness: the new leader is ready and the leader; the old one is not
	// the leader any more.
	if code, st := get(t, c.nodes[next].rep, ""); code != 200 || st.Role != replicator.RoleLeader {
		t.Errorf("new leader readiness: %d %+v", code, st)
	}
	if code, _ := get(t, c.nodes[first].rep, ""); code != 503 {
		t.Errorf("old leader: %d, want 503", code)
	}
	for _, s := range subs {
		if err := c.converged(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range subs {
		s.mu.Lock()
		for _, v := range s.violations {
			t.Error(v)
		}
		s.mu.Unlock()
	}
	var published, skipped int64
	for _, n := range c.nodes {
		st := n.rep.Status()
		published += st.Published
		skipped += st.Skipped
		t.Logf("node %d: %s, terms %d, published %d, skipped %d, out of order %d", n.i, st.Role, st.Terms, st.Published, st.Skipped, st.OutOfOrder)
	}
	t.Logf("node %d's session (pid %d) killed; node %d took over; %d writes in all", first, killed, next, phase1+phase2)
	if kind == busNATS {
		// The stream holds every change of the log after its base, once, in
		// order, linked into one chain.
		head, err := c.nodes[0].feed.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.nodes[next].rep.Wait(ctx, func(s replicator.Status) bool { return s.LastPublished >= head })
		if err != nil {
			t.Fatalf("the new leader did not publish up to %d: %+v", head, st)
		}
		base, got := c.streamPositions(ctx)
		want := c.logPositions(ctx, base)
		if !slices.Equal(got, want) {
			t.Fatalf("stream (base %d) holds %d positions, the log %d after it:\n stream %v\n log    %v", base, len(got), len(want), got, want)
		}
		// A leader whose term ends stops waiting for its last
		// acknowledgements, so a message it sent may be stored uncounted.
		if published > int64(len(got)) || published < int64(len(got))-int64(fastElection.Batch+1024) {
			t.Errorf("replicators counted %d messages published, the stream holds %d", published, len(got))
		}
		for _, n := range c.nodes {
			t.Logf("node %d bus: %+v", n.i, n.bus.Stats())
		}
	} else if published != 0 {
		t.Errorf("the Postgres bus published %d messages", published)
	}
}

func get(t *testing.T, r *replicator.Replicator, query string) (int, replicator.Status) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready"+query, nil))
	var st struct {
		Role  string `json:"role"`
		Ready bool   `json:"ready"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("readiness body %q: %v", rec.Body.String(), err)
	}
	role := map[string]replicator.Role{"starting": replicator.RoleStarting, "standby": replicator.RoleStandby, "leader": replicator.RoleLeader, "stopped": replicator.RoleStopped}[st.Role]
	return rec.Code, replicator.Status{Role: role, Ready: st.Ready}
}

// TestSingleLeader starts four replicators at once against one change log:
// at every observation exactly one leads and exactly one session holds the
// lock, only the leader publishes, and the stream holds each change once,
// in order. A graceful Close hands over to a standby with the same
// guarantees.
func TestSingleLeader(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	c := newCluster(t, clusterConfig{nodes: 4, kind: busNATS, rep: fastElection})
	c.start()
	leader := c.waitLeader(ctx, -1)
	w := newWriter(c.admin, 11, []string{"a", "b"})
	observe := func() {
		if l := c.leaders(); len(l) != 1 {
			t.Fatalf("leaders %v, want exactly one", l)
		}
		if n := c.lockHolders(ctx); n != 1 {
			t.Fatalf("%d sessions hold the lock", n)
		}
	}
	for range 100 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
		observe()
	}
	for _, n := range c.nodes {
		st := n.rep.Status()
		if n.i != leader && (st.Published != 0 || st.Terms != 0 || st.Role != replicator.RoleStandby || !st.Ready) {
			t.Errorf("standby %d: %+v", n.i, st)
		}
	}
	// Hand over.
	c.nodes[leader].rep.Close()
	next := c.waitLeader(ctx, leader)
	for range 100 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
		if l := c.leaders(); len(l) != 1 || l[0] != next {
			t.Fatalf("leaders %v, want [%d]", l, next)
		}
	}
	head, err := c.nodes[next].feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[next].rep.Wait(ctx, func(s replicator.Status) bool { return s.LastPublished >= head }); err != nil {
		t.Fatal(err)
	}
	base, got := c.streamPositions(ctx)
	if want := c.logPositions(ctx, base); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, the log %v", got, want)
	}
	if st := c.nodes[leader].rep.Status(); st.Role != replicator.RoleStopped || st.Ready {
		t.Errorf("closed replicator: %+v", st)
	}
	t.Logf("leader %d published %d, then %d published %d", leader, c.nodes[leader].rep.Status().Published, next, c.nodes[next].rep.Status().Published)
}

// TestReadiness: the handler answers 200 only on the ready leader; a
// standby, a node before its first attempt and a closed one answer 503;
// ?role=any answers 200 for a ready standby too (load-balancer health).
func TestReadiness(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	c := newCluster(t, clusterConfig{nodes: 2, kind: busPostgres, rep: fastElection})
	if code, st := get(t, c.nodes[0].rep, ""); code != 503 || st.Role != replicator.RoleStarting {
		t.Errorf("before Start: %d %+v", code, st)
	}
	c.nodes[0].rep.Start()
	c.waitLeader(ctx, -1)
	c.nodes[1].rep.Start()
	if _, err := c.nodes[1].rep.Wait(ctx, func(s replicator.Status) bool { return s.Role == replicator.RoleStandby && s.Ready }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node  int
		query string
		code  int
	}{{0, "", 200}, {0, "?role=any", 200}, {1, "", 503}, {1, "?role=any", 200}} {
		if code, _ := get(t, c.nodes[tc.node].rep, tc.query); code != tc.code {
			t.Errorf("node %d %q: %d, want %d", tc.node, tc.query, code, tc.code)
		}
	}
	c.nodes[1].rep.Close()
	if code, st := get(t, c.nodes[1].rep, "?role=any"); code != 503 || st.Role != replicator.RoleStopped {
		t.Errorf("after Close: %d %+v", code, st)
	}
}

// TestLeaderPrunes: the leader runs the feed's retention (no StartPruner).
func TestLeaderPrunes(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	rc := fastElection
	rc.PruneInterval = 20 * time.Millisecond
	c := newCluster(t, clusterConfig{nodes: 2, kind: busPostgres, rep: rc, feed: pgfeed.Options{MaxChanges: 5}})
	w := newWriter(c.admin, 3, []string{"a"})
	for range 20 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	head, err := c.nodes[0].feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.start()
	leader := c.waitLeader(ctx, -1)
	st, err := c.nodes[leader].rep.Wait(ctx, func(s replicator.Status) bool { return s.Floor > 0 })
	if err != nil {
		t.Fatal(err)
	}
	if floor, err := c.nodes[0].feed.Floor(ctx); err != nil || floor != st.Floor || floor+5 < head {
		t.Fatalf("floor %d (%v), status floor %d, head %d: want the newest 5 changes kept", floor, err, st.Floor, head)
	}
	if other := c.nodes[1-leader].rep.Status(); other.Floor != 0 {
		t.Errorf("the standby pruned: %+v", other)
	}
}

// gatedBus lets a test stop a node's engine from reading its bus.
type gatedBus struct {
	*natsbus.Bus
	mu   sync.Mutex
	open chan struct{} // closed while reading is allowed
}

func (g *gatedBus) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Bus.Tail(ctx, after, limit)
}

func (g *gatedBus) set(allow bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		if !allow {
			g.open = make(chan struct{})
		}
	default:
		if allow {
			close(g.open)
		}
	}
}

// TestBusRetentionFallback: a node that stops reading while the stream's
// retention drops what it had not read falls back to Postgres: it resyncs
// every subscription from its cursor, and its clients converge without a
// gap or a change applied twice.
func TestBusRetentionFallback(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	var gate *gatedBus
	c := newCluster(t, clusterConfig{nodes: 1, kind: busNATS, rep: fastElection,
		nats: natsbus.Options{MaxMsgs: 20, Prefetch: 4},
		wrap: func(b *natsbus.Bus) feed.Bus {
			gate = &gatedBus{Bus: b, open: make(chan struct{})}
			close(gate.open)
			return gate
		}})
	c.start()
	c.waitLeader(ctx, -1)
	n := c.nodes[0]
	subs := []*subscriber{
		c.subscribe(ctx, n, "all", client.Scope{Resource: "items"}, func(item) bool { return true }),
		c.subscribe(ctx, n, "a", client.Scope{Resource: "items", Conditions: map[string]any{"tenant": "a"}}, func(it item) bool { return it.Tenant == "a" }),
	}
	w := newWriter(c.admin, 5, []string{"a", "b"})
	step := func(k int) {
		for range k {
			if err := w.step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	converge := func() {
		for _, s := range subs {
			if err := c.converged(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	step(30)
	converge()
	gate.set(false)
	step(100) // five times what the stream keeps
	head, err := n.feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.rep.Wait(ctx, func(s replicator.Status) bool { return s.LastPublished >= head }); err != nil {
		t.Fatal(err)
	}
	gate.set(true)
	step(10)
	converge()
	if st := n.bus.Stats(); st.Expired == 0 {
		t.Errorf("the node never fell back to Postgres: %+v", st)
	} else {
		t.Logf("bus: %+v", st)
	}
	for _, s := range subs {
		for _, v := range s.violations {
			t.Error(v)
		}
	}
}

// TestReadinessNotMigrated: a replicator over a feed whose Migrate never
// ran is not ready, and its readiness answer names the cause.
func TestReadinessNotMigrated(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	pool, name := testenv.PostgresSchema(t)
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rc := fastElection
	rc.Feed, rc.Pool = f, pool
	rep, err := replicator.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	rep.Start()
	defer rep.Close()
	if _, err := rep.Wait(ctx, func(s replicator.Status) bool { return strings.HasPrefix(s.Reason, "not migrated:") }); err != nil {
		t.Fatalf("%v: %+v", err, rep.Status())
	}
	rec := httptest.NewRecorder()
	rep.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready?role=any", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "not migrated") || !strings.Contains(rec.Body.String(), "call Migrate") {
		t.Fatalf("readiness before Migrate: %d %s", rec.Code, rec.Body)
	}
	if err := f.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rep.Wait(ctx, func(s replicator.Status) bool { return s.Ready }); err != nil {
		t.Fatalf("not ready after Migrate: %v: %+v", err, rep.Status())
	}
}
