// Package replicator elects exactly one replicator per database among an
// app's nodes and runs the singleton work on it: publishing the change log
// to the bus (with natsbus) and pruning the change log (pgfeed's retention).
//
// Run one Replicator on every node. Each tries pg_try_advisory_lock on a
// dedicated connection of its own; the one that gets it leads until its
// session ends (Close, a crash, a network partition, pg_terminate_backend),
// at which point Postgres releases the lock and a standby takes it at its
// next attempt.
//
//	feed, _ := pgfeed.New(pool, pgfeed.Options{})
//	rep, err := replicator.New(replicator.Config{
//		Feed:      feed,
//		Pool:      pool, // connection settings for the lock's own connection
//		Publisher: bus,  // a *natsbus.Bus; nil for the Postgres bus
//	})
//	if err != nil { ... }
//	rep.Start()
//	defer rep.Close()
//	mux.Handle("/readyz", rep.Handler()) // 200 while this node's role is healthy
//
// # Guarantees
//
//   - One leader per change log: the lock is session-level and held on a
//     dedicated pgx.Conn that nothing else uses. A standby never blocks on
//     the lock and never takes it from a live session; it retries with
//     full-jitter backoff (at least every MaxBackoff, so a released lock
//     is taken within about MaxBackoff). A leader pings its connection every
//     CheckInterval and steps down when the ping fails, then waits longer
//     than a standby before trying again, so a standby takes over.
//   - At-least-once feed, exactly-once stream: a new leader resumes after
//     the last change the transport holds. A change read at or below the
//     last published position is counted as skipped and dropped; one read
//     below the previous change of its batch is counted as out of order and
//     dropped. The transport fences a leader that was replaced but has not
//     noticed yet (natsbus publishes conditionally on the stream's last
//     sequence), so two leaders never interleave.
//   - Readiness: Handler answers 200 only on the ready leader; a standby
//     reports not ready (503), as the replicator role is not active there.
//     Status.Ready says whether the role is healthy (a standby that can
//     take over is), and Handler's ?role=any answers 200 for any healthy
//     role, for load-balancer health checks that must keep every node.
//
// With the Postgres bus there is nothing to publish (every node tails the
// change log itself) and the leader only prunes. Do not also call
// pgfeed.Feed.StartPruner (harmless, but redundant).
//
// The change log's sequencer (the session that gives committed changes
// their positions, see package pgfeed) is elected separately, by the feeds
// themselves: Start makes this node's feed a candidate, so with the NATS
// bus, where only the leader tails the feed, every node can still take the
// sequencer role over.
//
// Observability: Status (Role, Terms, LostLock and the publish counters)
// is what tideprom.Replicator reports at scrape time; Config.Tracer starts
// a "tide.replicator.publish" span per published batch.
//
// Defaults: backoff 100 ms to 2 s, lock check every 1 s, prune every
// minute, batches of 1024 changes.
package replicator
