// Package tideotel adapts OpenTelemetry tracing to core.Tracer, so that
// the engine's spans (a subscribe with its authorize, pages and caught-up;
// a resync; a mutation; a tail batch) go to any OpenTelemetry exporter
// while core itself depends on no tracing library:
//
//	e, _ := core.New(core.Config{Tracer: tideotel.New(otel.GetTracerProvider())})
//
// The same Tracer goes in replicator.Config.Tracer for a span per batch
// the replicator's leader publishes.
//
// A mutation sent over HTTP (POST <prefix>/mutate) runs in the request's
// context, so its span is a child of the request's span when the app's
// HTTP instrumentation started one, or else of the span named by the
// request's traceparent header; a mutate frame's traceparent field does
// the same over the WebSocket. The tail batch span that delivers a
// mutation's changes links to the mutation's span (see core.SpanLinker).
package tideotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidesync/tide/core"
)

// ScopeName is the instrumentation scope of tide's tracer.
const ScopeName = "github.com/tidesync/tide/core"

// Tracer is a core.Tracer backed by an OpenTelemetry tracer. It is also a
// core.SpanLinker: it names spans by their W3C trace context, so the
// engine links the tail batch delivering a mutation's changes to the
// mutation's span and continues the trace of a POST <prefix>/mutate
// request from its traceparent header.
type Tracer struct {
	t trace.Tracer
}

var (
	_ core.Tracer     = (*Tracer)(nil)
	_ core.SpanLinker = (*Tracer)(nil)
)

// w3c reads and writes W3C trace context (traceparent, tracestate).
var w3c propagation.TraceContext

// New returns a Tracer that starts spans with tp's tracer for ScopeName.
func New(tp trace.TracerProvider) *Tracer {
	return &Tracer{t: tp.Tracer(ScopeName)}
}

// Start implements core.Tracer.
func (t *Tracer) Start(ctx context.Context, name string, attrs ...core.Attr) (context.Context, core.Span) {
	ctx, s := t.t.Start(ctx, name, trace.WithAttributes(convert(attrs)...))
	return ctx, span{s}
}

// TraceParent implements core.SpanLinker.
func (t *Tracer) TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c["traceparent"]
}

// WithRemoteParent implements core.SpanLinker.
func (t *Tracer) WithRemoteParent(ctx context.Context, traceparent, tracestate string) context.Context {
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	return w3c.Extract(ctx, c)
}

// StartLinked implements core.SpanLinker. A traceparent that is not valid
// adds no link.
func (t *Tracer) StartLinked(ctx context.Context, name string, links []string, attrs ...core.Attr) (context.Context, core.Span) {
	opts := []trace.SpanStartOption{trace.WithAttributes(convert(attrs)...)}
	for _, tp := range links {
		sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
		if sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, s := t.t.Start(ctx, name, opts...)
	return ctx, span{s}
}

type span struct{ s trace.Span }

func (s span) SetAttrs(attrs ...core.Attr) { s.s.SetAttributes(convert(attrs)...) }

func (s span) End(err error) {
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

func convert(attrs []core.Attr) []attribute.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	kv := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		if a.IsInt {
			kv[i] = attribute.Int64(a.Key, a.Int)
		} else {
			kv[i] = attribute.String(a.Key, a.Str)
		}
	}
	return kv
}
