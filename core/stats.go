package core

import (
	"sync/atomic"
)

// counters are the engine's operational counters.
type counters struct {
	tailStarts      atomic.Int64
	tailBatches     atomic.Int64
	connections     atomic.Int64
	subscriptions   atomic.Int64
	replayQueries   atomic.Int64
	replayShared    atomic.Int64
	replayMemory    atomic.Int64
	snapshotQueries atomic.Int64
	snapshotShared  atomic.Int64
	delivered       atomic.Int64
	dropped         atomic.Int64
	resets          atomic.Int64
	backlogs        atomic.Int64

	mutationsApplied  atomic.Int64
	mutationsRejected atomic.Int64

	revocationsPublished atomic.Int64
	revocationsReceived  atomic.Int64

	catchUpsRunning atomic.Int64
	catchUpsWaiting atomic.Int64
	catchUpsQueued  atomic.Int64

	policyRechecks atomic.Int64
	rechecksEnded  atomic.Int64
}

// Stats is a snapshot of an engine's counters.
type Stats struct {
	TailStarts      int64 // times the tailer started: 1 once serving, however often servers start
	TailBatches     int64 // batches read by the tailer
	Connections     int64 // open WebSocket connections
	Subscriptions   int64 // active subscriptions
	ReplayQueries   int64 // replay pages read from the feed
	ReplayShared    int64 // replay pages served by another subscription's read of the same page
	ReplayMemory    int64 // replays served from the engine's memory of recent changes
	SnapshotQueries int64 // snapshot pages read from the feed
	SnapshotShared  int64 // snapshot pages served by another subscription's read of the same page
	Delivered       int64 // live entries queued to sockets
	Dropped         int64 // live batches that desynced a subscription, and channel messages, that did not fit a send queue
	Resets          int64 // reset frames sent
	// BacklogSnapshots counts catch-ups sent as a reset and a snapshot
	// because their backlog was at least as large as their scope.
	BacklogSnapshots int64

	MutationsApplied  int64 // mutations acknowledged (replayed keys included)
	MutationsRejected int64 // mutations rejected

	RevocationsPublished int64 // revocations and re-authorizations stored for the other nodes
	RevocationsReceived  int64 // revocations and re-authorizations of other nodes applied here

	CatchUpsRunning int64 // catch-up feed reads (replay or snapshot pages) running now
	CatchUpsWaiting int64 // catch-up feed reads waiting for a slot now (MaxCatchUps, MaxCatchUpsPerPrincipal)
	CatchUpsQueued  int64 // catch-up feed reads that had to wait for a slot, since start

	PolicyRechecks int64 // policies run again because a resource they depend on changed (Resource.DependsOn)
	RechecksEnded  int64 // subscriptions those re-checks ended
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	s := &e.stats
	return Stats{
		TailStarts:      s.tailStarts.Load(),
		TailBatches:     s.tailBatches.Load(),
		Connections:     s.connections.Load(),
		Subscriptions:   s.subscriptions.Load(),
		ReplayQueries:   s.replayQueries.Load(),
		ReplayShared:    s.replayShared.Load(),
		ReplayMemory:    s.replayMemory.Load(),
		SnapshotQueries: s.snapshotQueries.Load(),
		SnapshotShared:  s.snapshotShared.Load(),
		Delivered:       s.delivered.Load(),
		Dropped:         s.dropped.Load(),
		Resets:          s.resets.Load(),

		BacklogSnapshots: s.backlogs.Load(),

		MutationsApplied:  s.mutationsApplied.Load(),
		MutationsRejected: s.mutationsRejected.Load(),

		RevocationsPublished: s.revocationsPublished.Load(),
		RevocationsReceived:  s.revocationsReceived.Load(),

		CatchUpsRunning: s.catchUpsRunning.Load(),
		CatchUpsWaiting: s.catchUpsWaiting.Load(),
		CatchUpsQueued:  s.catchUpsQueued.Load(),

		PolicyRechecks: s.policyRechecks.Load(),
		RechecksEnded:  s.rechecksEnded.Load(),
	}
}
