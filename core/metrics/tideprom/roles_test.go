package tideprom_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
	"github.com/tidesync/tide/core/metrics/tideprom"
	"github.com/tidesync/tide/internal/testenv"
)

// roleNode is one app node of TestRoleMetricsFailover: its own pool, feed
// and replicator, reported under the const label node=<name>.
type roleNode struct {
	name string
	feed *pgfeed.Feed
	rep  *replicator.Replicator
}

// TestRoleMetricsFailover runs two nodes on one change log and scrapes
// their role metrics through the Prometheus handler: one sequencer and one
// replicator leader; killing the replicator leader's lock session counts a
// lost lock and a new term; stopping the sequencer's node moves both roles
// to the other node, whose term counters move.
func TestRoleMetricsFailover(t *testing.T) {
	pool, schema := testenv.PostgresConfig(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := pgfeed.Options{Schema: schema + "_tide"}
	reg := prometheus.NewPedanticRegistry()
	var nodes []*roleNode
	for _, name := range []string{"a", "b"} {
		p := pool
		if name != "a" {
			var err error
			if p, err = pgxpool.NewWithConfig(ctx, pool.Config()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
		}
		nopts := opts
		nopts.Node = "node-" + name
		f, err := pgfeed.New(p, nopts)
		if err != nil {
			t.Fatal(err)
		}
		if name == "a" {
			if err := f.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := replicator.New(replicator.Config{Feed: f, Pool: p, MinBackoff: 10 * time.Millisecond,
			MaxBackoff: 200 * time.Millisecond, CheckInterval: 50 * time.Millisecond, PruneInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		n := &roleNode{name: name, feed: f, rep: rep}
		t.Cleanup(func() { n.rep.Close(); n.feed.Close() })
		mo := tideprom.Options{ConstLabels: prometheus.Labels{"node": name}}
		reg.MustRegister(tideprom.Feed(f, mo), tideprom.Replicator(rep, mo))
		nodes = append(nodes, n)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	url := srv.URL + "/metrics"
	for _, n := range nodes {
		n.rep.Start() // and the feed's sequencer candidate
	}

	// series returns a node's series of the metric, with labels sorted as
	// the exposition format writes them (by name).
	series := func(metric, node, role string) string {
		if role == "" {
			return fmt.Sprintf(`%s{node=%q}`, metric, node)
		}
		return fmt.Sprintf(`%s{node=%q,role=%q}`, metric, node, role)
	}
	sum := func(m map[string]float64, metric string) float64 {
		var s float64
		for _, n := range nodes {
			s += m[series(metric, n.name, "")]
		}
		return s
	}
	// waitFor scrapes until ok holds; the deadline only bounds a failure.
	waitFor := func(what string, ok func(map[string]float64) bool) map[string]float64 {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			m := scrape(t, url)
			if ok(m) {
				return m
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not seen before the deadline; last scrape %v", what, m)
			case <-tick.C:
			}
		}
	}
	leaderOf := func(m map[string]float64, metric string) *roleNode {
		for _, n := range nodes {
			if m[series(metric, n.name, "")] == 1 {
				return n
			}
		}
		return nil
	}

	m := waitFor("one sequencer and one replicator leader", func(m map[string]float64) bool {
		return sum(m, "tide_sequencer_leader") == 1 && sum(m, "tide_replicator_leader") == 1 &&
			sum(m, "tide_replicator_ready") == 2
	})
	seq, rep := leaderOf(m, "tide_sequencer_leader"), leaderOf(m, "tide_replicator_leader")
	for _, n := range nodes {
		wantSeq, wantRep := "standby", "standby"
		if n == seq {
			wantSeq = "leader"
		}
		if n == rep {
			wantRep = "leader"
		}
		for _, role := range []string{"off", "standby", "leader"} {
			if got, want := m[series("tide_sequencer_role", n.name, role)], b2f(role == wantSeq); got != want {
				t.Errorf("node %s: tide_sequencer_role{role=%q} = %v, want %v", n.name, role, got, want)
			}
		}
		for _, role := range []string{"starting", "standby", "leader", "stopped"} {
			if got, want := m[series("tide_replicator_role", n.name, role)], b2f(role == wantRep); got != want {
				t.Errorf("node %s: tide_replicator_role{role=%q} = %v, want %v", n.name, role, got, want)
			}
		}
	}
	// Every node names itself, and each role's holder, alike: the metrics'
	// node_info, and the roles the feed and the replicator read from the
	// database (what the status page and tide status show).
	for _, n := range nodes {
		if got := m[fmt.Sprintf(`tide_node_info{node=%q,tide_node="node-%s"}`, n.name, n.name)]; got != 1 {
			t.Errorf("node %s: tide_node_info = %v, want 1", n.name, got)
		}
		roles, err := n.feed.Roles(ctx)
		if err != nil || len(roles) != 1 || roles[0].Name != "sequencer" || roles[0].Holder != "node-"+seq.name {
			t.Errorf("node %s: feed roles %+v, %v; want the sequencer held by node-%s", n.name, roles, err, seq.name)
		}
		roles, err = n.rep.Roles(ctx)
		if err != nil || len(roles) != 1 || roles[0].Name != "replicator" || roles[0].Holder != "node-"+rep.name {
			t.Errorf("node %s: replicator roles %+v, %v; want the replicator held by node-%s", n.name, roles, err, rep.name)
		}
	}
	if got := sum(m, "tide_sequencer_terms_total"); got != 1 {
		t.Errorf("sequencer terms %v, want 1", got)
	}
	if got := sum(m, "tide_replicator_terms_total"); got != 1 {
		t.Errorf("replicator terms %v, want 1", got)
	}
	if got := sum(m, "tide_feed_listener_connects_total"); got != 0 {
		t.Errorf("listener connects %v before any tail, want 0", got)
	}

	// Kill the replicator leader's lock session: it counts a lost lock and
	// a node (the standby, unless the old leader retries first) starts a
	// second term.
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", rep.rep.Status().LockPID); err != nil {
		t.Fatal(err)
	}
	m = waitFor("a replicator failover", func(m map[string]float64) bool {
		return sum(m, "tide_replicator_terms_total") == 2 && sum(m, "tide_replicator_leader") == 1
	})
	if got := m[series("tide_replicator_lost_lock_total", rep.name, "")]; got != 1 {
		t.Errorf("node %s: lost locks %v after its session was killed, want 1", rep.name, got)
	}

	// Stop the sequencer's node: the other takes over both roles.
	seq.rep.Close()
	seq.feed.Close()
	other := nodes[0]
	if other == seq {
		other = nodes[1]
	}
	before := m[series("tide_sequencer_terms_total", other.name, "")]
	m = waitFor("node "+other.name+" takes both roles", func(m map[string]float64) bool {
		return m[series("tide_sequencer_leader", other.name, "")] == 1 && m[series("tide_replicator_leader", other.name, "")] == 1
	})
	if got := m[series("tide_sequencer_terms_total", other.name, "")]; got != before+1 {
		t.Errorf("node %s: sequencer terms %v, want %v", other.name, got, before+1)
	}
	if got := m[series("tide_sequencer_role", seq.name, "off")]; got != 1 {
		t.Errorf("stopped node %s: tide_sequencer_role{role=\"off\"} = %v, want 1", seq.name, got)
	}
	if got := m[series("tide_replicator_role", seq.name, "stopped")]; got != 1 {
		t.Errorf("stopped node %s: tide_replicator_role{role=\"stopped\"} = %v, want 1", seq.name, got)
	}
	if got := sum(m, "tide_sequencer_leader"); got != 1 {
		t.Errorf("%v sequencer leaders, want 1", got)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
