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
package feed
