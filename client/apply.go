package client

import (
	"context"
	"encoding/json"
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
		entries, err := s.entries(inst, f.Entries)
		if err != nil {
			s.protocolError(st, fmt.Errorf("subscription %s (%s): %w", f.ID, st.scope, err))
			return
		}
		if st.copy == nil {
			entries = c.dropEchoes(st, inst.live, entries, f.Cursor)
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

	if f.Type != protocol.FrameCaughtUp {
		c.mu.Lock()
		if s.currentLocked(inst) && st.state != SubLive {
			st.setStateLocked(SubCatchingUp, nil)
		}
		c.mu.Unlock()
	}
	if st.copy != nil {
		s.applySync(ctx, inst, f, b)
		return
	}
	switch {
	case b.Reset:
		c.lmu.Lock()
		st.echoes = nil // the app drops its copy: everything comes again
		c.lmu.Unlock()
	case b.CaughtUp:
		c.dropEchoes(st, false, nil, f.Cursor)
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
			r.Cursor, r.State, r.Refusal = "", StateSyncing, ""
			return true
		}
	case protocol.FrameCaughtUp:
		mutate = func(r *Record) bool {
			changed := r.State != StateLive || r.Refusal != ""
			r.State, r.Refusal = StateLive, ""
			if newer(f.Cursor, r.Cursor) {
				r.Cursor, changed = f.Cursor, true
			}
			return changed
		}
	case protocol.FrameChanges:
		mutate = func(r *Record) bool {
			changed := false
			if r.State != StateLive && r.State != StateSyncing {
				r.State, r.Refusal, changed = StateSyncing, "", true
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
		s.caughtUp(inst, f)
	}
}

// caughtUp marks inst live once its caught-up is persisted.
func (s *session) caughtUp(inst *subInst, f protocol.ServerFrame) {
	c, st := s.c, inst.st
	inst.live = true
	c.mu.Lock()
	st.retries = 0
	if s.currentLocked(inst) {
		st.setStateLocked(SubLive, nil)
	}
	c.mu.Unlock()
	c.emit(Event{Kind: EventCaughtUp, Scope: st.scope, SubscriptionID: inst.id, Cursor: f.Cursor})
}

// applySync applies batch b to the client-kept copy of a synced scope:
// the new rows and the cursor are saved in one record, then installed,
// and the view is recomputed (one notification if it changed). Settled
// mutations leave the log.
func (s *session) applySync(ctx context.Context, inst *subInst, f protocol.ServerFrame, b Batch) {
	c, st := s.c, inst.st
	sc := st.copy
	if sc.norm.resources != nil && f.Type == protocol.FrameChanges && snapshotCursor(f.Cursor) {
		// A snapshot of several resources sends each resource's rows in
		// turn: the copy takes them all at once, at the caught-up, so it
		// never shows a comment without its todo meanwhile.
		if inst.snap == nil {
			inst.snap = &heldSnapshot{base: sc.base}
		}
		inst.snap.base = applyBase(sc.norm, inst.snap.base, b.Reset, b.Entries)
		inst.snap.reset = inst.snap.reset || b.Reset
		inst.needReset = false
		return
	}
	held := inst.snap
	inst.snap = nil
	c.lmu.Lock()
	base := sc.base
	if held != nil && f.Type != protocol.FrameReset {
		base, b.Reset = held.base, b.Reset || held.reset
		if len(b.Entries) > 0 {
			base = applyBase(sc.norm, base, false, b.Entries)
		}
	} else if b.Reset || len(b.Entries) > 0 {
		base = applyBase(sc.norm, sc.base, b.Reset, b.Entries)
	}
	cursor := sc.cursor
	switch {
	case f.Type == protocol.FrameReset:
		cursor = ""
	case b.Reset && !newer(b.Cursor, ""):
		cursor = ""
	case b.Reset || newer(b.Cursor, cursor):
		cursor = b.Cursor
	}
	current := func() bool { return s.currentLocked(inst) }
	persisted := false
	err := c.persist(context.WithoutCancel(ctx), st, current, func(r *Record) bool {
		persisted = true
		r.Copy, r.Rows, r.Cursor, r.Refusal = true, base, cursor, ""
		switch {
		case f.Type == protocol.FrameCaughtUp:
			r.State = StateLive
		case f.Type == protocol.FrameReset:
			r.State = StateSyncing
		case r.State != StateLive:
			r.State = StateSyncing
		}
		return true
	})
	if err != nil {
		c.lmu.Unlock()
		s.storeError(st, err)
		return
	}
	if !persisted {
		c.lmu.Unlock() // the subscription went stale meanwhile
		return
	}
	sc.base, sc.cursor, sc.refused = base, cursor, false
	var qerr error
	settled := c.rep.settle()
	if len(settled) > 0 {
		qerr = c.saveQueueLocked(ctx)
	}
	c.rep.refresh(nil)
	c.lmu.Unlock()
	settleHandles(settled)
	inst.needReset = false
	if qerr != nil {
		s.queueError(qerr)
	}
	switch f.Type {
	case protocol.FrameReset:
		c.log.Info("tide client: scope reset by the server", "scope", st.scope, "reason", f.Reason)
		c.emit(Event{Kind: EventReset, Scope: st.scope, SubscriptionID: inst.id, Reason: string(f.Reason)})
	case protocol.FrameCaughtUp:
		s.caughtUp(inst, f)
	}
}

// heldSnapshot is the copy a snapshot of several resources builds until
// its caught-up: the rows so far, and whether it began with a reset.
type heldSnapshot struct {
	base  map[string]json.RawMessage
	reset bool
}

// snapshotCursor reports whether cursor is one of a snapshot in progress.
func snapshotCursor(cursor string) bool {
	c, err := protocol.ParseCursor(cursor)
	return err == nil && c.Snapshot
}

// entries checks a frame's entries for inst: an entry without a resource
// gets the scope's, an entry of another resource is an error (the protocol
// asks clients to fail loudly). Which of them a Handler's scope skips as
// echoes of its own mutations is dropEchoes's decision (echo.go).
func (s *session) entries(inst *subInst, in []protocol.Entry) ([]protocol.Entry, error) {
	st := inst.st
	out := in[:0]
	for i := range in {
		e := in[i]
		switch {
		case e.Resource == "" && st.norm.resources == nil:
			e.Resource = st.norm.resource
		case e.Resource == "":
			return nil, fmt.Errorf("entry %d (key %q) names no resource, in a subscription of several", i, e.Key)
		case !st.norm.has(e.Resource):
			return nil, fmt.Errorf("entry %d (key %q) is of resource %q, unknown to this subscription of %s", i, e.Key, e.Resource, st.scope)
		}
		out = append(out, e)
	}
	return out, nil
}
