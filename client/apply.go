package client

import (
	"context"
	"fmt"

	"github.com/tidesync/tide/core/protocol"
)

// apply turns one changes, caught-up or reset frame of a held subscription
// into one Batch, applies it and persists the cursor. It runs on the
// session's loop goroutine, so batches are applied one at a time in arrival
// order.
func (s *session) apply(ctx context.Context, inst *subInst, f protocol.ServerFrame) {
	c, st := s.c, inst.st
	b := Batch{Scope: st.scope, Reset: inst.needReset, Cursor: f.Cursor}
	switch f.Type {
	case protocol.FrameReset:
		b.Reset, b.Cursor = true, ""
	case protocol.FrameCaughtUp:
		b.CaughtUp = true
	case protocol.FrameChanges:
		if f.Cursor == "" {
			s.protocolError(st, fmt.Errorf("changes frame for subscription %s has no cursor", f.ID))
			return
		}
		entries, err := s.entries(st, f.Entries)
		if err != nil {
			s.protocolError(st, fmt.Errorf("subscription %s (%s): %w", f.ID, st.scope, err))
			return
		}
		b.Entries = entries
		if !inst.needReset {
			stored, err := c.storedCursor(context.WithoutCancel(ctx), st)
			if err != nil {
				s.storeError(st, err)
				return
			}
			if !newer(f.Cursor, stored) {
				c.log.Debug("tide client: dropping a duplicate or older changes frame", "scope", st.scope, "cursor", f.Cursor, "stored", stored)
				return
			}
		}
	}

	if err := st.handler.Apply(ctx, b); err != nil {
		if ctx.Err() != nil {
			return // Run is ending; nothing was persisted
		}
		c.log.Error("tide client: apply failed; resubscribing from the stored cursor", "scope", st.scope, "err", err)
		s.abort(fmt.Errorf("client: apply %s: %w", st.scope, err), true)
		c.emit(Event{Kind: EventApplyError, Scope: st.scope, SubscriptionID: inst.id, Err: err})
		return
	}
	inst.needReset = false

	// Persist, unless the subscription went stale while Apply ran. The
	// write is not cut short by Run ending: the batch was applied.
	current := func() bool { return s.currentLocked(inst) }
	var mutate func(*Record) bool
	switch f.Type {
	case protocol.FrameReset:
		mutate = func(r *Record) bool {
			r.Cursor, r.State = "", StateSyncing
			return true
		}
	case protocol.FrameCaughtUp:
		mutate = func(r *Record) bool {
			changed := r.State != StateLive
			r.State = StateLive
			if newer(f.Cursor, r.Cursor) {
				r.Cursor, changed = f.Cursor, true
			}
			return changed
		}
	case protocol.FrameChanges:
		mutate = func(r *Record) bool {
			changed := false
			if r.State != StateLive && r.State != StateSyncing {
				r.State, changed = StateSyncing, true
			}
			if newer(f.Cursor, r.Cursor) {
				r.Cursor, changed = f.Cursor, true
			}
			return changed
		}
	}
	if err := c.persist(context.WithoutCancel(ctx), st, current, mutate); err != nil {
		s.storeError(st, err)
		return
	}

	switch f.Type {
	case protocol.FrameReset:
		c.log.Info("tide client: scope reset by the server", "scope", st.scope, "reason", f.Reason)
		c.emit(Event{Kind: EventReset, Scope: st.scope, SubscriptionID: inst.id, Reason: string(f.Reason)})
	case protocol.FrameCaughtUp:
		c.mu.Lock()
		st.retries = 0
		c.mu.Unlock()
		c.emit(Event{Kind: EventCaughtUp, Scope: st.scope, SubscriptionID: inst.id, Cursor: f.Cursor})
	}
}

// entries checks and filters a frame's entries for st: an entry without a
// resource gets st's, an entry of another resource is an error (the
// protocol asks clients to fail loudly), and entries of this client's own
// origin are removed.
func (s *session) entries(st *scopeState, in []protocol.Entry) ([]protocol.Entry, error) {
	origin := s.c.cfg.Origin
	out := in[:0]
	for i := range in {
		e := in[i]
		switch e.Resource {
		case "":
			e.Resource = st.norm.resource
		case st.norm.resource:
		default:
			return nil, fmt.Errorf("entry %d (key %q) is of resource %q, unknown to this subscription of %q", i, e.Key, e.Resource, st.norm.resource)
		}
		if e.Origin != "" && e.Origin == origin {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}
