package core

import (
	"context"
	"errors"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// errNotMigrated is what a subscriber is told while the feed is not
// installed.
var errNotMigrated = &protocol.Error{Code: protocol.CodeNotMigrated,
	Message: "the server's change feed is not installed; the server must run its migration"}

// notMigratedHint is logged when the feed is not installed.
const notMigratedHint = "the change feed is not installed: run its migration before serving (with Postgres: feed.Migrate(ctx, engine.Schemas()...) after registering every resource, or tide.Open, which does both); subscriptions are refused with not_migrated until then"

// checkCapture refuses a subscription to a resource whose changes the feed
// does not record, saying in the server's log what to call.
// The resources its policy depends on are checked too: a policy that is
// never re-checked when they change would keep access open.
func (e *Engine) checkCapture(ctx context.Context, r *resource) error {
	cc, ok := e.feed.(feed.CaptureChecker)
	if !ok {
		return nil
	}
	if err := e.checkCaptureOf(ctx, cc, r, r); err != nil {
		return err
	}
	for _, d := range r.dependsOn {
		if dep := e.resource(d.Resource); dep != nil && dep != r {
			if err := e.checkCaptureOf(ctx, cc, r, dep); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkCaptureOf checks that the feed records the changes of r, which the
// subscription to sub needs.
func (e *Engine) checkCaptureOf(ctx context.Context, cc feed.CaptureChecker, sub, r *resource) error {
	err := cc.CheckCapture(ctx, r.schema)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, feed.ErrNotInstalled):
		return errNotMigrated
	case !errors.Is(err, feed.ErrNotCaptured):
		return err
	}
	e.cfg.Logger.Error("tide: a subscription to "+sub.schema.Name+" was refused (not_captured): the feed does not record the changes of "+r.schema.Name+"; register every resource before the feed's migration (with Postgres: feed.Migrate(ctx, engine.Schemas()...), or tide.Open)",
		"resource", sub.schema.Name, "uncaptured", r.schema.Name, "err", err)
	return protocol.Errorf(protocol.CodeNotCaptured, "the server does not record the changes of %q; the server must migrate its feed for it", r.schema.Name)
}
