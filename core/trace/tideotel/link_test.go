package tideotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/core/trace/tideotel"
	"github.com/tidesync/tide/middleware"
)

type renameArgs struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// TestMutationLinkedToDelivery: a mutation sent as POST /tide/mutate with a
// traceparent header, or over the WebSocket with a traceparent field,
// continues the caller's trace, and the tail batch that delivers its change
// to a subscriber links to the mutation's span; so does the batch of a
// mutation without trace context (whose span is a root). A plain write,
// which carries no origin, links nothing.
func TestMutationLinkedToDelivery(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	e, err := core.New(core.Config{Tracer: tideotel.New(tp)})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.Allow})
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
	srv := httptest.NewServer(middleware.Middleware(e)(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws")
	c.Hello(protocol.ClientFrame{Origin: "ws-device"})
	c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
	c.Collect("s")

	// Over HTTP, with the caller's trace context.
	const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/tide/mutate", strings.NewReader(
		`{"v":1,"type":"mutate","key":"k1","resource":"todos","name":"rename","args":{"id":"a","title":"over http"},"at":`+
			strconv.FormatInt(time.Now().UnixMilli(), 10)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", caller)
	req.Header.Set(middleware.ClientOriginHeader, "http-device")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /tide/mutate: %s", resp.Status)
	}
	if f := c.Expect(protocol.FrameChanges); len(f.Entries) != 1 || f.Entries[0].Key != "a" {
		t.Fatalf("http mutation's change: %+v", f)
	}

	// Over the WebSocket, with the client's trace context in the frame and
	// without.
	const wsCaller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, m := range []struct{ key, id, traceparent string }{{"k2", "b", wsCaller}, {"k3", "d", ""}} {
		c.Send(map[string]any{"v": 1, "type": "mutate", "key": m.key, "resource": "todos", "name": "rename",
			"args": map[string]any{"id": m.id, "title": "over ws"}, "at": time.Now().UnixMilli(), "traceparent": m.traceparent})
		for got := map[string]bool{}; !got[protocol.FrameAck] || !got[protocol.FrameChanges]; {
			f := c.Next()
			if f.Type == protocol.FrameChanges && (len(f.Entries) != 1 || f.Entries[0].Key != m.id) {
				t.Fatalf("ws mutation's change: %+v", f)
			}
			got[f.Type] = true
		}
	}

	// A plain write.
	if err := todos.Upsert(context.Background(), todo{ID: "c", ProjectID: "p7"}); err != nil {
		t.Fatal(err)
	}
	c.Expect(protocol.FrameChanges)

	// Shutting down waits for the tailer, so every batch span has ended.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	var mutations []tracetest.SpanStub
	var batches []tracetest.SpanStub
	for _, s := range spans {
		switch s.Name {
		case "tide.mutate":
			mutations = append(mutations, s)
		case "tide.tail.batch":
			batches = append(batches, s)
		}
	}
	if len(mutations) != 3 {
		t.Fatalf("%d mutation spans, want 3: %v", len(mutations), names(spans))
	}
	httpMut, wsMut, rootMut := mutations[0], mutations[1], mutations[2]
	if got := httpMut.SpanContext.TraceID().String(); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("http mutation's trace %s, want the caller's", got)
	}
	if got := httpMut.Parent.SpanID().String(); got != "b7ad6b7169203331" || !httpMut.Parent.IsRemote() {
		t.Errorf("http mutation's parent %s (remote %v), want the caller's span", got, httpMut.Parent.IsRemote())
	}
	if got := wsMut.Parent.SpanID().String(); got != "00f067aa0ba902b7" || wsMut.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("ws mutation's parent %s, want the span of the frame's traceparent", got)
	}
	if rootMut.Parent.IsValid() {
		t.Errorf("ws mutation without traceparent has parent %s, want a root", rootMut.Parent.SpanID())
	}
	linkedTo := func(mut tracetest.SpanStub) int {
		n := 0
		for _, b := range batches {
			for _, l := range b.Links {
				if l.SpanContext.TraceID() == mut.SpanContext.TraceID() && l.SpanContext.SpanID() == mut.SpanContext.SpanID() {
					n++
				}
			}
		}
		return n
	}
	for _, m := range []struct {
		name string
		s    tracetest.SpanStub
	}{{"http", httpMut}, {"ws", wsMut}, {"ws without traceparent", rootMut}} {
		if n := linkedTo(m.s); n != 1 {
			t.Errorf("%s mutation: %d tail batch links to it, want 1", m.name, n)
		}
	}
	links := 0
	for _, b := range batches {
		links += len(b.Links)
	}
	if links != 3 {
		t.Errorf("%d links on %d tail batches, want 3 (the plain write links nothing)", links, len(batches))
	}
	// The link carries the mutation's trace: a trace viewer follows it
	// from the delivery to the caller's request.
	for _, b := range batches {
		for _, l := range b.Links {
			if l.SpanContext.TraceID() == httpMut.SpanContext.TraceID() && l.SpanContext.TraceFlags()&trace.FlagsSampled == 0 {
				t.Error("the link lost the sampled flag")
			}
		}
	}
}
