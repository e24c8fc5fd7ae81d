package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/synctest"
	"github.com/tidesync/tide/middleware"
)

// TestDrainMovesClientsToAnotherEngine: two engines share one feed behind a
// router standing in for a load balancer. Draining the first closes its
// sockets with 4002; the Go clients reconnect with backoff, land on the
// second engine, resume from their cursors and converge while a writer
// keeps writing. Shutdown returns, and goleak (TestMain) checks no engine
// goroutine outlived it.
func TestDrainMovesClientsToAnotherEngine(t *testing.T) {
	f := memfeed.New(memfeed.Options{})
	newEngine := func() (*core.Engine, *core.Table[todo], http.Handler) {
		e, err := core.New(core.Config{Feed: f})
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: projectPolicy})
		if err != nil {
			t.Fatal(err)
		}
		return e, tbl, middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler())
	}
	ea, todos, ha := newEngine()
	eb, _, hb := newEngine()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ea.Draining() {
			hb.ServeHTTP(w, r)
			return
		}
		ha.ServeHTTP(w, r)
	}))
	defer ts.Close()
	defer eb.Shutdown(context.Background())
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure bound only
	defer cancel()
	const n = 10
	var drained atomic.Int64
	var runs sync.WaitGroup
	mirrors := make([]*synctest.Rows, n)
	live := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		mirrors[i] = synctest.NewRows()
		var once sync.Once
		c, err := client.New(client.Config{
			URL:        url,
			Header:     http.Header{"X-User": {"u"}, "X-Projects": {"p7"}},
			MinBackoff: time.Millisecond,
			MaxBackoff: 50 * time.Millisecond,
			OnEvent: func(ev client.Event) {
				if ev.Kind == client.EventDisconnected && ev.CloseCode == protocol.CloseDrain {
					drained.Add(1)
				}
				if ev.Kind == client.EventCaughtUp {
					once.Do(func() { live <- struct{}{} })
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Subscribe(client.Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p7"}}, mirrors[i]); err != nil {
			t.Fatal(err)
		}
		runs.Add(1)
		go func() { defer runs.Done(); _ = c.Run(ctx) }()
	}
	for i := 0; i < n; i++ { // everyone is on engine A and caught up
		select {
		case <-live:
		case <-ctx.Done():
			t.Fatal("clients never caught up")
		}
	}
	for i := 0; i < 400; i++ {
		if err := todos.Upsert(ctx, todo{ID: fmt.Sprintf("k%d", i%150), ProjectID: "p7", Title: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if i == 200 {
			sctx, scancel := context.WithTimeout(ctx, time.Minute) // a failure bound only
			if err := ea.Shutdown(sctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			scancel()
		}
	}
	want := map[string]string{}
	rows, _ := todos.Rows(ctx, map[string]any{"project_id": "p7"})
	for _, r := range rows {
		_, row, _ := protocol.EncodeRow(r)
		want[r.ID] = string(row)
	}
	for i, m := range mirrors {
		err := m.Wait(ctx, func(rows map[string]json.RawMessage) bool {
			got := map[string]string{}
			for k, v := range rows {
				got[k] = string(v)
			}
			return equalCopies(got, want)
		})
		if err != nil {
			t.Fatalf("client %d did not converge on the second engine: %d rows, want %d", i, m.Len(), len(want))
		}
	}
	if got := drained.Load(); got < n {
		t.Fatalf("%d clients saw close 4002, want %d", got, n)
	}
	if st := eb.Stats(); st.Connections != n {
		t.Fatalf("second engine holds %d connections, want %d", st.Connections, n)
	}
	cancel()
	runs.Wait()
}
