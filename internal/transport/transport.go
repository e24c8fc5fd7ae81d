// Package transport is the seam between package middleware and the
// engine: the entry points the HTTP routes call (a poll, a mutation over
// POST, a request's trace headers). They answer with encoded frames and
// take what the routes decoded, so they are plumbing of the routes rather
// than API: an app serves them through package middleware, and reaches
// the engine's behaviour through core's exported API.
//
// Package core registers the implementation in its init; package
// middleware and tide's tests reach it with Of.
package transport

import (
	"context"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
)

// Engine is the routes' side of a *core.Engine.
type Engine interface {
	// Poll authorizes req for p and returns one page as a frame: a
	// changes frame with the entries after the cursor, the cursor to send
	// next and "more", or a reset frame when the cursor is unusable. An
	// entry carries its origin only when origin (the poller's device)
	// wrote it. Refusals are *protocol.Error values (see core.ErrorFor).
	Poll(ctx context.Context, p authz.Principal, origin string, req protocol.PollRequest) ([]byte, error)
	// Mutate runs the mutation of a mutate frame for p, sent by the
	// client device origin, and returns the frame to answer with: an ack,
	// or a reject whose error is also returned.
	Mutate(ctx context.Context, p authz.Principal, origin string, f protocol.ClientFrame) ([]byte, *protocol.Error)
	// ContinueTrace returns ctx carrying the remote span named by the W3C
	// traceparent and tracestate headers of a request, when the engine's
	// tracer links spans (core.SpanLinker); otherwise ctx as it is.
	ContinueTrace(ctx context.Context, traceparent, tracestate string) context.Context
}

// of is set by package core's init.
var of func(e any) Engine

// Register is called once, by package core's init, with the function
// that returns a *core.Engine's routes' side.
func Register(f func(e any) Engine) { of = f }

// Of returns the routes' side of e, a *core.Engine. It panics if e is
// anything else, which is a bug of the caller.
func Of(e any) Engine { return of(e) }
