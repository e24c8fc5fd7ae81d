// Package core is tide's engine: it turns Go structs into synced resources,
// reads the change feed in commit order, and serves subscriptions over the
// wire protocol (docs/protocol.md) with replay, snapshot and live changes.
//
//	type Todo struct {
//		ID        string `tide:"id,pk"`
//		ProjectID string `tide:"project_id,scope"`
//		Title     string `tide:"title"`
//	}
//
//	engine, err := core.New(core.Config{})           // in-memory feed by default
//	todos, err := core.Register(engine, core.Resource[Todo]{
//		Table:     "todos",
//		Authorize: authz.RequireClaim("project_id", "projects"), // deny by default
//	})
//	// Serve it with package middleware (or an adapter); write with your own
//	// SQL on Postgres (core/pgfeed), or through todos.Upsert and Delete.
//	defer engine.Shutdown(ctx)
//
// Apps set the engine up with tide.Open (package github.com/tidesync/tide),
// in memory or on Postgres, which calls New and starts the engine; New,
// Register and Engine.Start are for setups Open does not cover.
//
// A client subscribes to a scope — a resource plus conditions on its scope
// columns — with the cursor it stored. The engine authorizes the scope,
// registers the subscription for live changes, replays every change after
// the cursor (or a snapshot of the scope when there is none) up to a
// high-water pinned once, then switches it to live changes.
//
// # Guarantees
//
//   - No gap: every change of the scope after the cursor reaches the
//     subscriber, in commit order, whatever the timing of commits,
//     reconnects and replays (docs/architecture.md argues why).
//   - No regress: the cursors a subscription sends never move backwards,
//     and a change is never sent twice on one subscription.
//   - No leak: a subscriber sees only rows its policy and row filter let it
//     see; a row that stops being visible arrives as a delete.
//   - Bounded memory: each connection's send queue is bounded; a client that
//     falls behind is replayed from its cursor, or cut off with 1013.
//   - Bad input is an error with a stable code (protocol.Code), never a panic.
//
// Engine, Table and the package functions are safe for concurrent use.
package core
