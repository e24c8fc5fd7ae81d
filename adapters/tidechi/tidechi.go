package tidechi

import (
	"net/http"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// Middleware returns chi middleware serving tide's routes (under the
// prefix, "/tide" unless middleware.WithPrefix says otherwise) and passing
// every other request to the next handler untouched, apart from the
// Tide-Origin header's origin put into its context (see
// middleware.WithOrigin). Any middleware.Option applies.
//
// Add it with r.Use on the root router, after the app's session
// middleware: middleware of the root router runs for every request before
// chi routes it, so tide's routes need no chi route of their own.
// Middleware added inside r.Group or r.Route runs only for routes
// registered there; use Handler with r.Mount there instead.
func Middleware(e *core.Engine, opts ...middleware.Option) func(http.Handler) http.Handler {
	return middleware.Middleware(e, opts...)
}

// Handler returns an http.Handler serving only tide's routes, for
// r.Mount("/tide", tidechi.Handler(engine, opts...)), possibly on a group
// with its own middleware. chi hands a mounted handler the full path, so
// mount it at tide's prefix: "/tide", or the one given with
// middleware.WithPrefix; the app's static routes under the prefix still
// win. Requests under the prefix that are not tide's routes get 404.
// Unlike Middleware, Handler leaves the app's own requests alone: tag them
// with middleware.WithOrigin in the app's middleware if its writes should
// carry the writer's origin.
func Handler(e *core.Engine, opts ...middleware.Option) http.Handler {
	return middleware.Handler(e, opts...)
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
