package replicator_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core/protocol"
)

var (
	benchRate    = flag.Int("tide.rate", 100, "BenchmarkBus: commits per second")
	benchSeconds = flag.Int("tide.seconds", 20, "BenchmarkBus: seconds of writing (the leader is killed halfway)")
)

// BenchmarkBus measures, for each bus, three nodes with three Go clients
// each (two scoped to a tenant, one to the whole resource) and a writer
// committing single-row SQL writes at a steady rate (-tide.rate, default
// 100/s) for -tide.seconds (default 20): the commit-to-client latency of
// every delivered row (from the writer's COMMIT returning to the client
// receiving the frame), before the failover; and, after the leader fails
// halfway through, the failover gap: the longest time any whole-resource
// client went without a delivery, and the worst latency of a commit made
// during the failover. The leader fails in one of two ways: "crash" stops
// its replicator at once (Close: it stops publishing and its session ends,
// as when its process dies), "kill-session" only ends its lock session
// (pg_terminate_backend) while the replicator keeps running until its next
// lock check. The replicators use their defaults (standbys retry at least
// every 2 s, the leader checks its lock every 1 s).
//
//	go test ./core/replicator -run '^$' -bench Bus -benchtime 1x
func BenchmarkBus(b *testing.B) {
	for _, kind := range []busKind{busPostgres, busNATS} {
		for _, how := range []string{"crash", "kill-session"} {
			b.Run("bus="+string(kind)+"/failover="+how, func(b *testing.B) {
				for range b.N {
					f := runFigures(b, kind, how, *benchRate, time.Duration(*benchSeconds)*time.Second)
					b.ReportMetric(f.p50, "p50-ms")
					b.ReportMetric(f.p99, "p99-ms")
					b.ReportMetric(f.gap, "gap-ms")
					b.ReportMetric(f.failMax, "failover-max-latency-ms")
					b.ReportMetric(float64(f.takeover.Milliseconds()), "takeover-ms")
				}
			})
		}
	}
}

type figures struct {
	p50, p50all, p99, max float64 // steady-state latency, ms
	gap, failMax          float64 // worst over the failovers, ms
	baseline              float64 // longest time without a delivery before the first failure, ms
	samples               int
	takeover              time.Duration // worst over the failovers
}

type delivery struct {
	n     int64
	at    time.Time
	whole bool
	node  int
}

// failover is one leader failure during the run.
type failover struct {
	at       time.Time
	n        int64 // the writer's counter when it failed
	from, to int
	takeover time.Duration
	gap      time.Duration // longest time without a delivery on a whole-resource client
	maxLat   float64       // worst latency of a commit made in the window, ms
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func runFigures(b *testing.B, kind busKind, how string, rate int, dur time.Duration) figures {
	ctx := testCtx(b, dur+2*time.Minute)
	c := newCluster(b, clusterConfig{nodes: 3, kind: kind})
	c.start()
	c.waitLeader(ctx, -1)
	tenants := []string{"t0", "t1", "t2", "t3"}
	var mu sync.Mutex
	var got []delivery
	var subs []*subscriber
	for _, n := range c.nodes {
		for j, scope := range []client.Scope{
			{Resource: "items", Conditions: map[string]any{"tenant": tenants[n.i]}},
			{Resource: "items", Conditions: map[string]any{"tenant": tenants[(n.i+1)%4]}},
			{Resource: "items"},
		} {
			whole := j == 2
			ten := ""
			if !whole {
				ten = scope.Conditions["tenant"].(string)
			}
			s := c.subscribe(ctx, n, fmt.Sprintf("node%d/%d", n.i, j), scope, func(it item) bool { return whole || it.Tenant == ten })
			s.mu.Lock()
			s.onEntry = func(e protocol.Entry, at time.Time) {
				if e.Op != "upsert" {
					return
				}
				var it item
				if json.Unmarshal(e.Row, &it) != nil {
					return
				}
				mu.Lock()
				got = append(got, delivery{n: it.N, at: at, whole: whole, node: n.i})
				mu.Unlock()
			}
			s.mu.Unlock()
			subs = append(subs, s)
		}
	}
	// Every client has caught up before the clock starts.
	for _, s := range subs {
		if err := c.converged(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	w := newWriter(c.admin, 1, tenants)
	total := int(dur.Seconds() * float64(rate))
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var fails []*failover
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range total {
		<-tick.C // pacing the writer, not synchronizing
		if i == total/3 || i == 2*total/3 {
			l := c.leaders()
			if len(l) != 1 {
				b.Fatalf("leaders %v at a failover", l)
			}
			f := &failover{at: time.Now(), n: w.n, from: l[0]}
			pid := c.nodes[f.from].rep.Status().LockPID
			if how == "crash" {
				c.nodes[f.from].rep.Close()
			} else if _, err := c.admin.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid)); err != nil {
				b.Fatal(err)
			}
			fails = append(fails, f)
			wg.Add(1)
			go func() { // waits on the replicators' status events
				defer wg.Done()
				f.to = c.waitLeader(ctx, f.from)
				f.takeover = c.nodes[f.to].rep.Status().Since.Sub(f.at)
			}()
		}
		if err := w.step(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	wg.Wait()
	for _, s := range subs {
		if err := c.converged(ctx, s); err != nil {
			b.Fatal(err)
		}
		for _, v := range s.violations {
			b.Error(v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	window := min(5*time.Second, dur/6) // failovers are dur/3 apart
	in := func(t time.Time) *failover {
		for _, f := range fails {
			if !t.Before(f.at.Add(-window/10)) && t.Before(f.at.Add(window)) {
				return f
			}
		}
		return nil
	}
	var steady, steadyAll []float64
	var baseline time.Duration
	last := map[int]time.Time{}
	for _, d := range got {
		at, ok := w.committedAt(d.n)
		if !ok {
			continue
		}
		lat := ms(d.at.Sub(at))
		if d.n <= fails[0].n {
			steady = append(steady, lat)
			if d.whole {
				steadyAll = append(steadyAll, lat)
			}
		} else if f := in(at); f != nil && !at.Before(f.at) {
			f.maxLat = max(f.maxLat, lat)
		}
		if !d.whole {
			continue
		}
		if prev, ok := last[d.node]; ok {
			if f := in(prev); f != nil {
				f.gap = max(f.gap, d.at.Sub(prev))
			} else if prev.Before(fails[0].at) {
				baseline = max(baseline, d.at.Sub(prev))
			}
		}
		last[d.node] = d.at
	}
	slices.Sort(steady)
	slices.Sort(steadyAll)
	pct := func(xs []float64, p float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		return xs[min(len(xs)-1, int(p*float64(len(xs))))]
	}
	fig := figures{
		p50: pct(steady, 0.5), p50all: pct(steadyAll, 0.5), p99: pct(steady, 0.99), max: pct(steady, 1),
		baseline: ms(baseline), samples: len(steady),
	}
	b.Logf("bus %s, %d commits at %d/s, 3 nodes, 9 clients: before the first failure, latency p50 %.1f ms (whole-resource clients %.1f ms), p99 %.1f ms, max %.1f ms over %d deliveries; longest time without a delivery on a whole-resource client %.0f ms",
		kind, total, rate, fig.p50, fig.p50all, fig.p99, fig.max, fig.samples, fig.baseline)
	for _, f := range fails {
		fig.gap, fig.failMax, fig.takeover = max(fig.gap, ms(f.gap)), max(fig.failMax, f.maxLat), max(fig.takeover, f.takeover)
		b.Logf("  failover (%s) of node %d: node %d took over after %s; longest time without a delivery %.0f ms; worst latency of a commit in the following %s %.0f ms",
			how, f.from, f.to, f.takeover.Round(time.Millisecond), ms(f.gap), window, f.maxLat)
	}
	for _, n := range c.nodes {
		st := n.rep.Status()
		b.Logf("  node %d: %s, terms %d, published %d, skipped %d", n.i, st.Role, st.Terms, st.Published, st.Skipped)
	}
	return fig
}
