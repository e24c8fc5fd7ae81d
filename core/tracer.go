package core

import "context"

// Tracer starts the spans of the engine's traces (package
// core/trace/tideotel adapts OpenTelemetry to it). The engine starts a span
// per subscribe ("tide.subscribe", with children "tide.authorize", one
// "tide.page" per replay or snapshot page sent and "tide.caught_up"), per
// catch-up of a desynced subscription ("tide.resync", with the same
// children but "tide.authorize"), per mutation ("tide.mutate") and per
// tail batch ("tide.tail.batch"; linked to the mutations whose changes it
// delivers when the Tracer is also a SpanLinker). Start must be safe for
// concurrent use.
type Tracer interface {
	// Start starts a span named name as a child of the span in ctx, if
	// any, and returns a context carrying it.
	Start(ctx context.Context, name string, attrs ...Attr) (context.Context, Span)
}

// Span is a span started by a Tracer. Its methods are called from one
// goroutine at a time.
type Span interface {
	// SetAttrs records attributes on the span.
	SetAttrs(attrs ...Attr)
	// End ends the span; err is nil on success.
	End(err error)
}

// Attr is a span attribute: a key and a string or int64 value.
type Attr struct {
	Key string
	Str string
	Int int64
	// IsInt says whether the value is Int (else Str).
	IsInt bool
}

// StrAttr returns a string attribute.
func StrAttr(key, v string) Attr { return Attr{Key: key, Str: v} }

// IntAttr returns an integer attribute.
func IntAttr(key string, v int64) Attr { return Attr{Key: key, Int: v, IsInt: true} }

type nopSpan struct{}

func (nopSpan) SetAttrs(...Attr) {}
func (nopSpan) End(error)        {}

// startSpan starts a span with the configured tracer, or returns ctx and a
// span that does nothing when there is none.
func (e *Engine) startSpan(ctx context.Context, name string, attrs ...Attr) (context.Context, Span) {
	if e.cfg.Tracer == nil {
		return ctx, nopSpan{}
	}
	return e.cfg.Tracer.Start(ctx, name, attrs...)
}

// authorizeTraced runs the subscription's policy in a "tide.authorize" span.
func (s *subscription) authorizeTraced() error {
	_, span := s.c.e.startSpan(s.trace, "tide.authorize")
	err := s.authorize()
	span.End(err)
	return err
}
