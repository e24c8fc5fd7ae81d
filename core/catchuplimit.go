package core

import (
	"context"
	"sync"

	"github.com/tidesync/tide/authz"
)

// catchUpLimiter bounds the feed reads of catch-up (replay and snapshot
// pages, of sockets and polls alike) running at once: at most
// Config.MaxCatchUps on the node and Config.MaxCatchUpsPerPrincipal for one
// principal. A read over the limit waits its turn; none is refused. A read
// first takes one of its principal's slots, then one of the node's, so a
// principal with many subscriptions queues behind its own reads and never
// holds more than its share of the node's: the others' reads still run.
// The anonymous principal is many users, so it has only the node's limit.
// Replays served from the engine's memory of recent changes take no slot.
type catchUpLimiter struct {
	node         chan struct{}
	perPrincipal int

	mu         sync.Mutex
	principals map[string]*principalSlots
}

// principalSlots are one principal's slots, kept while someone uses them.
type principalSlots struct {
	sem   chan struct{}
	users int
}

func newCatchUpLimiter(node, perPrincipal int) *catchUpLimiter {
	return &catchUpLimiter{node: make(chan struct{}, node), perPrincipal: perPrincipal, principals: map[string]*principalSlots{}}
}

// acquire waits for a slot for p and returns the function that frees it, or
// ctx's error.
func (e *Engine) acquireCatchUp(ctx context.Context, p authz.Principal) (func(), error) {
	l := e.limits
	var ps *principalSlots
	if !p.IsAnonymous() {
		l.mu.Lock()
		ps = l.principals[p.ID]
		if ps == nil {
			ps = &principalSlots{sem: make(chan struct{}, l.perPrincipal)}
			l.principals[p.ID] = ps
		}
		ps.users++
		l.mu.Unlock()
	}
	queued := false
	wait := func(sem chan struct{}) error {
		select {
		case sem <- struct{}{}:
			return nil
		default:
		}
		if !queued {
			queued = true
			e.stats.catchUpsQueued.Add(1)
		}
		e.stats.catchUpsWaiting.Add(1)
		defer e.stats.catchUpsWaiting.Add(-1)
		select {
		case sem <- struct{}{}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := func(holdsPrincipal bool) {
		if ps == nil {
			return
		}
		if holdsPrincipal {
			<-ps.sem
		}
		l.mu.Lock()
		if ps.users--; ps.users == 0 {
			delete(l.principals, p.ID)
		}
		l.mu.Unlock()
	}
	if ps != nil {
		if err := wait(ps.sem); err != nil {
			done(false)
			return nil, err
		}
	}
	if err := wait(l.node); err != nil {
		done(true)
		return nil, err
	}
	e.stats.catchUpsRunning.Add(1)
	return func() {
		e.stats.catchUpsRunning.Add(-1)
		<-l.node
		done(true)
	}, nil
}
