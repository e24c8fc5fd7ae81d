package core

import (
	"context"
	"reflect"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Revoke ends, now, every connection of the principal with this id: each
// gets an error frame "unauthenticated" ("access revoked") and a close with
// 1008, and nothing of its subscriptions is written after Revoke returns,
// not even frames already queued (a frame the socket is writing at that
// moment still completes). It returns the number of connections it ended
// on this node.
//
// If the engine's token verifier implements TokenRevoker (authz.Keyring
// does), the principal's tokens issued until now are refused from now on,
// so a client cannot come back with the token it holds; tokens minted
// afterwards work at once. A cookie session is the app's: invalidate it
// before calling Revoke, or the client reconnects with it.
//
// When the feed (or the bus) implements feed.Revocations, as the Postgres
// and in-memory feeds do, the revocation is stored and reaches every other
// node through it: each refuses the tokens and ends the principal's
// connections within the feed's delivery bound (with the Postgres feed, a
// NOTIFY round trip, at most Options.PollInterval if a notification is
// lost), and a node started later refuses the tokens too. Revoke waits
// until the revocation is stored (up to 5 s, then it keeps retrying in the
// background and logs the failure). An empty id (anonymous) is ignored.
// Safe for concurrent use.
func (e *Engine) Revoke(principalID string) int {
	if principalID == "" {
		return 0
	}
	var at time.Time
	if a, ok := e.cfg.Tokens.(revocationApplier); ok {
		at = a.RevokePrincipalAt(principalID, time.Time{})
	} else if r, ok := e.cfg.Tokens.(TokenRevoker); ok {
		r.RevokePrincipal(principalID)
	}
	n := e.revokeLocal(principalID)
	e.revs.publish(feed.Revocation{Kind: feed.RevokeAccess, Principal: principalID, At: at})
	return n
}

// revokeLocal ends the principal's connections on this node.
func (e *Engine) revokeLocal(principalID string) int {
	// A hello verifying a token right now may not be visible to the scan
	// below; it sees the count change and verifies its token again.
	e.auth.revokes.Add(1)
	conns := e.connsOf(principalID)
	for _, c := range conns {
		c.revoke()
	}
	return len(conns)
}

// Reauthorize runs the resource policies again for every active
// subscription of the principal with this id and ends each one that is now
// denied with an error frame carrying the subscription's id: "forbidden" or
// "unauthenticated", or "unavailable" if the policy failed (tide fails
// closed; the client retries with backoff). Connections stay open.
//
// What is read again: whatever the policies read when they run now (the
// app's tables, say); the grants of the connection's principal are checked
// again too. What is not read again: the principal itself. Each
// connection keeps the principal it has: for a token connection, the id,
// claims and grants of its latest valid token (hello or refresh); for a
// cookie connection, those the app's principal hook returned when the
// connection was accepted. A cookie session's changed claims count from its
// next connection; to apply them now, end the connections with Revoke.
// Row filters read the same principal, change by change.
//
// Policies run once per subscribe. A policy that reads synced resources can
// declare them (Resource.DependsOn) and is re-run by itself when they
// change; call Reauthorize when other data a policy reads changes, such as
// a membership removed from a table tide does not sync. It blocks
// while the policies of this node run and returns the number of
// subscriptions it ended here; if ctx ends first it returns ctx's error,
// leaving the subscriptions not yet checked as they were. When the feed
// implements feed.Revocations the other nodes re-check theirs too, within
// the same bound as Revoke. An empty id re-checks anonymous connections.
func (e *Engine) Reauthorize(ctx context.Context, principalID string) (int, error) {
	e.revs.publish(feed.Revocation{Kind: feed.Reauthorize, Principal: principalID})
	return e.reauthorizeLocal(ctx, principalID)
}

// reauthorizeLocal re-checks the principal's subscriptions on this node.
func (e *Engine) reauthorizeLocal(ctx context.Context, principalID string) (int, error) {
	ended := 0
	for _, c := range e.connsOf(principalID) {
		n, err := c.reauthorize(ctx)
		ended += n
		if err != nil {
			return ended, err
		}
	}
	return ended, nil
}

// connsOf returns the open connections of a principal.
func (e *Engine) connsOf(principalID string) []*conn {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []*conn
	for c := range e.conns {
		if c.currentPrincipal().ID == principalID {
			out = append(out, c)
		}
	}
	return out
}

// revoke ends the connection's subscriptions, drops what is queued for it,
// and closes it with 1008 after an error frame.
func (c *conn) revoke() {
	c.mu.Lock()
	if c.closing || c.out.closeQueued {
		c.mu.Unlock()
		return
	}
	subs := make([]*subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.subs = map[string]*subscription{}
	// Drop the queue, but keep counting the bytes the writer may hold: it
	// subtracts them when its write ends.
	n := 0
	for _, it := range c.out.items {
		n += len(it.data)
	}
	clear(c.out.items)
	c.out.items = c.out.items[:0]
	c.out.bytes -= n
	c.out.wake()
	c.mu.Unlock()
	c.e.stats.subscriptions.Add(int64(-len(subs)))
	for _, s := range subs {
		s.observeEnded()
		s.close() // the writer skips live entries of closed subscriptions
	}
	c.sendError("", protocol.Errorf(protocol.CodeUnauthenticated, "access revoked"))
	c.closeAfterFlush(protocol.ClosePolicy, "access revoked")
}

// reauthorize re-runs the policy of each of the connection's subscriptions
// for its current principal and ends those now denied.
func (c *conn) reauthorize(ctx context.Context) (int, error) {
	p := c.currentPrincipal()
	c.mu.Lock()
	subs := make([]*subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	ended := 0
	for _, s := range subs {
		gone, err := c.recheckSub(ctx, s, p)
		if err != nil {
			return ended, err
		}
		if gone {
			ended++
		}
	}
	return c.reauthorizeTopics(ctx, p, ended) // app channel topics: channelconn.go
}

// recheckSub runs s's policy again for p and ends s, with an error frame
// carrying its id, if the policy now denies. It reports whether it ended
// s; if ctx ends first it returns ctx's error and leaves s as it was.
func (c *conn) recheckSub(ctx context.Context, s *subscription, p authz.Principal) (bool, error) {
	if s.isClosed() {
		return false, nil
	}
	err := s.scopes().authorize(ctx, p)
	if err == nil {
		return false, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if s.isClosed() {
		return false, nil
	}
	c.failSub(s, err)
	return true, nil
}

// reauthorizeLater re-checks the connection's subscriptions on a goroutine
// the engine owns; refresh uses it so the reader never waits on a policy.
func (c *conn) reauthorizeLater() {
	c.e.wg.Add(1)
	go func() {
		defer c.e.wg.Done()
		_, _ = c.reauthorize(c.e.ctx)
	}()
}

// samePrincipal reports whether a refreshed principal decides exactly as
// the previous one, so its subscriptions need no new check.
func samePrincipal(a, b authz.Principal) bool {
	return a.ID == b.ID && reflect.DeepEqual(a.Claims, b.Claims) && reflect.DeepEqual(a.Grants, b.Grants)
}
