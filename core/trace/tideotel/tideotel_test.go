package tideotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/core/trace/tideotel"
	"github.com/tidesync/tide/middleware"
)

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
}

// TestSubscribeSpanTree: a subscribe yields a "tide.subscribe" span whose
// children are the authorize, one span per page and the caught-up, and a
// refused one ends in error.
func TestSubscribeSpanTree(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	e, err := core.New(core.Config{Tracer: tideotel.New(tp), PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(func(*http.Request) (authz.Principal, error) {
		return authz.Principal{ID: "alice", Claims: map[string]any{"projects": []string{"p7"}}}, nil
	}))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		srv.Close()
	})
	for _, id := range []string{"a", "b", "c"} {
		if err := todos.Upsert(context.Background(), todo{ID: id, ProjectID: "p7"}); err != nil {
			t.Fatal(err)
		}
	}
	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws")
	c.Hello(protocol.ClientFrame{})
	c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
	if entries, _ := c.Collect("s"); len(entries) != 3 {
		t.Fatalf("%d entries", len(entries))
	}
	c.Subscribe("x", "todos", map[string]any{"project_id": "p9"})
	c.ExpectErrorFor("x", protocol.CodeForbidden)
	// A subscribe span ends on its own goroutine after the frames it
	// caused: shutting the engine down waits for every one of them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	spans := exp.GetSpans()
	byID := map[string]tracetest.SpanStub{}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		byID[s.SpanContext.SpanID().String()] = s
		if s.Name == "tide.subscribe" {
			roots = append(roots, s)
		}
	}
	if len(roots) != 2 {
		t.Fatalf("%d subscribe spans, want 2: %v", len(roots), names(spans))
	}
	children := map[string][]string{}
	for _, s := range spans {
		if p, ok := byID[s.Parent.SpanID().String()]; ok && s.Parent.IsValid() {
			children[p.SpanContext.SpanID().String()] = append(children[p.SpanContext.SpanID().String()], s.Name)
		}
	}
	var ok, refused bool
	for _, r := range roots {
		kids := strings.Join(children[r.SpanContext.SpanID().String()], ",")
		switch kids {
		case "tide.authorize,tide.page,tide.page,tide.caught_up":
			ok = r.Status.Code.String() == "Unset"
		case "tide.authorize":
			refused = r.Status.Code.String() == "Error"
		default:
			t.Errorf("subscribe span children %q", kids)
		}
	}
	if !ok || !refused {
		t.Fatalf("want one caught-up subscribe tree and one refused, got %v", names(spans))
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name+"("+s.Status.Code.String()+")")
	}
	return out
}
