// Package pgfeed is tide's Postgres change feed: it syncs an app's own
// tables, however the app writes them (any ORM, any SQL, its own
// transactions), without logical replication.
//
// Package tide's Open puts the steps below together in the order that
// works (register every resource, then Migrate) and tide.Begin starts
// transactions tagged with the request's origin; by hand:
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	feed, _ := pgfeed.New(pool, pgfeed.Options{}) // no I/O
//	defer feed.Close()
//	engine, _ := core.New(core.Config{Feed: feed})
//	todos, _ := core.Register(engine, core.Resource[Todo]{Table: "todos", Authorize: policy})
//	if err := feed.Migrate(ctx, engine.Schemas()...); err != nil { ... } // on every boot
//	feed.StartPruner() // retention; Close stops it
//
// A write made for a client device carries its client origin, so the
// device can skip its echo; tide.Begin tags the transaction from the
// request's context:
//
//	tx, _ := tide.Begin(r.Context(), pool) // SET LOCAL tide.origin
//	_, _ = tx.Exec(ctx, "UPDATE todos SET done = true WHERE id = $1", id)
//	_ = tx.Commit(ctx)
//
// # How it works
//
// Migrate creates tide's schema (Options.Schema, "tide" by default): the
// change log table changes, the ticks that give its changes positions,
// their metadata, versioned in schema_migrations. For each resource it
// installs a capture function and a deferred constraint trigger on the
// resource's table (AFTER INSERT OR UPDATE OR DELETE, DEFERRABLE INITIALLY
// DEFERRED, FOR EACH ROW), so the capture runs when the writer's
// transaction commits, inside it.
//
// The capture writes each change once, into the change log, with the
// writer's transaction id, its place in the transaction and a capture
// number, and nothing else: no position, no lock, no shared row, no
// notification, so synced transactions never wait for one another and
// Postgres's group commit works for them as for any table. A single
// sequencer per database (elected with a session-level advisory lock among
// the feeds that tail: every node is a candidate, and the role moves when
// its holder's session ends) gives committed changes their positions
// without copying them: in one statement per step it finds the
// transactions its snapshot sees committed and the last tick's snapshot did
// not, orders them by the last change each wrote, and writes a tick: their
// ids and first positions, and its snapshot. A change's position is its
// transaction's first position plus its place. Steps exclude one another,
// so positions become visible in order: in any snapshot the visible
// positions are a prefix of the numbering (with harmless gaps). A
// transaction that writes a row another one wrote waits for that one to
// commit, so it writes its change after it and gets later positions: for
// conflicting writes, positions follow commit order. Head and Snapshot run
// a step themselves when committed changes have no position yet, so Head
// covers every change committed before it was called and a snapshot page
// is exactly the state at its position. docs/architecture.md argues each
// case.
//
// The cost: a change is written once beside the app's row (with its
// index entries), a step writes one small tick row for up to 128
// transactions, and a change reaches tailers one step after its commit:
// the sequencer looks as soon as the WAL shows a capture, or every
// Options.SequencerInterval (docs/performance.md has the figures).
//
// # Logical replication
//
// With Options.Capture = CaptureLogical no trigger is installed: Migrate
// publishes the synced tables (REPLICA IDENTITY FULL) and makes a
// replication slot (it needs wal_level = logical and returns an error
// matching logrepl.ErrWALLevel otherwise), and the sequencer's leader runs
// the slot's consumer (package logrepl), which writes each committed
// transaction's changes, rendered by the trigger's own expressions, and
// the tick that positions them in one transaction, then confirms the
// slot. The change log, positions and guarantees below are the same,
// except that TRUNCATE is not captured (it is logged) and a server
// mutator's transaction cannot list its writes before it commits. Head
// and Snapshot wait for the consumer to pass a WAL mark written when they
// are called. The slot keeps WAL while no consumer confirms it: watch
// Stats().SlotRetainedBytes, and drop the slot (DropSlot, tide slot drop)
// when the logical capture stops for good. docs/operations.md says when
// to choose which.
//
// # Guarantees
//
//   - Commit-ordered, gap-free positions: once Head or a read has returned
//     position p, no change at or below p appears later.
//   - Capture in the writer's transaction: a change commits or rolls back
//     with the write. Deletes are tombstones carrying the old scope and row;
//     an update that changes a scope column (or the key) is a delete of the
//     old row in its old scope followed by an upsert of the new one, at
//     consecutive positions. TRUNCATE of a synced table is refused, since it
//     could not be captured row by row.
//   - Rows are rendered identically by the capture and by snapshots: JSON
//     objects of the declared columns, times as RFC 3339 in UTC with
//     microseconds (timestamp without time zone is taken as UTC), bytea as
//     base64. Keys and scope values are Postgres's text output of the column,
//     which is tide's canonical text for text, integer and boolean columns.
//   - Replay queries are built only from declared scope columns and bound
//     parameters, and read the change log through a per-resource, per-scope
//     column index. A snapshot page is one statement that reads the rows and
//     the head together, so it is exactly the state at the position it
//     reports.
//   - One Tail query per wake-up serves a whole node: it wakes on
//     LISTEN/NOTIFY (the sequencer's, once per step) and polls every
//     Options.PollInterval as a fallback, and reconnects its listening
//     connection (reading once after every reconnect) when it drops.
//   - Upgrades in place: a schema created by an earlier version is
//     upgraded by Migrate, keeping the positions of the changes in its log,
//     so cursors issued before the upgrade keep working.
//   - Retention never opens a silent gap: the floor and the pruned changes
//     commit together, and every read checks the floor in the statement
//     that reads the changes; a cursor below it yields
//     feed.ErrCursorExpired (a reset and a fresh snapshot for the client).
//     Nor does it hide a change: the floor never passes the newest committed
//     position (PruneThrough clamps to it), and a floor found above the
//     position sequence (set by hand) is repaired at the start of each
//     sequencer term, so changes committed later are read.
//   - Changing a resource's table, key, scope or columns moves its floor at
//     the next Migrate, so cursors from before get a reset instead of
//     changes they would misread.
//
// Defaults: schema "tide", poll every 1 s, sequencer idle look-ups at most
// 50 ms apart and steps of at most 1000 transactions, keep changes for 7
// days and at most 10,000,000 of them, prune every minute (when StartPruner
// runs).
package pgfeed
