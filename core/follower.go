package core

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// Re-check bounds. A round re-checks what the changes dispatched since the
// previous round concern; past maxTargets distinct targets of one resource
// it re-checks all of that resource's subscriptions instead, so a burst of
// changes costs one scan, not one per change.
const (
	maxTargets      = 256
	recheckWorkers  = 4                // policies run at once by the re-checks of one node
	recheckDeadline = 10 * time.Second // a re-check's policy that takes longer denies (unavailable)
)

// follower re-runs the policies of subscriptions whose resources depend on
// other resources (Resource.DependsOn) when the tailer dispatches changes of
// those. The tailer only records what to re-check (note); one goroutine the
// engine owns does it (run), so a slow policy never holds up live changes.
// Changes noted while a round runs are coalesced into the next one.
type follower struct {
	e     *Engine
	edges atomic.Pointer[map[string][]*depEdge] // by dependency name; replaced whole under Engine.mu
	wake  chan struct{}                         // capacity 1: a round is due
	rate  tokenBucket

	mu     sync.Mutex
	pend   recheckSet
	busy   bool          // a round is running
	done   feed.Position // every change noted at or below it has been re-checked
	waitCh chan struct{} // closed when done advances or the follower goes idle; nil without waiters
}

// recheckSet is what one round re-checks.
type recheckSet struct {
	res  map[*resource]*resRecheck
	subs map[*subscription]struct{} // subscriptions whose policy ran before a change they may depend on was noted
	upTo feed.Position              // the last position noted
}

type resRecheck struct {
	all     bool // every subscription of the resource
	targets map[string]recheckTarget
}

func (rs *recheckSet) empty() bool { return len(rs.res) == 0 && len(rs.subs) == 0 }

func newFollower(e *Engine) *follower {
	return &follower{e: e, wake: make(chan struct{}, 1), rate: newTokenBucket(e.cfg.RecheckRate)}
}

// addEdges records the dependencies of a newly registered resource. The
// caller holds Engine.mu, which serializes writers of edges.
func (f *follower) addEdges(edges []*depEdge) {
	if len(edges) == 0 {
		return
	}
	m := map[string][]*depEdge{}
	if old := f.edges.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	for _, ed := range edges {
		if len(m[ed.dep.schema.Name]) == 0 {
			f.e.hub.followInterest(ed.dep.schema)
		}
		m[ed.dep.schema.Name] = append(slices.Clip(m[ed.dep.schema.Name]), ed)
	}
	f.edges.Store(&m)
}

// started is called by the tailer once it knows its start position, before
// any subscription joins the hub. A subscription authorized before it may
// have missed a change committed before pos: every dependent resource's
// generation moves, so such a subscription is checked again once it joins.
func (f *follower) started(ctx context.Context, pos feed.Position) {
	f.mu.Lock()
	f.done, f.pend.upTo = pos, pos
	f.broadcastLocked()
	f.mu.Unlock()
	m := f.edges.Load()
	if m == nil {
		return
	}
	f.bumpAll(*m)
	// The followed resources' topics, early. A failure (or a bus slower
	// than this) is retried by the next subscription, which needs them
	// before it reads its high-water anyway.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = f.e.syncInterest(ctx)
}

func (f *follower) bumpAll(m map[string][]*depEdge) {
	for _, eds := range m {
		for _, ed := range eds {
			ed.dependent.followGen.Add(1)
		}
	}
}

// covered is told of topics a bus now delivers from some position on:
// changes of a followed resource before it were not dispatched here.
func (f *follower) covered(topics []feed.Topic) {
	m := f.edges.Load()
	if m == nil {
		return
	}
	for _, t := range topics {
		for _, ed := range (*m)[t.Resource] {
			ed.dependent.followGen.Add(1)
		}
	}
}

// note records the re-checks a dispatched batch calls for. It runs on the
// tailer's goroutine after the batch's fan-out and never blocks on a
// policy.
func (f *follower) note(changes []feed.Change) {
	m := f.edges.Load()
	relevant := false
	f.mu.Lock()
	if m != nil {
		for i := range changes {
			c := &changes[i]
			for _, ed := range (*m)[c.Resource] {
				relevant = true
				ed.dependent.followGen.Add(1)
				f.pend.addChange(ed, c)
			}
		}
	}
	f.pend.upTo = changes[len(changes)-1].Pos
	f.settleLocked()
	f.mu.Unlock()
	if relevant {
		f.signal()
	}
}

// skipped is told that the tailer jumped to pos over changes it did not
// dispatch: every subscription of every dependent resource is re-checked.
func (f *follower) skipped(pos feed.Position) {
	m := f.edges.Load()
	f.mu.Lock()
	if m != nil {
		f.bumpAll(*m)
		for _, eds := range *m {
			for _, ed := range eds {
				f.pend.resOf(ed.dependent).all = true
			}
		}
	}
	f.pend.upTo = pos
	f.settleLocked()
	f.mu.Unlock()
	f.signal()
}

// joined is called once s is in the hub. If a change s's policy may depend
// on was noted since the policy ran (s.followGen, over all its resources), the round that handled
// it may not have seen s: s is re-checked.
func (f *follower) joined(s *subscription) {
	if s.res == nil || s.scopes().followGen() == s.followGen {
		return
	}
	f.mu.Lock()
	if f.pend.subs == nil {
		f.pend.subs = map[*subscription]struct{}{}
	}
	f.pend.subs[s] = struct{}{}
	f.mu.Unlock()
	f.signal()
}

func (rs *recheckSet) resOf(r *resource) *resRecheck {
	if rs.res == nil {
		rs.res = map[*resource]*resRecheck{}
	}
	rr := rs.res[r]
	if rr == nil {
		rr = &resRecheck{targets: map[string]recheckTarget{}}
		rs.res[r] = rr
	}
	return rr
}

// addChange records what a change of ed.dep concerns.
func (rs *recheckSet) addChange(ed *depEdge, c *feed.Change) {
	rr := rs.resOf(ed.dependent)
	if rr.all {
		return
	}
	t, key, ok := ed.target(c)
	if _, dup := rr.targets[key]; ok && dup {
		return
	}
	if !ok || len(rr.targets) >= maxTargets {
		rr.all, rr.targets = true, nil
		return
	}
	rr.targets[key] = t
}

func (f *follower) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// settleLocked advances done when nothing is left to re-check. The caller
// holds f.mu.
func (f *follower) settleLocked() {
	if !f.busy && f.pend.empty() && f.done < f.pend.upTo {
		f.done = f.pend.upTo
		f.broadcastLocked()
	}
}

func (f *follower) broadcastLocked() {
	if f.waitCh != nil {
		close(f.waitCh)
		f.waitCh = nil
	}
}

// run re-checks, round after round, what note, joined and skipped
// recorded. The caller has done e.wg.Add(1).
func (f *follower) run() {
	defer f.e.wg.Done()
	ctx := f.e.ctx
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		}
		for ctx.Err() == nil {
			f.mu.Lock()
			if f.pend.empty() {
				f.busy = false
				f.settleLocked()
				f.broadcastLocked()
				f.mu.Unlock()
				break
			}
			round := f.pend
			f.pend = recheckSet{upTo: round.upTo}
			f.busy = true
			f.mu.Unlock()
			f.recheck(ctx, round)
			f.mu.Lock()
			f.done = max(f.done, round.upTo)
			f.broadcastLocked()
			f.mu.Unlock()
		}
	}
}

// recheck runs one round: it finds the subscriptions the round concerns and
// runs their policies again, recheckWorkers at a time and at most
// Config.RecheckRate per second, ending those now denied.
func (f *follower) recheck(ctx context.Context, round recheckSet) {
	subs := round.subs
	if subs == nil {
		subs = map[*subscription]struct{}{}
	}
	for r, rr := range round.res {
		f.e.hub.concerned(r.schema.Name, rr, subs)
	}
	work := make(chan *subscription)
	var wg sync.WaitGroup
	for range min(recheckWorkers, len(subs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				f.recheckOne(ctx, s)
			}
		}()
	}
	for s := range subs {
		if s.isClosed() {
			continue
		}
		if !f.rate.wait(ctx) {
			break
		}
		work <- s
	}
	close(work)
	wg.Wait()
}

// recheckOne runs s's policy again and ends s if it now denies, as
// Reauthorize does. A policy that outlasts recheckDeadline denies as
// unavailable: tide fails closed, and the client retries.
func (f *follower) recheckOne(ctx context.Context, s *subscription) {
	e := f.e
	e.stats.policyRechecks.Add(1)
	pctx, cancel := context.WithTimeout(ctx, recheckDeadline)
	defer cancel()
	ended, err := s.c.recheckSub(pctx, s, s.principal())
	if err != nil && ctx.Err() == nil && !s.isClosed() {
		s.c.failSub(s, fmt.Errorf("policy re-check: %w", err))
		ended = true
	}
	if ended {
		e.stats.rechecksEnded.Add(1)
	}
}

// AwaitRechecks blocks until this node has re-checked the subscriptions
// that changes of followed resources (Resource.DependsOn) at or below pos
// concern: the tailer has dispatched pos, and every re-check those
// changes called for has run. Pass the position of the change (with the
// Postgres feed and the default bus, the feed's Head read after the write
// commits will do). It returns ctx's error if ctx ends first, and
// ErrDraining once Shutdown has begun. It is for tests and for an app that
// must know that access is gone before it answers; nothing needs it for
// the re-checks to happen. Safe for concurrent use.
func (e *Engine) AwaitRechecks(ctx context.Context, pos feed.Position) error {
	if !e.start() {
		return ErrDraining
	}
	f := e.follow
	for {
		f.mu.Lock()
		if f.done >= pos && !f.busy && f.pend.empty() {
			f.mu.Unlock()
			return nil
		}
		if f.waitCh == nil {
			f.waitCh = make(chan struct{})
		}
		ch := f.waitCh
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.ctx.Done():
			return ErrDraining
		}
	}
}

// tokenBucket paces the re-checks' policy runs: rate per second, bursts up
// to rate. It reads the system clock, as it paces work, not protocol time.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
}

func newTokenBucket(rate int) tokenBucket {
	return tokenBucket{rate: float64(rate), tokens: float64(rate), last: time.Now()}
}

// wait takes a token, waiting for one if none is left. It reports false if
// ctx ended first.
func (b *tokenBucket) wait(ctx context.Context) bool {
	for {
		b.mu.Lock()
		now := time.Now()
		b.tokens = min(b.rate, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
		if b.tokens >= 1 {
			b.tokens--
			b.mu.Unlock()
			return true
		}
		d := time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
		b.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}
