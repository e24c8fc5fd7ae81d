package tidetest

import (
	"sort"
	"sync"
	"time"
)

// Clock is a fake clock that moves only when a test calls Advance. It has
// the shape of core.Clock (Now and AfterFunc), so it can be the engine's
// Config.Clock, and its Now method value is a func() time.Time, as
// authz.KeyringConfig.Now takes. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*timer
}

type timer struct {
	at  time.Time
	seq uint64 // creation order, to run timers due at the same time in order
	f   func()
}

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start}
}

// Now returns the clock's time. It does not block.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arranges for f to run once the clock has moved d past now, and
// returns a function that cancels the call, reporting whether it did (false
// if f already ran or was cancelled). f never runs inside AfterFunc, even
// for d <= 0: a timer is run by the Advance that makes it due (Advance(0)
// runs the ones due already).
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.timers {
			if x == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Advance moves the clock forward by d and runs every timer due by then, on
// the calling goroutine, one after another in the order of their due times
// (then of their creation); it blocks until they have returned. Timers
// that the callbacks arm and that are due already run too, before Advance
// returns. Callbacks may call the Clock.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		t := c.popDue()
		if t == nil {
			return
		}
		t.f()
	}
}

// popDue removes and returns the earliest timer due, or nil.
func (c *Clock) popDue() *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	sort.SliceStable(c.timers, func(i, j int) bool {
		a, b := c.timers[i], c.timers[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		return a.seq < b.seq
	})
	if len(c.timers) == 0 || c.timers[0].at.After(c.now) {
		return nil
	}
	t := c.timers[0]
	c.timers = c.timers[1:]
	return t
}
