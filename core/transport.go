package core

import (
	"context"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/transport"
)

// The HTTP routes' entry points reach the engine through
// internal/transport: they answer with encoded frames, which is plumbing
// of package middleware, not API.
func init() {
	transport.Register(func(e any) transport.Engine { return routes{e.(*Engine)} })
}

// routes is an engine's side of internal/transport.
type routes struct{ e *Engine }

func (r routes) Poll(ctx context.Context, p authz.Principal, origin string, req protocol.PollRequest) ([]byte, error) {
	return r.e.poll(ctx, p, origin, req)
}

func (r routes) Mutate(ctx context.Context, p authz.Principal, origin string, f protocol.ClientFrame) ([]byte, *protocol.Error) {
	return r.e.mutateRequest(ctx, p, origin, f)
}

func (r routes) ContinueTrace(ctx context.Context, traceparent, tracestate string) context.Context {
	return r.e.continueTrace(ctx, traceparent, tracestate)
}
