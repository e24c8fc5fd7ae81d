package core

import (
	"context"
	"reflect"
	"time"

	"github.com/tidesync/tide/core/protocol"
)

// SetAdvanceWait sets how often a connection waiting to advance its
// subscriptions past an acknowledged write checks that it is still open,
// until the test ends.
func SetAdvanceWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := advanceWait
	advanceWait = d
	t.Cleanup(func() { advanceWait = old })
}

// SetRetrySleep replaces the wait between the retries of the engine's
// background loops (backoff.Sleep), so a test drives them without waiting.
// Call it before the engine starts.
func SetRetrySleep(e *Engine, sleep func(ctx context.Context, d time.Duration) bool) { e.sleep = sleep }

// AwaitReady waits until the engine serves subscriptions (its tailer reads
// the feed), or ctx ends.
func AwaitReady(ctx context.Context, e *Engine) error { return e.awaitReady(ctx) }

// TSKind returns the TypeScript type of a column of kind k ("": none).
func TSKind(k protocol.Kind) string { return tsKind(k) }

// TSOf returns the TypeScript type of v's JSON form.
func TSOf(v any) (string, error) { return tsOf(reflect.TypeOf(v), "", nil) }
