package feed

import "context"

// Bus is an engine's source of live changes: a commit-ordered stream of the
// changes of every resource, which one node tails to fan them out to its own
// subscribers. Replays, snapshots and the head always come from the Feed;
// only the live tail comes from the Bus.
//
// Every Feed is a Bus (the Postgres feed is the default bus: its change log
// is the bus and NOTIFY the doorbell). Package natsbus is the other
// implementation: a NATS JetStream stream fed by the one replicator of the
// database.
type Bus interface {
	// Tail has Feed.Tail's contract: it blocks until at least one change
	// after `after` is available, then returns up to limit (positive) of them
	// in position order. A bus may skip changes nobody on this node is
	// interested in (see Interested), never others. A result shorter than
	// limit ends at a commit boundary: it holds every change of its last
	// change's group (feed.Change.Tx), or that change has Tx zero.
	//
	// It returns ErrCursorExpired when it cannot guarantee that every change
	// after `after` is still available (the node fell behind what the bus
	// retains). The engine then resyncs every subscription from its own
	// delivered cursor through Feed.Replay and calls Tail again from the
	// feed's head: a fallback to replay from the feed, never a gap.
	Tail(ctx context.Context, after Position, limit int) ([]Change, error)
}

// Topic is a unit of interest: the changes of one resource for one tenant,
// or all the changes of the resource when All is set. The tenant of a change
// is the value of its resource's first scope column (Schema.Scope[0], so
// Change.Scope[0]); a resource without scope columns has only whole-resource
// topics.
type Topic struct {
	Resource string // Schema.Name
	Tenant   string // canonical text of the first scope column; unused if All
	All      bool   // every tenant of the resource
}

// Interested is implemented by a Bus that delivers only the topics a node
// has subscribers for.
//
// The engine calls AddInterest synchronously when a subscription needs a
// topic no subscription of the node needed before, after the subscription
// joined the fan-out and before its replay high-water is pinned.
// AddInterest returns a position C (at most the feed's head) such that
// every change of the topics above C is returned by Tail calls made after
// AddInterest returned; the engine pins the subscription's high-water at C
// or above, so the changes at or below C come from its replay (Feed.Replay)
// instead. A bus returns there the position of the last message it has
// read, returned or skipped as uninteresting. An error fails the
// subscription; the client retries it.
//
// The engine calls DropInterest when no subscription needs the topics any
// more; the bus may keep delivering them (a lazy shrink is fine, extra
// changes are filtered by the engine).
//
// Calls are serialized by the engine and run concurrently with Tail.
type Interested interface {
	AddInterest(ctx context.Context, topics []Topic) (Position, error)
	DropInterest(topics []Topic)
}
