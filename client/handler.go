package client

import (
	"context"

	"github.com/tidesync/tide/core/protocol"
)

// Handler applies batches of changes of one scope to the app's copy of it.
// The client calls Apply from one goroutine, one batch at a time, in the
// order the server sent them, so a Handler serving one scope needs no
// locking of its own (unless other goroutines read the copy).
//
// When Apply returns nil the batch's cursor is persisted. When it returns an
// error nothing is persisted, the error is reported (EventApplyError) and the
// connection is dropped; the scope is then resubscribed from the last stored
// cursor, so the failed batch is delivered again. Apply should honour ctx,
// which ends when Run's context does.
type Handler interface {
	Apply(ctx context.Context, b Batch) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, b Batch) error

// Apply calls f.
func (f HandlerFunc) Apply(ctx context.Context, b Batch) error { return f(ctx, b) }

// Batch is one delivery for a scope: the entries of one changes frame, a
// reset, or the end of a catch-up. Each frame the server sends for a
// subscription yields exactly one Batch (a pushed batch is one call, not one
// per row), except duplicate or older changes frames, which are dropped.
type Batch struct {
	// Scope is the scope as passed to Subscribe.
	Scope Scope
	// Reset asks the handler to drop its copy of the scope before applying
	// Entries. It is set on the server's reset frame (with no entries), and
	// on the first batch after the client subscribed without a cursor
	// (usually the first snapshot page, or the caught-up of an empty scope).
	Reset bool
	// Entries are the changes, in commit order. Entries made by this
	// client's origin are removed (the frame's cursor still advances), and
	// Resource is filled in with the scope's resource where the server left
	// it out. Entries may be empty.
	Entries []protocol.Entry
	// CaughtUp is set on the batch that ends a catch-up (the caught-up
	// frame); it has no entries. The handler's copy is then consistent
	// with the server's. It may happen more than once per subscription.
	CaughtUp bool
	// Cursor is the frame's cursor, persisted once Apply returns nil
	// (unless the stored cursor is already ahead). Empty on a reset.
	Cursor string
}
