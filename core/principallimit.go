package core

import (
	"sync"

	"github.com/tidesync/tide/core/protocol"
)

// principalLimits counts what each named principal holds on this node
// across its connections: connections, subscriptions and queued
// mutations (count and bytes), against the Config bounds per principal.
// Topics and presence entries are counted by the channel hub, under its
// own lock. Like the catch-up slots (catchuplimit.go), a principal's entry
// exists only while it holds something, and the anonymous principal (the
// empty id: many users) is never counted here: it has the per-connection
// bounds only. The counts are of this node; nodes share nothing.
type principalLimits struct {
	cfg *Config

	mu   sync.Mutex
	used map[string]*principalUse
}

// principalUse is what one principal holds on this node.
type principalUse struct {
	conns, subs    int
	muts, mutBytes int
}

func newPrincipalLimits(cfg *Config) *principalLimits {
	return &principalLimits{cfg: cfg, used: map[string]*principalUse{}}
}

// take applies f to id's entry under the lock, creating it if needed and
// forgetting it once it holds nothing. f reports whether it took what was
// asked; an anonymous id always may.
func (l *principalLimits) take(id string, f func(u *principalUse) bool) bool {
	if id == "" {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.used[id]
	if u == nil {
		u = &principalUse{}
		l.used[id] = u
	}
	ok := f(u)
	if *u == (principalUse{}) {
		delete(l.used, id)
	}
	return ok
}

// addConn counts a new connection of id, or refuses it with
// too_many_connections.
func (l *principalLimits) addConn(id string) *protocol.Error {
	n := l.cfg.MaxConnsPerPrincipal
	if l.take(id, func(u *principalUse) bool {
		if u.conns >= n {
			return false
		}
		u.conns++
		return true
	}) {
		return nil
	}
	return protocol.Errorf(protocol.CodeTooManyConnections, "this user has %d connections to this server, the most it allows; retry later", n)
}

// dropConn forgets a connection counted by addConn.
func (l *principalLimits) dropConn(id string) {
	l.take(id, func(u *principalUse) bool { u.conns--; return true })
}

// addSub counts a new subscription of id, or refuses it with
// too_many_subscriptions.
func (l *principalLimits) addSub(id string) *protocol.Error {
	n := l.cfg.MaxSubscriptionsPerPrincipal
	if l.take(id, func(u *principalUse) bool {
		if u.subs >= n {
			return false
		}
		u.subs++
		return true
	}) {
		return nil
	}
	return protocol.Errorf(protocol.CodeTooManySubscriptions, "at most %d subscriptions per user on this server", n)
}

// dropSubs forgets n subscriptions counted by addSub.
func (l *principalLimits) dropSubs(id string, n int) {
	if n > 0 {
		l.take(id, func(u *principalUse) bool { u.subs -= n; return true })
	}
}

// addMutation counts a queued mutation of size bytes of id, or refuses it
// with rate_limited (resend it later).
func (l *principalLimits) addMutation(id string, size int) *protocol.Error {
	n, b := l.cfg.MaxQueuedMutationsPerPrincipal, l.cfg.MaxQueuedMutationBytesPerPrincipal
	if l.take(id, func(u *principalUse) bool {
		if u.muts >= n || u.mutBytes+size > b {
			return false
		}
		u.muts++
		u.mutBytes += size
		return true
	}) {
		return nil
	}
	return protocol.Errorf(protocol.CodeRateLimited, "too many mutations of this user are waiting on this server (at most %d, or %d KiB); resend later with the same key", n, b>>10)
}

// dropMutations forgets n queued mutations of size bytes in all.
func (l *principalLimits) dropMutations(id string, n, size int) {
	if n > 0 {
		l.take(id, func(u *principalUse) bool { u.muts -= n; u.mutBytes -= size; return true })
	}
}
