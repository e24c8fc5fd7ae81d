package tideprom_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/metrics/tideprom"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
}

type renameArgs struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// principal reads the caller from a header: "alice" may see project p7.
func principal(r *http.Request) (authz.Principal, error) {
	id := r.Header.Get("X-User")
	if id == "" {
		return authz.Anonymous, nil
	}
	return authz.Principal{ID: id, Claims: map[string]any{"projects": []string{"p7"}}}, nil
}

// scrape reads the metrics endpoint and returns each series' value by its
// full text (name and labels), failing on any label that carries a scope
// or principal.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		series := line[:i]
		for _, banned := range []string{"alice", "bob", "p7", "p9"} {
			if strings.Contains(series, `"`+banned+`"`) {
				t.Errorf("series %s carries a scope or principal", series)
			}
		}
		for _, banned := range []string{"scope=", "principal=", "conn=", "connection="} {
			if strings.Contains(series, banned) {
				t.Errorf("series %s has a per-scope, principal or connection label", series)
			}
		}
		out[series] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMetricsMove runs a client through connect, a refused subscribe, a
// snapshot, a replay, a live delivery, a drop and its resync, and a
// mutation, scraping /metrics after each step.
func TestMetricsMove(t *testing.T) {
	m := tideprom.New(tideprom.Options{})
	// A send buffer smaller than one big row: that row's live entry is
	// dropped and its subscription resyncs.
	e, err := core.New(core.Config{Observer: m, SendBuffer: 4096})
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(e)
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	if err := core.AddMutator(todos, "rename", core.Mutator[renameArgs]{
		Authorize: func(context.Context, authz.Principal, renameArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a renameArgs) error {
			return todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p7", Title: a.Title})
		},
	}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/tide/", middleware.Middleware(e, middleware.WithPrincipal(principal))(http.NotFoundHandler()))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		srv.Close()
	})
	ctx := context.Background()
	for i := range 3 {
		if err := todos.Upsert(ctx, todo{ID: fmt.Sprint("t", i), ProjectID: "p7", Title: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	metrics := srv.URL + "/metrics"
	before := scrape(t, metrics)
	moved := func(after map[string]float64, series string, want float64) {
		t.Helper()
		if got := after[series] - before[series]; got != want {
			t.Errorf("%s moved by %v, want %v", series, got, want)
		}
	}

	// Connect.
	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws", tidetest.WithHeader("X-User", "alice"))
	c.Hello(protocol.ClientFrame{})
	c.Probe()
	after := scrape(t, metrics)
	moved(after, "tide_connections", 1)
	moved(after, "tide_connections_total", 1)
	before = after

	// A refused subscribe: alice may not see p9.
	c.Subscribe("theirs", "todos", map[string]any{"project_id": "p9"})
	c.ExpectErrorFor("theirs", protocol.CodeForbidden)
	c.Subscribe("nothing", "nope", nil)
	c.ExpectErrorFor("nothing", protocol.CodeUnknownResource)
	after = scrape(t, metrics)
	moved(after, `tide_subscribe_refusals_total{code="forbidden",resource="todos"}`, 1)
	moved(after, `tide_subscribe_refusals_total{code="unknown_resource",resource=""}`, 1)
	moved(after, `tide_subscriptions{resource="todos"}`, 0) // started and ended
	before = after

	// A snapshot, then a replay from its cursor.
	c.Subscribe("mine", "todos", map[string]any{"project_id": "p7"})
	entries, cursor := c.Collect("mine")
	if len(entries) != 3 {
		t.Fatalf("snapshot: %d entries", len(entries))
	}
	c.Unsubscribe("mine")
	c.Probe()
	if err := todos.Upsert(ctx, todo{ID: "t9", ProjectID: "p7", Title: "y"}); err != nil {
		t.Fatal(err)
	}
	c.SubscribeFrom("mine", "todos", map[string]any{"project_id": "p7"}, cursor)
	if entries, _ := c.Collect("mine"); len(entries) != 1 {
		t.Fatalf("replay: %d entries", len(entries))
	}
	after = scrape(t, metrics)
	moved(after, `tide_catchups_total{resource="todos"}`, 2)
	moved(after, `tide_catchup_pages_count{resource="todos"}`, 2)
	moved(after, `tide_catchup_pages_sum{resource="todos"}`, 2)
	moved(after, `tide_catchup_duration_seconds_count{resource="todos"}`, 2)
	moved(after, `tide_subscribes_total{resource="todos"}`, 2)
	moved(after, `tide_subscriptions{resource="todos"}`, 1)
	before = after

	// A live delivery.
	if err := todos.Upsert(ctx, todo{ID: "live", ProjectID: "p7", Title: "z"}); err != nil {
		t.Fatal(err)
	}
	if f := c.Expect(protocol.FrameChanges); len(f.Entries) != 1 || f.Entries[0].Key != "live" {
		t.Fatalf("live: %+v", f)
	}
	c.Probe() // the writer counted the frame before it wrote the probe's answer
	after = scrape(t, metrics)
	moved(after, "tide_deliveries_total", 1)
	moved(after, "tide_delivery_frames_total", 1)
	if after["tide_delivered_bytes_total"] <= before["tide_delivered_bytes_total"] {
		t.Error("tide_delivered_bytes_total did not move")
	}
	moved(after, "tide_tail_changes_total", 1)
	before = after

	// A drop: a second subscription to the same scope on the connection;
	// a big row's entry for the first fills the send queue, the other's
	// does not fit, is dropped, and that subscription catches up again by
	// replay. The queue frees a frame's bytes only after the write that the
	// client has already read, so the first entry may find the queue still
	// holding the last frame and be dropped too: the test counts what the
	// frames show either way.
	c.Subscribe("second", "todos", map[string]any{"project_id": "p7"})
	c.Collect("second")
	after = scrape(t, metrics)
	before = after
	if err := todos.Upsert(ctx, todo{ID: "big", ProjectID: "p7", Title: strings.Repeat("b", 8192)}); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}      // subscription id → entries of "big" received
	caughtUp := map[string]int{} // subscription id → caught-up frames
	next := func() {
		f := c.Next()
		switch f.Type {
		case protocol.FrameChanges:
			for _, en := range f.Entries {
				if en.Key == "big" {
					got[f.ID]++
				}
			}
		case protocol.FrameCaughtUp:
			caughtUp[f.ID]++
		default:
			t.Fatalf("unexpected %+v", f)
		}
	}
	for len(got) < 2 {
		next()
	}
	// A subscription's drop is counted before its replay is sent, so once
	// both have the row every drop is counted.
	drops := int(scrape(t, metrics)["tide_live_dropped_total"] - before["tide_live_dropped_total"])
	if drops != 1 && drops != 2 {
		t.Fatalf("%d drops, want 1 (or 2 when the queue still held the last frame)", drops)
	}
	for len(caughtUp) < drops {
		next()
	}
	c.Probe()
	if got["mine"] != 1 || got["second"] != 1 {
		t.Fatalf("big row delivered %v", got)
	}
	for id, n := range caughtUp {
		if n != 1 {
			t.Fatalf("subscription %s caught up %d times", id, n)
		}
	}
	after = scrape(t, metrics)
	moved(after, "tide_live_dropped_total", float64(drops))
	moved(after, `tide_catchups_total{resource="todos"}`, float64(drops))
	moved(after, "tide_deliveries_total", float64(2-drops)) // those that fitted; the others were replayed
	before = after

	c.Unsubscribe("mine")
	c.Unsubscribe("second")
	c.Probe()
	after = scrape(t, metrics)
	moved(after, `tide_subscriptions{resource="todos"}`, -2)
	before = after

	// A mutation, acknowledged, and one refused for an unknown mutator.
	c.Send(map[string]any{"v": 1, "type": "mutate", "key": "k1", "resource": "todos", "name": "rename",
		"args": map[string]any{"id": "t1", "title": "renamed"}, "at": time.Now().UnixMilli()})
	if f := c.Expect(protocol.FrameAck); f.Key != "k1" {
		t.Fatalf("ack: %+v", f)
	}
	c.Send(map[string]any{"v": 1, "type": "mutate", "key": "k2", "resource": "todos", "name": "made_up",
		"at": time.Now().UnixMilli()})
	c.Expect(protocol.FrameReject)
	after = scrape(t, metrics)
	moved(after, `tide_mutations_total{mutator="rename",outcome="ack",resource="todos"}`, 1)
	moved(after, `tide_mutations_total{mutator="",outcome="unknown_mutator",resource=""}`, 1)
	moved(after, `tide_mutation_duration_seconds_count{mutator="rename",resource="todos"}`, 1)

	// The lag gauges are there (the in-memory feed's head is read).
	if _, ok := after["tide_feed_head_position"]; !ok {
		t.Error("no tide_feed_head_position")
	}
	if _, ok := after["tide_tail_position_lag"]; !ok {
		t.Error("no tide_tail_position_lag")
	}
}
