package core_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
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

// BenchmarkFanout measures live deliveries through real WebSockets on
// loopback: b.N changes, each delivered to every subscriber of one scope.
// The reported deliveries/s counts entries received by the clients. Each
// size runs without metrics and with the Prometheus observer
// (core/metrics/tideprom), so one run shows the metrics' overhead, and
// with writes that carry a device's origin, which no subscriber wrote: each
// change is then also encoded without it, once, for all of them. The
// columns runs give the resource a column policy that hides a column from
// half of the subscribers (each write changes a column all of them see):
// each change is then encoded twice, once per set of visible columns.
func BenchmarkFanout(b *testing.B) {
	for _, subs := range []int{100, 1000} {
		b.Run(fmt.Sprintf("subs=%d", subs), func(b *testing.B) { benchFanout(b, subs, nil, "", false) })
		b.Run(fmt.Sprintf("subs=%d/metrics", subs), func(b *testing.B) {
			m := tideprom.New(tideprom.Options{})
			benchFanout(b, subs, m, "", false)
		})
		b.Run(fmt.Sprintf("subs=%d/origin", subs), func(b *testing.B) { benchFanout(b, subs, nil, "web-writer", false) })
		b.Run(fmt.Sprintf("subs=%d/columns", subs), func(b *testing.B) { benchFanout(b, subs, nil, "", true) })
	}
}

func benchFanout(b *testing.B, subs int, obs core.Observer, origin string, columns bool) {
	e, err := core.New(core.Config{Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	res := core.Resource[todo]{Table: "todos", Authorize: authz.Allow}
	if columns {
		res.ColumnPolicies = map[string]authz.ColumnPolicy[todo]{
			"done": func(p authz.Principal, _ *todo) bool { return strings.HasSuffix(p.ID, "even") },
		}
	}
	todos, err := core.Register(e, res)
	if err != nil {
		b.Fatal(err)
	}
	var mw []middleware.Option
	if columns {
		mw = append(mw, middleware.WithPrincipal(headerPrincipal))
	}
	ts := httptest.NewServer(middleware.Middleware(e, mw...)(http.NotFoundHandler()))
	defer ts.Close()
	defer e.Shutdown(context.Background())
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
	var received atomic.Int64
	target := int64(b.N) * int64(subs)
	done := make(chan struct{})
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, subs)
	for i := range conns {
		var opts []tidetest.Option
		if columns {
			user := fmt.Sprint(i, "odd")
			if i%2 == 0 {
				user = fmt.Sprint(i, "even")
			}
			opts = append(opts, tidetest.WithHeader("X-User", user))
		}
		c := tidetest.Dial(b, url, opts...)
		c.Hello(protocol.ClientFrame{})
		c.Subscribe("s", "todos", map[string]any{"project_id": "p"})
		c.Collect("s")
		conns[i] = c.WebSocket() // the loop below reads raw, to measure the server alone
	}
	for _, c := range conns {
		wg.Add(1)
		go func(c *websocket.Conn) {
			defer wg.Done()
			// A frame without entries (caught-up after a resync) adds
			// nothing: only the frame that reaches the target closes.
			readEntries(c, func(n int64) {
				if received.Add(n) == target {
					close(done)
				}
			})
		}(c)
	}
	row := todo{ProjectID: "p", Title: strings.Repeat("x", 100)}
	b.ResetTimer()
	start := time.Now()
	ctx := context.Background()
	if origin != "" {
		ctx = core.WithOrigin(ctx, origin)
	}
	for i := 0; i < b.N; i++ {
		row.ID = fmt.Sprint(i % 1000)
		if columns {
			row.Title = fmt.Sprint(i) // a change every subscriber sees
		}
		if err := todos.Upsert(ctx, row); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("received %d of %d", received.Load(), target)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(target)/el.Seconds(), "deliveries/s")
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
}
