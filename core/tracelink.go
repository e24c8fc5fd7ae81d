package core

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tidesync/tide/core/feed"
)

// SpanLinker is implemented by a Tracer whose spans can be named by their
// W3C trace context (a traceparent header value) and linked to one another
// (tideotel's Tracer implements it). With such a tracer the engine
// continues a POST /mutate request's trace, or a mutate frame's, from its
// traceparent and links the "tide.tail.batch" span that delivers a
// mutation's changes to the mutation's "tide.mutate" span. Its methods
// must be safe for concurrent use.
type SpanLinker interface {
	// TraceParent returns the traceparent of the span ctx carries, or ""
	// when it carries none.
	TraceParent(ctx context.Context) string
	// WithRemoteParent returns ctx carrying the remote span named by
	// traceparent and tracestate, so that spans started from it are its
	// children; ctx as it is when traceparent is not valid.
	WithRemoteParent(ctx context.Context, traceparent, tracestate string) context.Context
	// StartLinked is Tracer.Start with links to the spans named by the
	// traceparents in links.
	StartLinked(ctx context.Context, name string, links []string, attrs ...Attr) (context.Context, Span)
}

// continueTrace returns ctx carrying the remote span named by traceparent
// and tracestate (the W3C headers of a request), so that the engine's spans
// for the request are its children. It returns ctx as it is when the
// engine's Tracer is not a SpanLinker, when ctx already carries a span (the
// app's HTTP instrumentation extracted the headers itself) or when
// traceparent is empty or not valid. Package middleware calls it with the
// headers of POST <prefix>/mutate; the engine calls it with a mutate
// frame's traceparent field.
func (e *Engine) continueTrace(ctx context.Context, traceparent, tracestate string) context.Context {
	l, ok := e.cfg.Tracer.(SpanLinker)
	if !ok || traceparent == "" || l.TraceParent(ctx) != "" {
		return ctx
	}
	return l.WithRemoteParent(ctx, traceparent, tracestate)
}

// Bounds of the engine's memory of traced mutations.
const (
	maxTracedMutations       = 4096 // in all
	maxTracedMutationsOrigin = 16   // per origin
)

// mutationTraces remembers the spans of recent mutations so that the tail
// batch delivering their changes can link to them. The change log carries
// no trace context, only the writer's origin, so a change is matched to a
// mutation of this node by origin and position: a connection runs its
// mutations one at a time, so the changes of one of them come after
// everything dispatched, and after the previous mutation of the origin was
// acknowledged, when it began, and at or before the position it was
// acknowledged at. Mutations of one origin that run at the same time (on
// several connections) cannot be told apart: a change links to each.
type mutationTraces struct {
	count      atomic.Int64 // entries held: the tailer skips the lock when 0
	mu         sync.Mutex
	byOrigin   map[string][]*mutationTrace
	dispatched feed.Position // the last position the tailer dispatched
}

// mutationTrace is one remembered mutation.
type mutationTrace struct {
	traceparent string
	after       feed.Position // its changes come after this position
	acked       feed.Position // its ack's position; 0 while it runs
}

func newMutationTraces() *mutationTraces {
	return &mutationTraces{byOrigin: map[string][]*mutationTrace{}}
}

// begin remembers a mutation of origin whose span is traceparent, before it
// runs; it returns nil when there is nothing to remember or no room.
func (m *mutationTraces) begin(origin, traceparent string) *mutationTrace {
	if m == nil || origin == "" || traceparent == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.byOrigin[origin]
	if m.count.Load() >= maxTracedMutations || len(list) >= maxTracedMutationsOrigin {
		return nil // a link is lost, not memory: the tailer drops entries as it passes them
	}
	mt := &mutationTrace{traceparent: traceparent, after: m.dispatched}
	for _, o := range list {
		mt.after = max(mt.after, o.acked)
	}
	m.byOrigin[origin] = append(list, mt)
	m.count.Add(1)
	return mt
}

// end records the mutation's outcome: acknowledged at pos, or (ok false)
// refused, which wrote nothing.
func (m *mutationTraces) end(origin string, mt *mutationTrace, pos feed.Position, ok bool) {
	if mt == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok && pos > m.dispatched {
		mt.acked = pos
		return
	}
	// Refused, or every change it wrote was already dispatched (and linked).
	m.drop(origin, func(o *mutationTrace) bool { return o == mt })
}

// links returns the traceparents of the mutations whose changes are among
// changes, the tailer's next batch, and forgets the mutations whose changes
// have all been dispatched with it.
func (m *mutationTraces) links(changes []feed.Change) []string {
	if m == nil || len(changes) == 0 {
		return nil
	}
	last := changes[len(changes)-1].Pos
	if m.count.Load() == 0 {
		m.mu.Lock()
		m.dispatched = max(m.dispatched, last)
		m.mu.Unlock()
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range changes {
		for _, mt := range m.byOrigin[c.Origin] {
			if c.Origin != "" && c.Pos > mt.after && (mt.acked == 0 || c.Pos <= mt.acked) && !slices.Contains(out, mt.traceparent) {
				out = append(out, mt.traceparent)
			}
		}
	}
	m.dispatched = max(m.dispatched, last)
	for origin := range m.byOrigin {
		m.drop(origin, func(o *mutationTrace) bool { return o.acked != 0 && o.acked <= last })
	}
	return out
}

// drop forgets the entries of origin for which gone holds. m.mu is held.
func (m *mutationTraces) drop(origin string, gone func(*mutationTrace) bool) {
	list := m.byOrigin[origin]
	kept := slices.DeleteFunc(list, gone)
	m.count.Add(int64(len(kept) - len(list)))
	if len(kept) == 0 {
		delete(m.byOrigin, origin)
		return
	}
	m.byOrigin[origin] = kept
}

// startLinkedSpan is startSpan with links to the spans named by the
// traceparents in links, when the tracer can link.
func (e *Engine) startLinkedSpan(ctx context.Context, name string, links []string, attrs ...Attr) (context.Context, Span) {
	if l, ok := e.cfg.Tracer.(SpanLinker); ok && len(links) > 0 {
		return l.StartLinked(ctx, name, links, attrs...)
	}
	return e.startSpan(ctx, name, attrs...)
}

// traceMutation remembers the mutation whose span ctx carries, for
// endMutationTrace, when the engine links traces.
func (e *Engine) traceMutation(ctx context.Context, origin string) *mutationTrace {
	if e.traces == nil || origin == "" {
		return nil
	}
	return e.traces.begin(origin, e.cfg.Tracer.(SpanLinker).TraceParent(ctx))
}
