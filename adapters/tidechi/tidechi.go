package tidechi

import (
	"net/http"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// Middleware returns chi middleware serving tide's routes (under the
// prefix, "/tide" unless middleware.WithPrefix says otherwise) and passing
// every other request to the next handler, with the client origin of its
// Tide-Origin header in its context. It is middleware.Middleware: chi's
// middleware is net/http's. Any middleware.Option applies.
//
// Add it with r.Use on the root router, after the app's session
// middleware: middleware of the root router runs for every request before
// chi routes it, so tide's routes need no chi route of their own.
// Middleware added inside r.Group or r.Route runs only for routes
// registered there: behind a group's middleware, give the group a route
// under tide's prefix, which tide answers before it runs:
//
//	r.Group(func(r chi.Router) {
//		r.Use(requireLogin, tidechi.Middleware(engine, opts...))
//		r.Handle("/tide/*", http.NotFoundHandler())
//	})
func Middleware(e *core.Engine, opts ...middleware.Option) func(http.Handler) http.Handler {
	return middleware.Middleware(e, opts...)
}

// PrincipalFrom identifies the caller of tide's routes with the app's own
// session. chi apps keep the user in the request's context, so fn reads it
// from r.Context(), where the app's session middleware (added before tide)
// put it. fn returns authz.Anonymous and a nil error for a visitor who is
// not logged in; an error refuses the request with 401. It runs once per
// request to a tide route (the upgrade, a poll, a token request), on the
// request's goroutine, before the response is written. It is
// middleware.WithPrincipal.
func PrincipalFrom(fn func(*http.Request) (authz.Principal, error)) middleware.Option {
	return middleware.WithPrincipal(fn)
}
