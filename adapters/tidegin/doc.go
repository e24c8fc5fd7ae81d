// Package tidegin mounts tide on a gin-gonic/gin app with one line. Gin has
// no adapter for net/http middleware (func(http.Handler) http.Handler);
// this package is that adapter for tide:
//
//	r := gin.New()
//	r.Use(gin.Recovery(), sessions) // the app's own middleware, first
//	r.Use(tidegin.Middleware(engine,
//		tidegin.PrincipalFrom(func(c *gin.Context) (authz.Principal, error) {
//			u, ok := c.Get("user") // stored by sessions
//			if !ok {
//				return authz.Anonymous, nil
//			}
//			user := u.(*User)
//			return authz.Principal{ID: user.ID, Claims: map[string]any{"projects": user.Projects}}, nil
//		}),
//		middleware.WithTokenEndpoint(keyring), // any middleware.Option
//	))
//	r.GET("/", index) // the app's routes, untouched
//
// Middleware registered before tide's runs first for tide's routes too: a
// session middleware stores the user PrincipalFrom reads, and one that
// aborts a request (a banned address, a rate limit) keeps it from tide as
// well. Every request that is not for a tide route continues down Gin's
// chain with c.Next(), including to Gin's own 404 and 405 answers; a tide
// route ends it with c.Abort().
//
// Gin's pitfalls are handled here: tide works on c.Request and its
// context, and reads c only through PrincipalFrom, on the request's
// goroutine, before the response is written; nothing long-lived (a
// WebSocket connection outlives its request) holds the pooled gin.Context,
// and no goroutine is started with it. A response to an unrouted tide
// request is written with its own status, not the 404 Gin presets for it.
//
// The WebSocket upgrade takes over the connection, which needs a
// ResponseWriter that can be hijacked. Gin's writer can when the server's
// can; under http.TimeoutHandler it cannot, and the upgrade is answered
// with a 500 error frame naming the cause instead of panicking.
//
// Nothing here holds state of its own: the package is a thin translation
// onto package middleware, which documents the routes, the origin check and
// the token endpoint.
package tidegin
