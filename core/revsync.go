package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// revocationApplier is implemented by token verifiers that can apply a
// revocation made on another node with its own time; authz.Keyring does.
type revocationApplier interface {
	RevokePrincipalAt(principalID string, at time.Time) time.Time
}

// revocationHooks is implemented by token verifiers that report the
// revocations made on them directly; authz.Keyring does.
type revocationHooks interface {
	OnRevoke(fn func(principalID string, at time.Time)) (cancel func())
}

// revSync carries the engine's revocations to the other nodes and applies
// theirs, through the feed's (or bus's) feed.Revocations. Without one it
// does nothing and ready is closed at once.
type revSync struct {
	e     *Engine
	src   feed.Revocations // nil: single node
	node  string           // this engine's id in the revocations it publishes
	ready chan struct{}    // closed once the stored revocations are applied
}

// revocationWait bounds how long a hello or refresh waits for the stored
// revocations to be loaded before it is refused as unavailable.
const revocationWait = 10 * time.Second

func newRevSync(e *Engine) *revSync {
	rs := &revSync{e: e, ready: make(chan struct{})}
	if r, ok := e.bus.src.(feed.Revocations); ok {
		rs.src = r
	} else if r, ok := e.feed.(feed.Revocations); ok {
		rs.src = r
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	rs.node = hex.EncodeToString(id[:])
	if rs.src == nil {
		close(rs.ready)
		return rs
	}
	if h, ok := e.cfg.Tokens.(revocationHooks); ok {
		cancel := h.OnRevoke(func(id string, at time.Time) {
			rs.publish(feed.Revocation{Kind: feed.RevokeTokens, Principal: id, At: at})
		})
		context.AfterFunc(e.ctx, cancel)
	}
	return rs
}

// start loads and applies the stored revocations, then watches for new
// ones, retrying until it succeeds or the engine shuts down. The caller has
// done e.wg.Add(1).
func (rs *revSync) start() {
	defer rs.e.wg.Done()
	if rs.src == nil {
		return
	}
	for attempt := 0; ; attempt++ {
		err := rs.src.WatchRevocations(rs.e.ctx, rs.apply)
		if err == nil {
			close(rs.ready)
			return
		}
		if rs.e.ctx.Err() != nil || !rs.e.backoff(rs.e.ctx, attempt, "revocations", err) {
			return
		}
	}
}

// await waits until the stored revocations are applied, so that no token
// they refuse is accepted.
func (rs *revSync) await(ctx context.Context) *protocol.Error {
	select {
	case <-rs.ready:
		return nil
	default:
	}
	t := time.NewTimer(revocationWait)
	defer t.Stop()
	select {
	case <-rs.ready:
		return nil
	case <-ctx.Done():
	case <-rs.e.ctx.Done():
	case <-t.C:
	}
	return protocol.Errorf(protocol.CodeUnavailable, "the revocations of the cluster cannot be read yet")
}

// publish sends r to the other nodes. A failure is logged and retried in
// the background until it succeeds or the engine shuts down; the
// revocation has been applied on this node already.
func (rs *revSync) publish(r feed.Revocation) {
	if rs.src == nil {
		return
	}
	r.Node = rs.node
	if r.At.IsZero() {
		r.At = rs.e.cfg.Clock.Now()
	}
	ctx, cancel := context.WithTimeout(rs.e.ctx, 5*time.Second)
	err := rs.src.PublishRevocation(ctx, r)
	cancel()
	if err == nil {
		rs.e.stats.revocationsPublished.Add(1)
		return
	}
	if rs.e.ctx.Err() != nil {
		return
	}
	rs.e.wg.Add(1)
	go func() {
		defer rs.e.wg.Done()
		for attempt := 1; rs.e.backoff(rs.e.ctx, attempt, "publish revocation", err); attempt++ {
			ctx, cancel := context.WithTimeout(rs.e.ctx, 5*time.Second)
			err = rs.src.PublishRevocation(ctx, r)
			cancel()
			if err == nil {
				rs.e.stats.revocationsPublished.Add(1)
				return
			}
		}
	}()
}

// apply applies a revocation received from the store. Those this engine
// made were applied when they were made. A stored one (initial) only
// refuses tokens: the connections it ended are gone, and those open now
// were made afterwards.
func (rs *revSync) apply(r feed.Revocation, initial bool) {
	if r.Node == rs.node {
		return
	}
	e := rs.e
	e.stats.revocationsReceived.Add(1)
	switch r.Kind {
	case feed.RevokeAccess, feed.RevokeTokens:
		if a, ok := e.cfg.Tokens.(revocationApplier); ok {
			a.RevokePrincipalAt(r.Principal, r.At)
		} else if t, ok := e.cfg.Tokens.(TokenRevoker); ok {
			t.RevokePrincipal(r.Principal)
		}
		if r.Kind == feed.RevokeAccess && !initial {
			e.revokeLocal(r.Principal)
		}
	case feed.Reauthorize:
		if initial {
			return
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			_, _ = e.reauthorizeLocal(e.ctx, r.Principal)
		}()
	}
}
