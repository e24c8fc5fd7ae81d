// Package tideecho mounts tide on a labstack/echo v4 app with one line:
//
//	e := echo.New()
//	e.Use(echomw.Recover(), sessions) // the app's own middleware, first
//	e.Use(tideecho.Middleware(engine,
//		tideecho.PrincipalFrom(func(c echo.Context) (authz.Principal, error) {
//			u, ok := c.Get("user").(*User) // stored by sessions
//			if !ok {
//				return authz.Anonymous, nil
//			}
//			return authz.Principal{ID: u.ID, Claims: map[string]any{"projects": u.Projects}}, nil
//		}),
//		middleware.WithTokenEndpoint(keyring), // any middleware.Option
//	))
//	e.GET("/", index) // the app's routes, untouched
//
// Middleware registered before tide's (with e.Pre, or e.Use earlier) runs
// first for tide's routes too: a session middleware stores the user
// PrincipalFrom reads, and one that refuses a request (a banned address, a
// rate limit) refuses it for tide as well. Every request that is not for a
// tide route reaches the app's routes untouched, including Echo's own 404
// and 405 answers and its error handler.
//
// Echo's pitfalls are handled here: for a tide route the middleware
// answers the request itself and returns nil, never an error Echo would
// write onto a hijacked WebSocket connection; and the pooled echo.Context
// is only used while the request is being served (the principal is taken
// from it before the response is written; a connection keeps nothing of
// it).
//
// The WebSocket upgrade takes over the connection, which needs a
// ResponseWriter that can be hijacked. Echo's own Gzip, BodyDump and
// logger middleware keep Hijack working; its Timeout middleware (an
// http.TimeoutHandler) cannot, and the upgrade is answered with a 500
// error frame naming the cause instead: skip Timeout for the tide prefix
// with its Skipper.
//
// Nothing here holds state of its own: the package is a thin translation
// onto package middleware, which documents the routes, the origin check and
// the token endpoint.
package tideecho
