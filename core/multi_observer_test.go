package core_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

// countingObserver counts subscriptions and catch-ups by resource.
type countingObserver struct {
	core.NopObserver
	mu       sync.Mutex
	active   map[string]int
	started  map[string]int
	caughtUp map[string]int
}

func (o *countingObserver) Subscribed(r string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.active[r]++
	o.started[r]++
}

func (o *countingObserver) SubscriptionEnded(r string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.active[r]--
}

func (o *countingObserver) CaughtUp(r string, _ int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.caughtUp[r]++
}

func (o *countingObserver) counts() (active, started, caughtUp map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		out := map[string]int{}
		for k, v := range m {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	return cp(o.active), cp(o.started), cp(o.caughtUp)
}

// TestMultiObservedUnderEachResource: a subscription of several resources
// is reported to the Observer (metrics, the status page) under each of its
// resources, not only the first by name; its end too.
func TestMultiObservedUnderEachResource(t *testing.T) {
	obs := &countingObserver{active: map[string]int{}, started: map[string]int{}, caughtUp: map[string]int{}}
	e, err := core.New(core.Config{Feed: memfeed.New(memfeed.Options{}), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: projectPolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[mtComment]{Table: "comments", Authorize: projectPolicy}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(t.Context())
		ts.Close()
	})
	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(ts.URL, "http")+"/tide/ws", tidetest.WithHeader("X-User", "ann"), tidetest.WithHeader("X-Projects", "p7"))
	c.Hello(protocol.ClientFrame{})
	subscribeMulti(c, "m", []string{"todos", "comments"}, map[string]any{"project_id": "p7"}, "")
	if f := c.Next(); f.Type != protocol.FrameCaughtUp || f.ID != "m" {
		t.Fatalf("got %s %s, want caught-up of m", f.Type, f.ID)
	}
	both := map[string]int{"todos": 1, "comments": 1}
	active, started, caught := obs.counts()
	if !equalCounts(active, both) || !equalCounts(started, both) || !equalCounts(caught, both) {
		t.Fatalf("active %v, started %v, caught up %v; want each %v", active, started, caught, both)
	}
	if st := e.Stats(); st.Subscriptions != 1 {
		t.Fatalf("Stats().Subscriptions = %d, want 1", st.Subscriptions)
	}
	c.Unsubscribe("m")
	c.Unsubscribe("none") // answered after m's unsubscribe was handled
	c.ExpectErrorFor("none", protocol.CodeUnknownSub)
	if active, _, _ := obs.counts(); len(active) != 0 {
		t.Fatalf("active after unsubscribe %v, want none", active)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
