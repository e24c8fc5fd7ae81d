// Package memfeed is tide's embedded in-memory change feed: the default for
// `go run`, demos and unit tests, when no database is configured.
//
// A Feed holds the current rows of every resource written through it and an
// append-only log of the changes that produced them. It implements
// feed.Feed and feed.Writer with the same semantics as the Postgres feed; both
// pass the conformance suite in package feedtest.
//
//	f := memfeed.New(memfeed.Options{}) // retains the newest 1,000,000 changes
//	err := f.Apply(ctx, "device-1", feed.Mutation{
//		Schema: todos, Op: feed.OpUpsert,
//		Key: "t1", Scope: []string{"p7"}, Row: json.RawMessage(`{"id":"t1","project_id":"p7"}`),
//	})
//	changes, err := f.Tail(ctx, 0, 100) // blocks until a change is committed
//
// Guarantees:
//
//   - Positions are assigned at commit under one lock: head+1, head+2, …, so
//     they are contiguous, commit-ordered and totally ordered. Head never
//     decreases and covers a write as soon as Apply returns.
//   - Apply validates every mutation before writing anything, then applies
//     them atomically and in order. An upsert that changes a row's scope is a
//     delete in the old scope followed by an upsert in the new one, at
//     consecutive positions; a delete is a tombstone carrying the old scope and
//     row; deleting a missing row produces no change.
//   - Tail wakes on commit (no polling). Returned slices are fresh copies;
//     the changes in them share row bytes with the feed and must not be
//     modified.
//   - The log retains at most Options.MaxChanges changes; Prune drops more.
//     Reading after a position below Floor yields feed.ErrCursorExpired,
//     never a silent gap.
//   - Snapshot pages are consistent: each is read under the lock at the head
//     of that moment, which is the page's Pos.
//
// Nothing is persisted: a new Feed has a new random Epoch, so cursors from a
// previous process are recognised as unusable.
package memfeed
