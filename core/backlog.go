package core

import (
	"github.com/tidesync/tide/core/feed"
)

// backlogProbe is the smallest backlog the engine may send as a snapshot
// instead: a client resuming fewer positions behind the high-water, or
// whose scope has fewer changes in between, is always replayed (cheap
// anyway, and the client keeps its copy).
const backlogProbe = 10_000

// backlogCountCap bounds the changes counted to compare a backlog with its
// scope: a larger backlog counts as this large, and is sent as a snapshot
// if the scope has at most this many rows.
const backlogCountCap = 1 << 22

// backlogLarger reports whether the subscription's backlog in (from, hw]
// holds at least as many changes as its scopes hold rows (and at least
// backlogProbe), so that sending the rows (a reset, then a snapshot) costs
// less than replaying the changes: a replay reads every change of the
// backlog, a snapshot every row of the scope once.
//
// It asks only when hw is at least backlogProbe positions past from, and
// only a feed that implements feed.Counter, whose counts are capped: the
// changes at min(hw-from, backlogCountCap), then the rows at one more than
// the changes found, so neither count reads more than the replay would. A
// feed that cannot count, or a count that fails, replays.
func (s *subscription) backlogLarger(from, hw feed.Position) (bool, error) {
	e := s.c.e
	counter, ok := e.feed.(feed.Counter)
	if !ok || hw < from || hw-from < backlogProbe {
		return false, nil
	}
	release, err := e.acquireCatchUp(s.ctx, s.principal())
	if err != nil {
		return false, err
	}
	defer release()
	ts := s.scopes()
	maxChanges := int(min(hw-from, backlogCountCap))
	changes := 0
	for _, t := range ts {
		n, err := counter.Count(s.ctx, feed.CountQuery{Scope: t.scope, After: from, Until: hw, MaxChanges: maxChanges})
		if err != nil {
			return false, err
		}
		changes += n.Changes
	}
	if changes < backlogProbe {
		return false, nil
	}
	rows := 0
	for _, t := range ts {
		n, err := counter.Count(s.ctx, feed.CountQuery{Scope: t.scope, MaxRows: changes + 1 - rows})
		if err != nil {
			return false, err
		}
		if rows += n.Rows; rows > changes {
			return false, nil
		}
	}
	e.stats.backlogs.Add(1)
	return true, nil
}
