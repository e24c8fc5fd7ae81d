// Package client is tide's Go client and the reference implementation of
// the wire protocol (docs/protocol.md). Go apps use it to keep a local copy
// of server-side scopes in sync and to write through the server's
// mutators; tide's own tests use it as the client side of end-to-end
// tests.
//
// A Client keeps one WebSocket connection to the server and, for each
// scope (a resource plus conditions) the app syncs, the scope's rows in its
// own store:
//
//	store, err := client.NewFileStore(path) // or leave Store zero: in memory
//	if err != nil { ... }
//	c, err := client.New(client.Config{
//		URL:   "wss://app.example.com/tide/ws",
//		Store: store,
//		HeaderFunc: func(ctx context.Context) (http.Header, error) {
//			return http.Header{"Cookie": {currentSession()}}, nil
//		},
//	})
//	if err != nil { ... }
//	todos, err := c.Sync(client.Scope{
//		Resource:   "todos",
//		Conditions: map[string]any{"project_id": "p7"},
//	})
//	if err != nil { ... }
//	go c.Run(ctx) // connects, and reconnects until ctx ends
//
//	if err := todos.Wait(ctx); err != nil { ... } // caught up, or refused (todos.Err())
//	for {
//		changed := todos.Changed()
//		for key, row := range todos.Rows() {
//			todo, err := protocol.DecodeRow[Todo](row)
//			...
//		}
//		<-changed // once per applied batch or reconcile, never per row
//	}
//
// An app that keeps its own copy can pass a Handler to Subscribe instead,
// and gets one Batch per frame; the client then keeps only the cursor.
//
// # Several resources in one scope
//
// A scope may follow several resources that share the conditions' columns,
// with one subscription and one cursor:
//
//	project, err := c.Sync(client.Scope{
//		Resources:  []string{"todos", "comments", "attachments"},
//		Conditions: map[string]any{"project_id": "p7"},
//	})
//	comments := project.RowsOf("comments")
//
// Every entry of its batches names its resource (Entry.Resource), entries of
// all three arrive in commit order, and the changes of one server
// transaction arrive in one Batch (one change of a synced scope's rows), so
// the copy never shows a comment before its todo. A first snapshot (no
// cursor, or after a reset) is the exception on the wire: the server sends
// each resource's current rows in turn. A synced scope's copy takes all of
// them at once, at the caught-up, and shows its previous rows until then
// (a connection lost meanwhile starts the snapshot again). A Handler gets
// the snapshot's pages as they come, one resource after another: its copy
// is consistent at the Batch with CaughtUp. Each resource's policy
// must allow the scope; if one refuses, the scope fails with that
// resource's code.
//
// # Followed scopes come back
//
// The store's records are the list of the scopes the app follows: one per
// scope declared with Sync or Subscribe, until Unsubscribe (the record is
// kept, marked unsubscribed) or Forget (the record is deleted). When Run
// starts it resumes every followed scope the app has not declared in this
// process (Resume): synced scopes from their stored rows, others with the
// Handler that Config.Handler makes for them. Each resumes from its stored
// cursor, so only what changed while the app was down is replayed.
// Followed lists them, Subscriptions returns the handles, Forget drops one.
// Listing needs a store that is a RecordLister (MemoryStore, FileStore).
//
// # Writes
//
// Mutate asks the server to run one of the resource's mutators, and may
// change the local copy at once (optimistically):
//
//	m, err := c.Mutate(ctx, client.Mutation{
//		Resource: "todos", Name: "rename",
//		Args: map[string]any{"id": "t1", "title": "ship it"},
//		Local: func(tx *client.LocalTx) error {
//			return tx.Upsert("todos", "t1", renamed) // the whole row
//		},
//		Strategy: client.LastWriteWins{Field: "updatedAt"},
//	})
//	res, err := m.Wait(ctx) // ack, *RejectError, or *ConflictError
//
// Each mutation has an idempotency key (generated, or the caller's) and a
// client sequence number; the server applies a key at most once per
// principal and origin. Mutations are kept in an offline queue, persisted
// with the rows in a FileStore, sent in sequence order after the
// subscriptions of each connection, and resent with their original key and
// time until answered. The store also keeps the device's origin (Meta), so
// a mutation restored after a restart is resent under the origin it was
// first sent under and the server answers it from its record (Replayed)
// instead of running it again. A mutation that could never be sent (args
// that are not a JSON object, a frame over the server's limit) is refused
// at Mutate with a *RejectError, and a queued one the server can never
// take is settled as rejected; none stays pending forever. When the server
// acknowledges key K the client rolls back K and every later optimistic
// write, newest first, lands the server's rows under K's Strategy
// (ServerWins by default, LastWriteWins, or a Merge of local, base and
// server rows) and replays the remaining writes in sequence order; a
// reject rolls K back and replays the rest. Once the subscriptions covering
// the written rows reach the ack's cursor, the rows are the server's and
// the mutation leaves Pending (its Settled channel closes). docs/writes.md
// has a recipe per strategy.
//
// # Store file
//
// A FileStore is one JSON object, rewritten atomically (temp file, fsync,
// rename) on every change:
//
//	{"version": 1,
//	 "records": [{"digest": "<scope digest>", "resource": "todos",
//	              "conditions": {"project_id": "p7"}, "state": "live",
//	              "cursor": "<cursor>", "copy": true,
//	              "rows": {"t1": {...row...}}}],
//	 "queue": {"seq": 7, "mutations": [{"key": "...", "seq": 7,
//	           "resource": "todos", "name": "rename", "args": {...},
//	           "at": 1764590000000, "strategy": "server-wins",
//	           "ops": [{"op": "upsert", "key": "t1", "row": {...}, "resource": "todos"}],
//	           "acked": false, "cursor": ""}]},
//	 "meta": {"origin": "go-...", "principal": "u1", "bound": true,
//	          "max_frame_bytes": 65536}}
//
// A synced scope's rows and cursor are one record, saved in one write per
// applied batch, so a restart resumes a complete copy. A record with a
// cursor but without "copy" is never used to resume a synced scope: it
// starts over from a snapshot. A failed record says why in "refusal"; one
// refused for access has neither rows nor cursor. "meta" holds the device's
// origin, the principal the store belongs to and the server's frame limit
// (see Meta); a file without it (written by an older client) is read as it
// is and gets its origin from the first Client on it.
//
// # Guarantees
//
//   - Ordered, serialized applies. Batches are applied one at a time, in the
//     order the server sent them, on one goroutine; the socket keeps being
//     read (and pings answered) while a handler is slow. Each changes frame
//     is one Apply call (or one change of a synced scope's rows), however
//     many rows it carries; so are each caught-up and reset.
//   - Monotonic, persisted cursors. Each scope has one Record in the
//     CursorStore. After a batch is applied its cursor is saved; a
//     changes frame whose cursor is not ahead of the stored one (a
//     duplicate, or older) is dropped. Only a reset moves the stored
//     cursor back (to none).
//   - Resume without loss. On every (re)connect each scope is subscribed
//     with its stored cursor, and the server replays what it missed. A
//     failed Apply or Save is not persisted: the connection is dropped and
//     the scope resumes from its stored cursor, so the batch comes again.
//   - Fresh starts are explicit. When a scope is subscribed without a
//     cursor (first use, after a reset, after invalid_cursor), the first
//     batch has Reset set (a synced scope drops its rows).
//   - Own writes converge. Every entry is applied whatever its origin,
//     except that a Handler's scope skips the live echo of a row the client
//     already delivered in its own mutation's ack (Result.Entries; the
//     same row, compared as JSON, with nothing else of that row delivered
//     since; the cursor still advances). So rows a mutator wrote with
//     plain SQL, a row the write moved out of the scope, and later
//     versions all arrive. A synced scope applies every entry to its
//     store, where an echo of a row it already shows from its own mutation
//     changes nothing and notifies no one.
//   - At most once across restarts. The store keeps the device's origin
//     beside the queue, so a restored mutation is resent under the origin
//     it was first sent under.
//   - Local data follows access. A scope refused for access (forbidden,
//     unauthenticated, or a 1008 close Run does not retry) loses its rows
//     and cursor, in memory and in the store, at once; Subscription.Retry
//     resumes it. A store belongs to the principal of its first welcome:
//     Run stops with ErrOtherPrincipal, before subscribing or sending
//     anything, when the server names another.
//   - Honest state. After a welcome announcing a heartbeat (heartbeat_ms,
//     H), a connection on which nothing arrives for 2·H is closed, reported
//     (EventDisconnected, ErrDeadConnection) and replaced; the server's
//     ping frames are answered with pong. No subscription is live while
//     its connection is down.
//   - Whole transactions. A scope of several resources gets the changes of
//     one server transaction in one Batch.
//   - Loud failures. An entry of a resource the subscription does not
//     cover (or, in a scope of several, an entry without its resource), a
//     malformed frame or a failing store is reported (OnEvent) and
//     drops the connection; nothing is silently applied or skipped.
//   - Stale subscriptions stay stale. Every subscribe uses a new id, never
//     reused on the client; frames for ids the client no longer holds are
//     ignored, and an Apply that was running when its subscription ended is
//     not persisted.
//   - Polite reconnects. Reconnects wait a full-jitter exponential backoff
//     (random in [0, min(MaxBackoff, MinBackoff·2^attempt)]), reset after
//     every welcome.
//
// # Failure modes
//
// Run returns only when its context ends or on a definitive refusal: a
// *CloseError for close 4000 (version skew: update the client), or for close
// 1008 (policy) when the client cannot renew its credentials — it has
// neither Config.Token nor Config.HeaderFunc, or credentials obtained for
// that very connection were refused before welcome; and an error wrapping
// ErrCredentialsRefused when a subscription is refused as unauthenticated
// and the client cannot renew its credentials (a static session cookie in
// Config.Header that the server no longer accepts). Everything else is
// retried:
//
//   - The token function failing, for hello or for a refresh, is retried
//     with backoff (EventTokenError); so is a token identical to the one in
//     use, which is never sent again (ErrSameToken).
//   - A token expiring, or a session ending, on an established connection
//     (1008 after welcome) reconnects with fresh credentials from Token and
//     HeaderFunc.
//   - A subscription the server refuses shows in Subscription.State
//     (SubFailed) and Err (the *protocol.Error with its code, message and
//     detail); Wait returns it. unauthenticated, with Token or HeaderFunc
//     set, reconnects with fresh credentials (EventServerError, then
//     EventDisconnected, at each refusal), and without them ends Run
//     (above); other codes are tried again
//     on the next connection, or at once by Subscription.Retry. See Client
//     for each code.
//   - A welcome naming another principal than the store's ends Run with
//     an error wrapping ErrOtherPrincipal: use one store per user.
//
// # Costs
//
// Frames wait for their handler in an unbounded in-memory queue, so a
// handler slower than the server's push rate grows the client's memory (the
// server bounds its own side). A synced scope's rows are held in memory and,
// with a FileStore, the whole file is rewritten for every applied batch:
// it suits thousands of rows per scope, not millions. The client paces the
// frames it sends below the frame-rate limit the server announces in
// welcome, so no subscribe is dropped for rate; with tide's defaults an app
// with up to about 260 scopes subscribes them all at once on connect.
package client
