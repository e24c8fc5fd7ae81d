// Package natsbus is tide's NATS JetStream bus: the way changes travel
// between app nodes when the Postgres bus (every node tailing the change
// log) is not enough. One elected replicator per database (package
// replicator) publishes the change log into a JetStream stream; every node
// consumes only the subjects its subscribers need and fans out locally.
// Replays, snapshots and the head still come from Postgres.
//
//	nc, _ := nats.Connect(os.Getenv("NATS_URL"))
//	feed, _ := pgfeed.New(pool, pgfeed.Options{})
//	bus, err := natsbus.New(ctx, nc, feed, natsbus.Options{}) // creates or updates the stream
//	if err != nil { ... }
//	engine, _ := core.New(core.Config{Feed: feed, Bus: bus})
//	// ... core.Register, feed.Migrate as usual ...
//	rep, _ := replicator.New(replicator.Config{Feed: feed, Pool: pool, Publisher: bus})
//	rep.Start()
//	defer rep.Close()
//	mux.Handle("/readyz", rep.Handler())
//
// # Stream and messages
//
// The stream (Options.Stream, default "TIDE_CHANGES") holds the subjects
// "<prefix>.change.>" with limits retention (MaxAge 24 h, MaxMsgs 10,000,000,
// MaxBytes 4 GiB by default: the oldest messages go first) and a 2-minute
// de-duplication window. Each change is one message under
// "<prefix>.change.<resource>.<tenant>", the tenant being the value of the
// resource's first scope column ("" without scope columns). The resource
// and the tenant are each escaped into one subject token: ASCII letters,
// digits, '-' and '_' stand for themselves, every other byte is '%' and two
// upper-case hex digits, "" is "%" ("p7" stays "p7", "acme.com" becomes
// "acme%2Ecom"), and a value whose escaped form exceeds 128 bytes becomes
// '#' and the first 32 hex digits of its SHA-256. Headers: Nats-Msg-Id
// "<epoch>.<pos>" (JetStream de-duplication), Tide-Epoch, Tide-Pos,
// Tide-Prev (the previous change's position) and Tide-Base (where the chain
// of messages started), see HeaderEpoch. The body is the change as JSON:
//
//	{"pos":42,"resource":"todos","op":"upsert","key":"t1",
//	 "scope":["p7"],"row":{...},"origin":"dev-1",
//	 "prev_known":true,"prev":{...},"tx":981,"rest":2}
//
// op is "upsert" or "delete"; row (the new row, or the old one of a delete)
// and origin are left out when empty, and so are prev_known and prev: the
// feed's record of an upsert's previous version (feed.Change.PrevKnown and
// Prev), carried as the feed recorded it; and tx and rest: the change's
// commit group (feed.Change.Tx) and how many changes of that group follow
// it, at the next stream sequences (a message without tx is a group of its
// own).
//
// # Guarantees
//
//   - Ordered and gap-free: the stream holds the change log in position
//     order, each change once. Every publish carries the stream sequence
//     the publisher expects to be last, so a failed publish is never
//     followed by a stored later one, and a replicator that lost the
//     election is refused (fenced) instead of interleaving; Nats-Msg-Id
//     de-duplicates what a failover re-sends within the window.
//   - Interest: a node's consumer is filtered to the (resource, tenant)
//     pairs its subscriptions need (feed.Interested). When the interest
//     grows, the consumer is replaced by one with the new filter starting
//     right after the last message Tail returned; messages fetched but not
//     returned are read again. So nothing of a new topic after the last
//     change the node dispatched is skipped, and what came before is at or
//     below the new subscription's replay high-water, covered by its
//     replay. Shrinking is lazy.
//   - Never a silent gap: a node that cannot prove it has every change of
//     its topics after the position it was asked for returns
//     feed.ErrCursorExpired, and the engine resyncs every subscription from
//     its own cursor through Postgres. That happens when the stream's
//     retention dropped messages the node had not read (a jump in stream
//     sequences past the stream's first sequence), when a position is
//     older than the stream holds, and when a chain started after what the
//     node knows (the stream was found empty, or the replicator had to
//     restart past Postgres's retention).
//   - Whole commits: the replicator publishes whole commit groups, and Tail
//     ends a batch at a commit boundary: a batch whose last group goes on
//     waits until the stream holds the rest of it and the consumer has
//     delivered every message of its filter up to there; a full batch
//     leaves its trailing group for the next read. So a node never
//     delivers part of a transaction.
//   - Disconnects: a consumer that misses heartbeats, is deleted, or
//     delivers with a gap (messages lost while reconnecting) is replaced by
//     one starting right after the last message returned.
//
// nats-server 2.10 or later filters several subjects per consumer. Older
// servers (2.9) take one filter subject: a node then consumes the narrowest
// single subject covering its interest ("<resource>.*", or everything) and
// drops the rest itself (Stats.Filtered counts them); correctness is the
// same.
package natsbus
