package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tidesync/tide/core/protocol"
)

// Local data follows access: a scope the server refuses for access
// (forbidden, unauthenticated) loses its rows and its cursor at once, in
// memory and in the store, whether the refusal is the scope's own error
// frame or a connection-level refusal that ends Run. The scope's record
// stays, empty and failed with the refusal's code, so the scope is still
// followed: the next connection, or Subscription.Retry, subscribes it again
// from no cursor, and it comes back whole once access returns.

// accessRefused reports whether a subscription refused with code lost its
// access, so its data must go.
func accessRefused(code protocol.Code) bool {
	return code == protocol.CodeForbidden || code == protocol.CodeUnauthenticated
}

// dropScopeData removes st's rows and cursor from memory and from the
// store, and marks its record failed with code. A Handler's scope gets a
// Reset batch, so the app drops its copy too. It runs where batches are
// applied (the session's loop, or Run between connections), so the Reset
// is serialized with them.
func (c *Client) dropScopeData(ctx context.Context, st *scopeState, code protocol.Code) error {
	ctx = context.WithoutCancel(ctx)
	if st.copy == nil {
		if err := st.handler.Apply(ctx, Batch{Scope: st.scope, Reset: true}); err != nil {
			// The cursor goes all the same: the next batch resets again.
			c.log.Error("tide client: the handler failed to drop a refused scope's copy", "scope", st.scope, "err", err)
			c.emit(Event{Kind: EventApplyError, Scope: st.scope, Err: err})
		}
		c.lmu.Lock()
		st.echoes = nil
		c.lmu.Unlock()
		return c.clearRecord(ctx, st.norm.digest, code)
	}
	c.lmu.Lock()
	err := c.clearRecord(ctx, st.norm.digest, code)
	sc := st.copy
	sc.base, sc.cursor, sc.refused = map[string]json.RawMessage{}, "", true
	settled := c.rep.settle()
	var qerr error
	if len(settled) > 0 {
		qerr = c.saveQueueLocked(ctx)
	}
	c.rep.refresh(st.norm.names())
	c.lmu.Unlock()
	settleHandles(settled)
	if err != nil {
		return err
	}
	return qerr
}

// clearRecord removes the rows and the cursor of the record with the
// digest, if there is one, whatever became of its subscription meanwhile
// (a record forgotten meanwhile stays forgotten), and marks it failed with
// code unless it is unsubscribed.
func (c *Client) clearRecord(ctx context.Context, digest string, code protocol.Code) error {
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	r, ok, err := c.store.Load(ctx, digest)
	if err != nil || !ok {
		return err
	}
	r.Cursor, r.Rows, r.Copy = "", nil, false
	if r.State != StateUnsubscribed {
		r.State, r.Refusal = StateFailed, code
	}
	return c.store.Save(ctx, r)
}

// dropAllData drops the data of every scope after a connection-level
// refusal that ends Run (close 1008 not retried): the declared scopes as
// dropScopeData does (state SubFailed, Err a *protocol.Error with code
// unauthenticated and the close reason), and the rows and cursors of the
// store's other records.
func (c *Client) dropAllData(ctx context.Context, reason string) {
	refusal := &protocol.Error{Code: protocol.CodeUnauthenticated, Message: reason}
	c.mu.Lock()
	scopes := c.declaredLocked()
	c.mu.Unlock()
	declared := map[string]bool{}
	for _, st := range scopes {
		declared[st.norm.digest] = true
		if err := c.dropScopeData(ctx, st, refusal.Code); err != nil {
			c.log.Error("tide client: dropping a refused scope's data failed", "scope", st.scope, "err", err)
			c.emit(Event{Kind: EventStoreError, Scope: st.scope, Err: err})
		}
		c.mu.Lock()
		st.setStateLocked(SubFailed, refusal)
		c.mu.Unlock()
	}
	l, ok := c.store.(RecordLister)
	if !ok {
		return
	}
	recs, err := l.List(ctx)
	if err != nil {
		c.emit(Event{Kind: EventStoreError, Err: fmt.Errorf("client: list the store's records: %w", err)})
		return
	}
	for _, r := range recs {
		if declared[r.Digest] || r.Cursor == "" && len(r.Rows) == 0 {
			continue
		}
		if err := c.clearRecord(context.WithoutCancel(ctx), r.Digest, refusal.Code); err != nil {
			c.emit(Event{Kind: EventStoreError, Err: err})
		}
	}
}

// Retry subscribes a failed subscription again at once, on the current
// connection (without a connection, the next one subscribes it, as it
// does every failed scope): after the server refused it, the app calls
// Retry when it knows access may have returned (a membership granted
// again). A scope refused for access has no cursor left, so it starts
// from a snapshot; the Subscription stays the same object, and its Rows,
// Changed and Wait keep working across the retry. Err keeps the last
// refusal until the scope catches up. Retry does nothing for a
// subscription that has not failed, and returns ErrUnsubscribed after
// Unsubscribe. It does not block on the network.
func (s *Subscription) Retry() error {
	c, st := s.c, s.st
	c.mu.Lock()
	if st.removed {
		c.mu.Unlock()
		return ErrUnsubscribed
	}
	if st.state != SubFailed {
		c.mu.Unlock()
		return nil
	}
	st.retries = 0
	st.setStateLocked(SubConnecting, nil)
	sess := c.sess
	c.mu.Unlock()
	if sess != nil {
		sess.subscribe(context.Background(), st)
	}
	return nil
}
