// Package middleware serves a tide engine over net/http: the WebSocket
// endpoint, the polling endpoint for clients that cannot hold a socket, and
// the rest of tide's routes, mounted in front of an existing app by one
// call, Middleware (the framework adapters in adapters/ are built on it).
//
//	app, _ := tide.Open(ctx, nil, tide.Config{}, register) // a pool for Postgres
//	mux := http.NewServeMux() // the app's own routes
//	http.ListenAndServe(addr, middleware.Middleware(app.Engine,
//		middleware.WithPrincipal(currentUser))(mux))
//
// Routes, under the prefix (default "/tide"):
//
//	GET  /tide/ws       WebSocket upgrade; then protocol v1 (docs/protocol.md)
//	POST /tide/changes  one page of a scope, for polling clients
//	POST /tide/mutate   a mutation, for polling clients
//	GET  /tide/client.js the browser client, an ES module (docs/client-js.md)
//	POST /tide/token    a channel token for the caller (only with WithTokenEndpoint)
//
// The answers of /changes and /mutate name the caller's principal in the
// Tide-Principal header (PrincipalHeader), as welcome does on the socket.
//
// Every other request passes through to the app untouched, with its client
// origin (the device id of its Tide-Origin header, ClientOriginHeader), if
// present, put into the request's context, so the app's writes made for it
// (tide.Begin on Postgres, core.Table) carry it and the device skips their
// echo.
//
// "Origin" alone, in this package, is the browser's Origin header: the
// page a request comes from, which WithAllowedOrigins and WithCheckOrigin
// check.
//
// The principal of a request comes from the app's hook (WithPrincipal),
// which typically reads the user the app's own session middleware found.
// Without a hook every caller is anonymous, and tide's deny-by-default
// policies refuse it.
//
// Cookie sessions are protected from cross-site use: a request to any of
// tide's routes whose Origin header names neither the request's own host
// nor an origin listed with WithAllowedOrigins is refused with 403, which
// blocks cross-site WebSocket hijacking. Requests without Origin
// (non-browser clients) are served. docs/authorization.md has the recipes.
package middleware
