package tidehttp

import (
	"net/http"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// Wrap returns app with tide's routes in front of it: requests for tide's
// routes (under the prefix, "/tide" unless middleware.WithPrefix says
// otherwise) are served by the engine, every other request reaches app
// with the client origin of its Tide-Origin header in its context. It is
// middleware.Middleware(e, opts...)(app). Any middleware.Option applies.
//
// Wrap the handler that already holds the app's session middleware if the
// principal hook reads what that middleware stores; wrap inside it
// otherwise, so requests pass it first (see the package example).
func Wrap(app http.Handler, e *core.Engine, opts ...middleware.Option) http.Handler {
	return middleware.Middleware(e, opts...)(app)
}

// PrincipalFrom identifies the caller of tide's routes with the app's own
// session: fn returns the logged-in user's principal, or authz.Anonymous
// and a nil error for a visitor who is not logged in; an error refuses the
// request with 401. It runs once per request to a tide route (the upgrade,
// a poll, a token request), on the request's goroutine, before the
// response is written. It is middleware.WithPrincipal.
func PrincipalFrom(fn func(*http.Request) (authz.Principal, error)) middleware.Option {
	return middleware.WithPrincipal(fn)
}
