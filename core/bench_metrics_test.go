package core_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/metrics/tideprom"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

// BenchmarkFanoutMetricsOverhead measures what the Prometheus observer
// costs the fan-out in a way that survives a noisy, shared machine: two
// engines run side by side in one process, each with the same number of
// WebSocket subscribers to one scope, one without an observer and one with
// tideprom's. Each of b.N pairs runs a short round on each (changes
// written, then every delivery received) in alternating order (AB, BA, …)
// and records the pair's ratios of round times. Load from elsewhere hits
// both rounds of a pair alike, so the median ratio stays put while round
// times swing. It reports the median overhead in percent, its 95 %
// confidence interval and the quartiles of the pairs, for the round's time
// on the clock ("wall") and for the CPU time the process used in it
// ("cpu"), which other processes disturb far less (the clients run in the
// process too, so both count their work as well as the server's).
//
// "stream" writes a round's changes as fast as the feed takes them, as
// BenchmarkFanout does; "frame=1" writes one change at a time, each once
// the previous one was delivered, so every delivery is a frame of its own
// (the most observer calls per delivery); "frame=16" writes 16 changes at a
// time, delivered as one 16-entry frame per subscriber. "control" runs
// "frame=16" with no observer on either engine.
//
//	go test ./core -run '^$' -bench FanoutMetricsOverhead -benchtime=400x
func BenchmarkFanoutMetricsOverhead(b *testing.B) {
	for _, mode := range []struct {
		name       string
		deliveries int // per round
		wave       int // see fanoutRig.round
	}{{"stream", 20000, 0}, {"frame=1", 4000, 1}, {"frame=16", 16000, 16}} {
		for _, subs := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/subs=%d", mode.name, subs), func(b *testing.B) {
				benchMetricsOverhead(b, subs, max(1, mode.deliveries/subs), mode.wave, tideprom.New(tideprom.Options{}))
			})
		}
	}
	// The control: both engines without an observer. What it reports is
	// the method's own error (noise, and any bias between the two engines
	// of a pair): an overhead measured above is real only beyond it.
	for _, subs := range []int{100, 1000} {
		b.Run(fmt.Sprintf("control/frame=16/subs=%d", subs), func(b *testing.B) {
			benchMetricsOverhead(b, subs, max(1, 16000/subs), 16, nil)
		})
	}
}

// benchMetricsOverhead runs b.N pairs of rounds on an engine without an
// observer and on one with obs.
func benchMetricsOverhead(b *testing.B, subs, changes, wave int, obs core.Observer) {
	plain := newFanoutRig(b, subs, nil)
	metrics := newFanoutRig(b, subs, obs)
	for range 5 { // warm both up: buffers, pools, goroutine stacks
		plain.round(b, changes, wave)
		metrics.round(b, changes, wave)
	}
	wall := make([]float64, 0, b.N) // per pair: metrics' round time over plain's
	cpu := make([]float64, 0, b.N)  // per pair: the same for the process's CPU time
	var cp, cm time.Duration
	b.ResetTimer()
	for i := range b.N {
		var p, m roundTime
		if i%2 == 0 {
			p, m = plain.round(b, changes, wave), metrics.round(b, changes, wave)
		} else {
			m, p = metrics.round(b, changes, wave), plain.round(b, changes, wave)
		}
		cp, cm = cp+p.cpu, cm+m.cpu
		wall = append(wall, float64(m.wall)/float64(p.wall))
		cpu = append(cpu, float64(m.cpu)/float64(p.cpu))
	}
	b.StopTimer()
	reportRatios(b, "cpu", cpu)
	reportRatios(b, "wall", wall)
	deliveries := float64(b.N * changes * subs)
	b.ReportMetric(float64(cp.Nanoseconds())/deliveries, "plain-cpu-ns/delivery")
	b.ReportMetric(float64(cm.Nanoseconds())/deliveries, "metrics-cpu-ns/delivery")
	b.ReportMetric(0, "ns/op") // a pair's time says nothing
}

// reportRatios reports the median of ratios as an overhead in percent,
// with its 95 % confidence interval (order statistics: the median lies
// between the ranks n/2 ± 1.96·√n/2 with 95 % probability, whatever the
// distribution) and the quartiles.
func reportRatios(b *testing.B, name string, ratios []float64) {
	slices.Sort(ratios)
	n := len(ratios)
	at := func(i int) float64 { return (ratios[min(n-1, max(0, i))] - 1) * 100 }
	half := 0.98 * math.Sqrt(float64(n))
	b.ReportMetric(at(n/2), name+"-overhead-median-%")
	b.ReportMetric(at(int(math.Floor(float64(n)/2-half))), name+"-ci95-lo-%")
	b.ReportMetric(at(int(math.Ceil(float64(n)/2+half))), name+"-ci95-hi-%")
	b.ReportMetric(at(n/4), name+"-p25-%")
	b.ReportMetric(at(3*n/4), name+"-p75-%")
}

// roundTime is how long a round took, on the clock and in the process's
// CPU time (user and system, every thread: the server's and the clients').
type roundTime struct{ wall, cpu time.Duration }

// processCPU returns the CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fanoutRig is an engine served over loopback WebSockets with subs clients
// subscribed to one scope, whose deliveries are counted as they arrive.
type fanoutRig struct {
	todos    *core.Table[todo]
	subs     int
	received atomic.Int64
	target   atomic.Int64
	done     atomic.Pointer[chan struct{}]
	next     int
}

func newFanoutRig(b *testing.B, subs int, obs core.Observer) *fanoutRig {
	e, err := core.New(core.Config{Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.Allow})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e)(http.NotFoundHandler()))
	r := &fanoutRig{todos: todos, subs: subs}
	r.target.Store(-1)
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, subs)
	for i := range conns {
		c := tidetest.Dial(b, url)
		c.Hello(protocol.ClientFrame{})
		c.Subscribe("s", "todos", map[string]any{"project_id": "p"})
		c.Collect("s")
		conns[i] = c.WebSocket() // read raw below, to measure the server alone
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.read(conns[i])
		}()
	}
	b.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
		_ = e.Shutdown(context.Background())
		ts.Close()
	})
	return r
}

var opMarker = []byte(`{"op":`)

// readEntries reads c's frames until c is closed, calling got with the
// number of entries of each frame that has any.
func readEntries(c *websocket.Conn, got func(n int64)) {
	buf := make([]byte, 0, 64<<10)
	for {
		_, rd, err := c.NextReader()
		if err != nil {
			return
		}
		buf = buf[:0]
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := rd.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err != nil {
				break
			}
		}
		if n := int64(bytes.Count(buf, opMarker)); n > 0 {
			got(n)
		}
	}
}

// read counts the entries c receives until it is closed.
func (r *fanoutRig) read(c *websocket.Conn) {
	readEntries(c, func(n int64) {
		// Exactly one reader's addition crosses the round's target.
		if got, tgt := r.received.Add(n), r.target.Load(); got >= tgt && got-n < tgt {
			close(*r.done.Load())
		}
	})
}

// round writes changes changes and returns how long until every
// subscriber received every one of them. With wave 0 it writes them one by
// one as fast as the feed takes them, and the tailer batches what
// accumulated, as under load. With wave n it writes n changes at once (one
// tail batch: one n-entry frame to every subscriber), waits until every
// subscriber received them, and writes the next n: every round does the
// same work whatever the scheduling, and with n = 1 every delivery is a
// frame of its own, the most observer calls per delivery.
func (r *fanoutRig) round(b *testing.B, changes, wave int) roundTime {
	ctx := context.Background()
	rows := make([]todo, 0, max(1, wave))
	write := func(n int) {
		done := make(chan struct{})
		r.done.Store(&done)
		r.target.Store(r.received.Load() + int64(n*r.subs))
		for range n {
			rows = append(rows, todo{ID: fmt.Sprint(r.next % 1000), ProjectID: "p", Title: strings.Repeat("x", 100)})
			r.next++
			if wave == 0 || len(rows) == wave {
				if err := r.todos.Upsert(ctx, rows...); err != nil {
					b.Fatal(err)
				}
				rows = rows[:0]
			}
		}
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			b.Fatalf("received %d of %d", r.received.Load(), r.target.Load())
		}
	}
	start, cpu := time.Now(), processCPU(b)
	if wave == 0 {
		write(changes)
	} else {
		for i := 0; i < changes; i += wave {
			write(min(wave, changes-i))
		}
	}
	return roundTime{wall: time.Since(start), cpu: processCPU(b) - cpu}
}
