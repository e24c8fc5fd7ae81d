package tideecho

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// Middleware returns Echo middleware serving tide's routes (under the
// prefix, "/tide" unless middleware.WithPrefix says otherwise) and passing
// every other request to the next handler untouched, apart from the
// Tide-Origin header's origin put into its context (see
// middleware.WithOrigin). Any middleware.Option applies.
//
// Add it with e.Use after the app's session middleware. Echo runs e.Use
// middleware for every request, routed or not, so tide's routes need no
// Echo route of their own. For a tide route it returns nil, having
// answered the request itself (an error frame for a refusal): after a
// WebSocket upgrade the connection belongs to tide, and an error returned
// to Echo would be written onto it.
func Middleware(e *core.Engine, opts ...middleware.Option) echo.MiddlewareFunc {
	h, owns := middleware.Routes(e, opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !owns(c.Request()) {
				if r := middleware.WithOrigin(c.Request()); r != c.Request() {
					c.SetRequest(r)
				}
				return next(c)
			}
			serve(h, c)
			return nil
		}
	}
}

// Handler returns an Echo handler serving only tide's routes, for
// e.Any("/tide/*", tideecho.Handler(engine, opts...)) or a group with its
// own middleware. Echo hands the handler the full path, so register it
// under tide's prefix: "/tide", or the one given with
// middleware.WithPrefix; the app's static routes under the prefix still
// win. Requests under the prefix that are not tide's routes get 404. It
// always returns nil (see Middleware). Unlike Middleware, Handler leaves
// the app's own requests alone: tag them with middleware.WithOrigin in the
// app's middleware if its writes should carry the writer's origin.
func Handler(e *core.Engine, opts ...middleware.Option) echo.HandlerFunc {
	h := middleware.Handler(e, opts...)
	return func(c echo.Context) error {
		serve(h, c)
		return nil
	}
}

// serve hands the request to tide with c in its context for PrincipalFrom.
// Nothing tide starts keeps the request: the principal is computed before
// serve returns, and a WebSocket connection lives on with it alone, so the
// pooled c is never used after the handler returns.
func serve(h http.Handler, c echo.Context) {
	r := c.Request()
	h.ServeHTTP(c.Response(), r.WithContext(context.WithValue(r.Context(), ctxKey{}, c)))
}

type ctxKey struct{}

// errNoContext explains a PrincipalFrom option given to package middleware
// directly, where there is no echo.Context to read.
var errNoContext = errors.New("tideecho.PrincipalFrom needs tideecho.Middleware or tideecho.Handler")

// PrincipalFrom identifies the caller of tide's routes with the app's own
// session, in Echo's terms: fn reads what the app's session middleware,
// added before tide's, stored in c (c.Get("user"), say) and returns the
// user's principal, or authz.Anonymous and a nil error for a visitor who
// is not logged in; an error refuses the request with 401.
//
// fn runs once per request to a tide route (the upgrade, a poll, a token
// request), on the request's goroutine, before the response is written.
// Echo reuses c for later requests once the handler returns: fn must not
// keep c, or anything it hands out, in the principal or elsewhere.
func PrincipalFrom(fn func(echo.Context) (authz.Principal, error)) middleware.Option {
	return middleware.WithPrincipal(func(r *http.Request) (authz.Principal, error) {
		c, ok := r.Context().Value(ctxKey{}).(echo.Context)
		if !ok {
			return authz.Anonymous, errNoContext
		}
		return fn(c)
	})
}
