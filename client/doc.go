// Package client is tide's Go client and the reference implementation of
// the wire protocol (docs/protocol.md). Go apps use it to keep a local copy
// of server-side scopes in sync; tide's own tests use it as the client side
// of end-to-end tests.
//
// A Client holds subscriptions to scopes (a resource plus conditions), keeps
// one WebSocket connection to the server, and feeds what arrives to each
// subscription's Handler, one Batch per frame:
//
//	c, err := client.New(client.Config{
//		URL:    "wss://app.example.com/tide/ws",
//		Header: http.Header{"Cookie": {session}},
//		Store:  store, // client.NewFileStore(path) to resume across restarts
//	})
//	if err != nil { ... }
//	todos := client.NewMirror() // or any Handler
//	if _, err := c.Subscribe(client.Scope{
//		Resource:   "todos",
//		Conditions: map[string]any{"project_id": "p7"},
//	}, todos); err != nil { ... }
//	go c.Run(ctx) // connects, and reconnects until ctx ends
//
//	for key, row := range todos.Rows() {
//		todo, err := protocol.DecodeRow[Todo](row)
//		...
//	}
//
// # Guarantees
//
//   - Ordered, serialized applies. Batches are applied one at a time, in the
//     order the server sent them, on one goroutine; the socket keeps being
//     read (and pings answered) while a handler is slow. Each changes frame
//     is one Apply call, however many rows it carries; so are each
//     caught-up (CaughtUp set) and reset (Reset set).
//   - Monotonic, persisted cursors. Each scope has one Record in the
//     CursorStore. After Apply returns nil the frame's cursor is saved; a
//     changes frame whose cursor is not ahead of the stored one (a
//     duplicate, or older) is dropped without calling Apply. Only a reset
//     moves the stored cursor back (to none).
//   - Resume without loss. On every (re)connect each scope is subscribed
//     with its stored cursor, and the server replays what it missed. A
//     failed Apply is not persisted: the connection is dropped and the
//     scope resumes from its stored cursor, so the batch comes again.
//   - Fresh starts are explicit. When a scope is subscribed without a
//     cursor (first use, after a reset, after invalid_cursor), the first
//     batch has Reset set: drop any partial copy.
//   - No echo. Entries written with this client's origin are removed from
//     batches; the cursor still advances.
//   - Loud failures. An entry of a resource the subscription does not
//     cover, a malformed frame or a failing store is reported (OnEvent) and
//     drops the connection; nothing is silently applied or skipped.
//   - Stale subscriptions stay stale. Every subscribe uses a new id, never
//     reused on the client; frames for ids the client no longer holds are
//     ignored, and an Apply that was running when its subscription ended is
//     not persisted.
//   - Polite reconnects. Reconnects wait a full-jitter exponential backoff
//     (random in [0, min(MaxBackoff, MinBackoff·2^attempt)]), reset after
//     every welcome. Close codes 1008 (policy) and 4000 (version skew) end
//     Run with a *CloseError instead.
//
// Server errors about a subscription are handled as documented on Client.
//
// # Costs
//
// Frames wait for their handler in an unbounded in-memory queue, so a
// handler slower than the server's push rate grows the client's memory (the
// server bounds its own side). The client paces the frames it sends below
// the frame-rate limit the server announces in welcome, so no subscribe is
// dropped for rate; with tide's defaults an app with up to about 260 scopes
// subscribes them all at once on connect.
package client
