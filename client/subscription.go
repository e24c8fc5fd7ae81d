package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/tidesync/tide/core/protocol"
)

// Subscription is an app's interest in one scope, from Sync or Subscribe
// until Unsubscribe, across connections. It is safe for concurrent use.
type Subscription struct {
	c  *Client
	st *scopeState
}

// SubState is the state of a Subscription on the current connection.
type SubState string

// Subscription states.
const (
	// SubConnecting: not subscribed on a connection yet (no connection, or
	// the subscribe is on its way).
	SubConnecting SubState = "connecting"
	// SubCatchingUp: the server is sending the snapshot or the replay.
	SubCatchingUp SubState = "catching-up"
	// SubLive: caught up; live changes flow.
	SubLive SubState = "live"
	// SubFailed: the server refused the subscription (Err says why). The
	// next connection tries again.
	SubFailed SubState = "failed"
)

// Sync subscribes to scope s and keeps its rows in the client's local
// store: read them with Subscription.Rows, and learn of changes with
// Subscription.Changed. This is the default way to sync a scope.
//
// The rows are persisted in Config.Store with the scope's cursor, in one
// Save per applied batch, so with a FileStore a restart resumes a complete
// copy; a stored cursor without a stored copy (a record written by an
// older client, or by Subscribe) is dropped and the scope starts from a
// snapshot. The copy shows the mutations not yet settled on top of the
// server's rows (see Mutate). Sync may be called before Run or while Run
// is active; an invalid scope, or one the client already holds, is an
// error.
func (c *Client) Sync(s Scope) (*Subscription, error) {
	return c.subscribe(s, nil)
}

// Subscribe declares interest in scope s, whose batches h applies: the
// app keeps its own copy of the scope, and the client only its cursor (use
// Sync to have the client keep the rows). It may be called before Run or
// while Run is active: the scope is subscribed on the current connection,
// if any, and on every later one, with its stored cursor. Subscribing to an
// invalid scope (an empty Resource, malformed conditions), to a scope the
// client already holds, or with a nil Handler is an error. The Handler
// must hold the copy the stored cursor stands for: with a persistent store
// it resumes from that cursor and gets only what changed since.
//
// The scope's record is created in the store if it has none. When there is
// no stored cursor the first batch has Reset set.
func (c *Client) Subscribe(s Scope, h Handler) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("client: Subscribe: nil Handler (use Sync to let the client keep the rows)")
	}
	return c.subscribe(s, h)
}

func (c *Client) subscribe(s Scope, h Handler) (*Subscription, error) {
	n, err := s.normalize()
	if err != nil {
		return nil, err
	}
	st := &scopeState{scope: s, norm: n, handler: h, state: SubConnecting, stateCh: make(chan struct{})}
	dup := func() bool { _, ok := c.scopes[n.digest]; return ok }
	c.mu.Lock()
	if dup() {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrDuplicateScope, s)
	}
	c.mu.Unlock()
	var loaded Record
	err = c.persist(context.Background(), st, nil, func(r *Record) bool {
		loaded = cloneRecord(*r)
		changed := r.Synced != (h == nil) || r.State == StateUnsubscribed
		r.Synced = h == nil
		if r.State == StateUnsubscribed {
			r.State = StateNew // followed again
		}
		if h == nil && !r.Copy && r.Cursor != "" {
			// A cursor without the rows it belongs to: start over.
			r.Cursor, r.State, r.Rows = "", StateNew, nil
			return true
		}
		return changed
	})
	if err != nil {
		return nil, fmt.Errorf("client: Subscribe %s: %w", s, err)
	}
	if h == nil {
		st.copy = newScopeCopy(n)
		if loaded.Copy && loaded.Cursor != "" {
			st.copy.base, st.copy.cursor = loaded.Rows, loaded.Cursor
			if st.copy.base == nil {
				st.copy.base = map[string]json.RawMessage{}
			}
		}
	}
	c.mu.Lock()
	if dup() {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrDuplicateScope, s)
	}
	c.seq++
	st.seq = c.seq
	c.scopes[n.digest] = st
	sess := c.sess
	c.mu.Unlock()
	if st.copy != nil {
		c.lmu.Lock()
		c.rep.scopes[n.digest] = st.copy
		settled := c.rep.settle()
		if len(settled) > 0 {
			_ = c.saveQueueLocked(context.Background()) // best effort: settling again later is harmless
		}
		c.rep.refresh(n.names())
		c.lmu.Unlock()
		settleHandles(settled)
	}
	if sess != nil {
		sess.subscribe(context.Background(), st)
	}
	return &Subscription{c: c, st: st}, nil
}

// Scope returns the subscription's scope.
func (s *Subscription) Scope() Scope { return s.st.scope }

// Rows returns a copy of the scope's rows by primary key, as the client
// holds them: the server's rows with the unsettled mutations applied. It
// is nil for a subscription made with Subscribe (the Handler keeps the
// rows). For a scope of several resources the keys are the resource, a NUL
// byte and the primary key; RowsOf gives one resource's rows.
func (s *Subscription) Rows() map[string]json.RawMessage {
	if s.st.copy == nil {
		return nil
	}
	s.c.lmu.Lock()
	defer s.c.lmu.Unlock()
	return maps.Clone(s.st.copy.view)
}

// RowsOf returns a copy of the rows of one of the scope's resources by
// primary key, as Rows holds them; nil for a resource the scope does not
// follow and for a subscription made with Subscribe.
func (s *Subscription) RowsOf(resource string) map[string]json.RawMessage {
	n := s.st.norm
	if s.st.copy == nil || !n.has(resource) {
		return nil
	}
	s.c.lmu.Lock()
	defer s.c.lmu.Unlock()
	out := map[string]json.RawMessage{}
	for k, row := range s.st.copy.view {
		if key, ok := strings.CutPrefix(k, n.rowKey(resource, "")); ok {
			out[key] = row
		}
	}
	return out
}

// Changed returns a channel closed at the next change of Rows: once per
// applied batch or reconcile that changed the rows, never once per row.
// Take a new channel after each change. It is nil for a subscription made
// with Subscribe.
func (s *Subscription) Changed() <-chan struct{} {
	if s.st.copy == nil {
		return nil
	}
	s.c.lmu.Lock()
	defer s.c.lmu.Unlock()
	return s.st.copy.changed
}

// Version counts the changes of Rows since Sync; 0 for a subscription made
// with Subscribe.
func (s *Subscription) Version() uint64 {
	if s.st.copy == nil {
		return 0
	}
	s.c.lmu.Lock()
	defer s.c.lmu.Unlock()
	return s.st.copy.ver
}

// Cursor returns the applied cursor of a synced scope's rows ("" before
// the first batch, and for a subscription made with Subscribe).
func (s *Subscription) Cursor() string {
	if s.st.copy == nil {
		return ""
	}
	s.c.lmu.Lock()
	defer s.c.lmu.Unlock()
	return s.st.copy.cursor
}

// State returns the subscription's state on the current connection.
func (s *Subscription) State() SubState {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.st.state
}

// Err returns the server's last refusal of the subscription, a
// *protocol.Error whose Code says why (unauthenticated, forbidden, ...),
// or nil. It is cleared when the subscription catches up.
func (s *Subscription) Err() error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.st.err
}

// Wait blocks until the subscription is live (nil), the server refuses it
// (the *protocol.Error of Err), it is unsubscribed (ErrUnsubscribed), or
// ctx ends (ctx's error).
func (s *Subscription) Wait(ctx context.Context) error {
	for {
		s.c.mu.Lock()
		st, err, ch, removed := s.st.state, s.st.err, s.st.stateCh, s.st.removed
		s.c.mu.Unlock()
		switch {
		case removed:
			return ErrUnsubscribed
		case st == SubLive:
			return nil
		case st == SubFailed:
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ErrUnsubscribed is returned by Subscription.Wait after Unsubscribe.
var ErrUnsubscribed = errors.New("client: unsubscribed")

// setStateLocked changes st's state and wakes its waiters. The caller
// holds c.mu.
func (st *scopeState) setStateLocked(state SubState, err error) {
	if st.state == state && st.err == err {
		return
	}
	st.state = state
	if err != nil || state == SubLive {
		st.err = err
	}
	close(st.stateCh)
	st.stateCh = make(chan struct{})
}

func serverErr(f protocol.ServerFrame) error {
	return &protocol.Error{Code: f.Code, Message: f.Message, Detail: f.Detail}
}

// Unsubscribe ends the subscription: the server is told, frames still in
// flight for it are ignored, and an Apply already running for it is not
// persisted. The scope's record is kept, marked unsubscribed, so
// subscribing to the scope again resumes from its cursor (delete the record
// from the store to start over). Unsubscribing twice does nothing.
func (s *Subscription) Unsubscribe() error {
	c, st := s.c, s.st
	c.mu.Lock()
	if st.removed {
		c.mu.Unlock()
		return nil
	}
	st.removed = true
	close(st.stateCh)
	st.stateCh = make(chan struct{})
	if c.scopes[st.norm.digest] == st {
		delete(c.scopes, st.norm.digest)
	}
	inst := st.inst
	st.inst = nil
	if inst != nil {
		delete(inst.sess.ids, inst.id)
	}
	c.mu.Unlock()
	if st.copy != nil {
		c.lmu.Lock()
		if c.rep.scopes[st.norm.digest] == st.copy {
			delete(c.rep.scopes, st.norm.digest)
		}
		c.lmu.Unlock()
	}
	if inst != nil {
		_ = inst.sess.write(protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameUnsubscribe, ID: inst.id})
	}
	notRedeclared := func() bool { return c.scopes[st.norm.digest] == nil }
	err := c.persist(context.Background(), st, notRedeclared, func(r *Record) bool {
		if r.State == StateUnsubscribed {
			return false
		}
		r.State = StateUnsubscribed
		return true
	})
	if err != nil {
		return fmt.Errorf("client: Unsubscribe %s: %w", st.scope, err)
	}
	return nil
}
