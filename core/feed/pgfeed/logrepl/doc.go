// Package logrepl reads a Postgres database's changes from its logical
// replication stream: the second way tide captures changes, beside
// pgfeed's triggers. Postgres decodes its own write-ahead log with the
// built-in pgoutput plugin and streams every committed transaction on the
// published tables, whole and in commit order, to one consumer per
// replication slot. Nothing runs in the app's transactions: capture costs
// the app no extra write, only the WAL that Postgres writes anyway (and
// the old rows of REPLICA IDENTITY FULL, below).
//
// The package has two parts: setup functions, run on a plain connection at
// boot, and a Consumer, which streams.
//
//	db, _ := pgxpool.New(ctx, dsn)
//	if err := logrepl.CheckWALLevel(ctx, db); err != nil {
//		return err // logrepl.ErrWALLevel: the message says how to enable it
//	}
//	_ = logrepl.SetReplicaIdentityFull(ctx, db, "todos") // old rows for deletes and scope moves
//	_ = logrepl.EnsurePublication(ctx, db, logrepl.PublicationName("tide"), []string{"todos", "projects"})
//	_, _ = logrepl.EnsureSlot(ctx, db, logrepl.SlotName("tide"))
//
//	c, _ := logrepl.NewConsumer(logrepl.Config{
//		ConnString:  dsn,
//		Slot:        logrepl.SlotName("tide"),
//		Publication: logrepl.PublicationName("tide"),
//	})
//	err := c.Run(ctx, func(ctx context.Context, tx *logrepl.Tx) error {
//		for _, ch := range tx.Changes {
//			// ch.Table "public.todos", ch.Op, ch.New, ch.Old
//		}
//		return nil // accepted: its position may be confirmed
//	})
//
// # Requirements
//
// The server needs wal_level = logical (ALTER SYSTEM SET wal_level =
// logical; then a restart), a free replication slot and WAL sender
// (max_replication_slots, max_wal_senders; both default to 10), and a role
// with the REPLICATION attribute that pg_hba.conf lets connect for
// replication. CheckWALLevel, EnsureSlot and Run return an error matching
// ErrWALLevel on a server without it, with this message:
//
//	logrepl: wal_level is "replica"; logical replication needs wal_level = logical: run ALTER SYSTEM SET wal_level = logical; and restart Postgres
//
// # Guarantees
//
//   - Commit order: transactions arrive in the order of their commit
//     records (Tx.CommitLSN increases), whatever order they started or
//     wrote in. A transaction that rolled back never arrives.
//   - Whole transactions: a transaction arrives as one Tx, its changes in
//     the order they were made, unless it is larger than the piece limits
//     (below).
//   - At least once, never skipped: the consumer confirms a transaction's
//     position (a standby status update with its end as the flushed
//     position) only after the handler returned nil for it, and every Run
//     starts from the slot's confirmed position. A crash re-delivers what
//     was accepted after the last report (at most Config.StatusInterval of
//     transactions); an orderly stop (ctx ended, or the handler's error)
//     reports first, so nothing accepted comes again. A server crash may
//     also move a slot back to its last checkpoint. A handler that must
//     act once per transaction keeps the last CommitLSN it applied and
//     skips transactions at or below it.
//   - The slot follows the consumer: while no transaction is in flight,
//     the consumer also confirms the WAL end of the server's keepalives
//     (everything the server sent before them was accepted), so WAL that
//     holds no change for the publication is released even when the
//     published tables are quiet.
//   - Messages: with Config.Messages, the transactional logical decoding
//     messages a transaction emitted (pg_logical_emit_message(true, ...))
//     arrive in its Tx.Messages, in order, each with the number of changes
//     before it; a transaction with messages and no changes arrives too.
//     Non-transactional messages are not delivered.
//   - Bad bytes are an error (ErrMalformed), never a crash: the consumer
//     uses pglogrepl's decoder behind checks of the length fields it would
//     allocate by and a guard that turns an out-of-range read into an
//     error; FuzzAssemble exercises them.
//
// # Large transactions
//
// Postgres sends a transaction only after it has committed (proto_version
// 1; the server spills a large one to its disk until then), so the first
// message of a transaction means it will not roll back. Buffering it whole
// before the handler sees it would hold as much memory as the app's
// largest transaction, a bulk UPDATE of millions of rows included;
// refusing transactions past a limit would block the slot for ever, since
// the same transaction comes first again on every restart. So a
// transaction larger than Config.MaxPieceChanges changes (10,000) or
// Config.MaxPieceBytes (32 MiB of values, roughly) arrives in pieces: Tx
// values with the same XID and CommitLSN, Part 0, 1, 2..., More set on all
// but the last. The consumer holds one piece at a time. The transaction's
// position is confirmed only after its last piece is accepted, so a
// restart delivers it again from Part 0; a handler that needs it
// atomically applies its pieces in one transaction of its own and commits
// on the last. Streaming of in-progress transactions (proto_version 2),
// whose pieces could still roll back, is not used.
//
// # Costs and limits
//
//   - A slot keeps the server's WAL from its confirmed position on: a
//     consumer that stops for good must have its slot dropped (DropSlot),
//     or WAL fills the server's disk. Figures.Slot.RetainedBytes shows it;
//     max_slot_wal_keep_size caps it on the server, at a price: a slot
//     past the cap is invalidated, its changes lost, and EnsureSlot and
//     Run return ErrSlotLost until it is dropped and made anew (with a
//     fresh snapshot for everyone who read from it).
//   - REPLICA IDENTITY FULL makes each update and delete of the table log
//     the whole old row (see SetReplicaIdentityFull): more WAL, in
//     exchange for Change.Old on every update and delete. Without it,
//     deletes carry the key only (Change.OldKeyOnly) and updates nothing
//     old unless they change the key.
//   - An unchanged TOASTed value (a large text or bytea the update did not
//     touch) is not sent: its Column has Unchanged set, and Change.Old has
//     the value under REPLICA IDENTITY FULL.
//   - The handler runs on the goroutine that reads the stream: a handler
//     slower than wal_sender_timeout (60 s) has the stream cut by the
//     server; Run returns an error and nothing is lost.
//   - One consumer per slot: a second Run, here or on another node, gets
//     ErrSlotInUse. After a consumer dies without closing its connection,
//     the server frees the slot when it notices (wal_sender_timeout), so
//     a successor retries with backoff.
//   - Values are Postgres's text output; TRUNCATE arrives as an
//     OpTruncate change per table.
//   - A slot delivers the transactions that commit after its creation; it
//     exports no snapshot of the rows that were there before.
//
// Figures reports the consumer's confirmed position and the server's WAL
// end as the stream told, and from pg_replication_slots the WAL the slot
// retains (pg_current_wal_lsn() - restart_lsn) and the consumer's lag
// (pg_current_wal_lsn() - confirmed_flush_lsn).
package logrepl
