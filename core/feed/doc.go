// Package feed defines tide's change feed: the commit-ordered log of row
// changes that every subscription is replayed from and fed by.
//
// A Feed is the source of truth for positions. It captures changes to the
// declared resources (in the writer's own transaction, so nothing is lost),
// hands them to the engine's tailer in position order, replays the changes of
// one scope after a cursor up to a pinned high-water, and reads a snapshot of a
// scope's current rows for a subscriber that has no cursor.
//
// Two implementations ship with tide: package memfeed, the embedded in-memory
// default, and the Postgres feed. Both run the conformance suite in package
// feedtest, so they keep the same semantics:
//
//   - Positions are totally ordered and commit-ordered: once a reader has seen
//     position p, no change at or below p ever appears later. Positions need
//     not be contiguous.
//   - A delete is a tombstone change carrying the key and the scope of the row
//     that was deleted.
//   - An update that changes a scope column is two changes at consecutive
//     positions: a delete in the old scope, then an upsert in the new one.
//   - A cursor older than what the feed retains yields ErrCursorExpired, never
//     a silent gap.
//
// The types here carry no Go-struct reflection; package core turns a user's
// struct into a Schema and rows into JSON before they reach a feed.
//
// # The tree
//
// This package is the contract. Beside it: memfeed and pgfeed (the feeds),
// feedtest (the conformance suite), natsbus (a Bus over NATS JetStream for
// several nodes) and replicator (the one-per-database process that publishes
// a Postgres change log to a bus).
//
// # Writing a feed
//
// Implement Feed in a package of its own (under core/feed, for one that
// ships with tide). Implement Writer if the engine may write rows through
// it (Table.Upsert), Transactor if it can run server mutators (and
// WriteLister on its Tx, or principals with token grants may not run
// them), and CaptureChecker if a declaration can be left uncaptured. Then
// run the
// conformance suite from the package's tests, with a Harness that makes a
// fresh, empty feed per case and prunes it on request:
//
//	type harness struct{}
//
//	func (harness) New(t *testing.T, s ...*feed.Schema) (feed.Feed, feed.Writer) { … }
//	func (harness) Prune(t *testing.T, f feed.Feed, through feed.Position)      { … }
//
//	func TestConformance(t *testing.T) { feedtest.Run(t, harness{}) }
//
// It checks commit order under concurrent writers, moves and deletes,
// replay paging and the pinned high-water, snapshots, retention and
// ErrCursorExpired, the same way for every feed.
//
// Optionally, a feed records what an upsert's row was before it
// (Change.PrevKnown and Change.Prev), so that a row filter's hidden upsert
// is a delete only for the subscribers who may have seen the version
// before. It needs to keep only the columns of Schema.PrevColumns (the
// columns the resource's row filter reads), and nothing for a schema whose
// PrevColumns is empty; the engine treats a Prev that lacks one of them as
// seen by everyone. The NATS bus carries both fields as the feed set them.
package feed
