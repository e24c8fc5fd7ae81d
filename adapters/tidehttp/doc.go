// Package tidehttp mounts tide on a plain net/http app: one call wraps the
// app's handler so tide's routes (the WebSocket, polling and, with
// middleware.WithTokenEndpoint, token endpoints) are served in front of it.
//
//	mux := http.NewServeMux() // the app's routes
//	handler := withSession(tidehttp.Wrap(mux, engine,
//		tidehttp.PrincipalFrom(func(r *http.Request) (authz.Principal, error) {
//			u, ok := userFrom(r.Context()) // set by withSession, the app's own middleware
//			if !ok {
//				return authz.Anonymous, nil
//			}
//			return authz.Principal{ID: u.ID, Claims: map[string]any{"projects": u.Projects}}, nil
//		}),
//		middleware.WithAllowedOrigins("https://app.example"), // any middleware.Option
//	))
//	http.ListenAndServe(addr, handler)
//
// Middleware placed outside Wrap (withSession here) runs first for tide's
// routes as well, so a session middleware can store the user for
// PrincipalFrom, and a middleware that refuses a request refuses it for
// tide too. Every request that is not for a tide route reaches the app
// untouched, including its own 404s.
//
// The WebSocket upgrade takes over the connection, which needs a
// ResponseWriter that can be hijacked: under http.TimeoutHandler, or a
// compressing or buffering wrapper without a working Hijack method, the
// upgrade is answered with a 500 error frame naming the cause instead.
// Keep such middleware inside Wrap, on the app's own routes.
//
// Nothing here holds state of its own: the package is a thin translation
// onto package middleware, which documents the routes, the origin check and
// the token endpoint.
package tidehttp
