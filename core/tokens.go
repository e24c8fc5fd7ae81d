package core

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidesync/tide/core/protocol"
)

// TokenRevoker is implemented by token verifiers that can refuse the tokens
// already issued to a principal; authz.Keyring does. Engine.Revoke calls it,
// so a revoked principal cannot come back with a token it still holds.
type TokenRevoker interface {
	RevokePrincipal(principalID string)
}

// refreshLead is how long before its token expires a connection is asked for
// a new one: a fifth of the token's remaining lifetime, but at least 30 s
// (or half of it, if less than a minute is left), so a client has time to
// fetch a token even over a slow network, without asking every few
// seconds, and a short-lived token is not asked for again the moment it
// arrives.
func refreshLead(remaining time.Duration) time.Duration {
	if remaining <= 0 {
		return 0
	}
	return max(remaining/5, min(30*time.Second, remaining/2))
}

// tokenTimers tracks the token expiry of every connection that has one, in
// one heap ordered by the next deadline (the refresh request, then the
// expiry), with one timer for the whole engine armed at the earliest
// deadline. A connection without a token costs nothing; one with a token
// costs a heap entry, never a goroutine or a timer of its own. The engine's
// pinger tick was the other candidate, but its period (the heartbeat, 10 s
// by default) is too coarse for a deadline that must be met to the second.
//
// It also counts revocations (see Engine.Revoke and conn.hello).
type tokenTimers struct {
	clock   Clock
	revokes atomic.Uint64 // Revoke calls so far

	mu     sync.Mutex
	items  expiryHeap
	byConn map[*conn]*expiryItem
	stop   func() bool // cancels the armed timer; nil if none
	at     time.Time   // when the armed timer fires
	gen    uint64      // identifies the armed timer
	closed bool        // the engine shut down
}

type expiryItem struct {
	c         *conn
	refreshAt time.Time
	expiry    time.Time
	asked     bool // refresh-token was sent; the next deadline is expiry
	idx       int
}

func (it *expiryItem) due() time.Time {
	if it.asked {
		return it.expiry
	}
	return it.refreshAt
}

func newTokenTimers(ctx context.Context, clock Clock) *tokenTimers {
	t := &tokenTimers{clock: clock, byConn: map[*conn]*expiryItem{}}
	context.AfterFunc(ctx, t.close)
	return t
}

// schedule sets (or, with a zero expiry, clears) the token expiry of c. A
// new expiry replaces the previous one and re-arms the refresh request.
func (t *tokenTimers) schedule(c *conn, expiry time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	it := t.byConn[c]
	if expiry.IsZero() {
		if it != nil {
			heap.Remove(&t.items, it.idx)
			delete(t.byConn, c)
			t.armLocked()
		}
		return
	}
	refreshAt := expiry.Add(-refreshLead(expiry.Sub(t.clock.Now())))
	if it == nil {
		it = &expiryItem{c: c}
		t.byConn[c] = it
		it.refreshAt, it.expiry = refreshAt, expiry
		heap.Push(&t.items, it)
	} else {
		it.refreshAt, it.expiry, it.asked = refreshAt, expiry, false
		heap.Fix(&t.items, it.idx)
	}
	t.armLocked()
}

// forget drops c, whose connection ended.
func (t *tokenTimers) forget(c *conn) { t.schedule(c, time.Time{}) }

// armLocked makes the timer fire at the earliest deadline.
func (t *tokenTimers) armLocked() {
	if len(t.items) == 0 {
		if t.stop != nil {
			t.stop()
			t.stop, t.at = nil, time.Time{}
		}
		return
	}
	next := t.items[0].due()
	if t.stop != nil && t.at.Equal(next) {
		return
	}
	if t.stop != nil {
		t.stop()
	}
	t.gen++
	gen := t.gen
	t.at = next
	t.stop = t.clock.AfterFunc(next.Sub(t.clock.Now()), func() { t.fire(gen) })
}

// fire handles every deadline that has passed: it asks for a refresh, or
// ends the connection whose token expired.
func (t *tokenTimers) fire(gen uint64) {
	type ask struct {
		c         *conn
		expiresIn time.Duration
	}
	var asks []ask
	var expired []*conn
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if gen == t.gen {
		t.stop, t.at = nil, time.Time{}
	}
	now := t.clock.Now()
	for len(t.items) > 0 && !t.items[0].due().After(now) {
		it := t.items[0]
		if !it.asked {
			it.asked = true
			heap.Fix(&t.items, 0)
			asks = append(asks, ask{it.c, it.expiry.Sub(now)})
			continue
		}
		heap.Pop(&t.items)
		delete(t.byConn, it.c)
		expired = append(expired, it.c)
	}
	t.armLocked()
	t.mu.Unlock()
	for _, a := range asks {
		a.c.sendFrame(protocol.RefreshToken(int(max(a.expiresIn, 0) / time.Second)))
	}
	for _, c := range expired {
		c.sendError("", protocol.Errorf(protocol.CodeUnauthenticated, "the token expired"))
		c.closeAfterFlush(protocol.ClosePolicy, "token expired")
	}
}

func (t *tokenTimers) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.stop != nil {
		t.stop()
	}
	t.items, t.byConn, t.stop = nil, nil, nil
}

// expiryHeap orders items by their next deadline.
type expiryHeap []*expiryItem

func (h expiryHeap) Len() int { return len(h) }

func (h expiryHeap) Less(i, j int) bool { return h[i].due().Before(h[j].due()) }

func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *expiryHeap) Push(x any) {
	it := x.(*expiryItem)
	it.idx = len(*h)
	*h = append(*h, it)
}

func (h *expiryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
