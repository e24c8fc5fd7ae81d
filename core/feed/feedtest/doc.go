// Package feedtest is the conformance suite for feed.Feed implementations:
// the in-memory feed and the Postgres feed run the very same tests, so they
// keep the same semantics.
//
// An implementation supplies a Harness that makes fresh, empty feeds and
// prunes them, and calls Run from a test:
//
//	type harness struct{}
//
//	func (harness) New(t *testing.T, _ ...*feed.Schema) (feed.Feed, feed.Writer) {
//		f := memfeed.New(memfeed.Options{})
//		return f, f
//	}
//
//	func (harness) Prune(t *testing.T, f feed.Feed, through feed.Position) {
//		f.(*memfeed.Feed).Prune(through)
//	}
//
//	func TestConformance(t *testing.T) { feedtest.Run(t, harness{}) }
//
// The suite writes rows of its own resources, Items and Notes (a database
// harness creates their tables), and checks, through the feed.Feed and
// feed.Writer interfaces only:
//
//   - a fresh feed: a stable, non-empty Epoch, Head 0, nothing to replay or
//     snapshot;
//   - the changes of inserts, updates, deletes (tombstones carry the old scope
//     and row; deleting a missing row produces nothing) and moves between
//     scopes (a delete in the old scope, then an upsert in the new one,
//     adjacent in the log), with their Origin;
//   - atomic, ordered multi-mutation Applies, and invalid mutations rejected
//     without writing anything;
//   - strictly increasing positions and a Head that never decreases and covers
//     a write as soon as Apply returns;
//   - Tail: order, limit, blocking until a write, cancellation;
//   - Replay: scope filtering (equality, in, several conditions, none),
//     exclusive After and inclusive Until, paging with a pinned Until;
//   - Snapshot: scope filtering, keyset paging that returns every row once,
//     and consistency with the replay up to the page's position;
//   - Count (feeds implementing feed.Counter): the capped counts of what
//     Replay and Snapshot return, and feed.ErrCursorExpired below the floor;
//   - SampleChanges (feeds implementing feed.Sampler): how many of the
//     given positions hold a change Replay returns, errors for positions
//     out of bounds, and feed.ErrCursorExpired below the floor;
//   - a seeded random workload (set TIDE_SEED to reproduce a failure) whose
//     replays, snapshots and snapshot-then-replay seam, with writes between
//     pages, all converge to a model of the rows;
//   - concurrent writers observed by a tailer that sees every change once;
//   - retention: cursors below the pruned floor get feed.ErrCursorExpired.
//
// Rows are compared as decoded JSON (see JSONEqual), so a feed may format
// JSON its own way. The suite never sleeps and asserts no timings; each
// subtest is bounded by a generous timeout so a feed that never wakes a Tail
// fails instead of hanging. Subtests run in parallel unless the harness
// implements Serial.
package feedtest
