package core

import (
	"context"
	"sync"

	"github.com/tidesync/tide/core/feed"
)

// busState is the engine's live source (Config.Bus, or the feed itself) and,
// when the bus delivers only what a node is interested in
// (feed.Interested), the bookkeeping of that interest.
type busState struct {
	src      feed.Bus
	interest *interest // nil unless src implements feed.Interested
}

func newBusState(b feed.Bus, f feed.Feed) busState {
	if b == nil {
		return busState{src: f}
	}
	st := busState{src: b}
	if ib, ok := b.(feed.Interested); ok {
		st.interest = &interest{bus: ib, counts: map[feed.Topic]int{}, adds: map[feed.Topic]struct{}{}, drops: map[feed.Topic]struct{}{}}
	}
	return st
}

// interest counts, per topic, the hub's scope groups that need it, and
// tells the bus when a topic is needed for the first time or no longer.
//
// The counts change under the hub's write lock (a group is created or
// deleted); the bus is told outside it, by syncInterest, which every new
// subscription runs after joining the hub and before it reads its replay
// high-water. Calls to the bus are serialized by flushMu, and a
// subscription whose topic another subscription has just added waits for
// that add (or makes it itself) before its high-water is read.
type interest struct {
	bus     feed.Interested
	flushMu sync.Mutex // serializes calls to bus

	mu     sync.Mutex
	counts map[feed.Topic]int      // groups needing each topic
	adds   map[feed.Topic]struct{} // needed, not yet added to the bus
	drops  map[feed.Topic]struct{} // no longer needed, not yet dropped from the bus
}

// topicsOf returns the topics a scope needs: one per value of a condition on
// the resource's first scope column, or the whole resource.
func topicsOf(sc feed.Scope) []feed.Topic {
	name := sc.Schema.Name
	if len(sc.Conds) == 0 || sc.Conds[0].Col != 0 {
		return []feed.Topic{{Resource: name, All: true}}
	}
	out := make([]feed.Topic, len(sc.Conds[0].Values))
	for i, v := range sc.Conds[0].Values {
		out[i] = feed.Topic{Resource: name, Tenant: v}
	}
	return out
}

// syncInterest tells the bus about topics added or dropped since the last
// call. A subscription calls it after joining the hub and before it pins
// its replay high-water: from then on the bus delivers its topics after the
// position it returned, which the high-water covers.
func (e *Engine) syncInterest(ctx context.Context) error {
	in := e.bus.interest
	if in == nil {
		return nil
	}
	in.flushMu.Lock()
	defer in.flushMu.Unlock()
	in.mu.Lock()
	adds, drops := keysOf(in.adds), keysOf(in.drops)
	clear(in.adds)
	clear(in.drops)
	in.mu.Unlock()
	if len(drops) > 0 {
		in.bus.DropInterest(drops)
	}
	if len(adds) == 0 {
		return nil
	}
	// The bus delivers the topics' changes above the position it returns;
	// those at or below it must come from the replay, so the high-water
	// must cover it. A high-water read from the feed's head after this
	// returns does (the bus's position was read from the published log, so
	// it is at most the head). Still under flushMu, so no subscription that
	// needs these topics pins its high-water before this. The engine's
	// memory of recent changes lacks these topics' past: advance makes it
	// start over from covered, so replays before it read the feed.
	covered, err := in.bus.AddInterest(ctx, adds)
	if err == nil {
		e.hub.advance(covered)
		e.follow.covered(adds)
	}
	if err != nil {
		// The bus does not have them: whoever needs them next retries.
		in.mu.Lock()
		for _, t := range adds {
			if _, ok := in.drops[t]; ok {
				delete(in.drops, t)
			} else if in.counts[t] > 0 {
				in.adds[t] = struct{}{}
			}
		}
		in.mu.Unlock()
	}
	return err
}

// joinHub registers s with the hub and makes sure the bus delivers its
// topics before the caller reads the replay high-water.
func (e *Engine) joinHub(s *subscription) error {
	e.hub.add(s)
	if err := e.syncInterest(s.ctx); err != nil {
		e.hub.remove(s)
		return err
	}
	e.follow.joined(s)
	return nil
}

func keysOf(m map[feed.Topic]struct{}) []feed.Topic {
	if len(m) == 0 {
		return nil
	}
	out := make([]feed.Topic, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	return out
}
