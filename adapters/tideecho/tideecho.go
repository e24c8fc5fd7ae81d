package tideecho

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/internal/adapterctx"
	"github.com/tidesync/tide/middleware"
)

// Middleware returns Echo middleware serving tide's routes (under the
// prefix, "/tide" unless middleware.WithPrefix says otherwise) and passing
// every other request to the next handler, with the client origin of its
// Tide-Origin header in its context (see middleware.Middleware, which it
// is in Echo's terms). Any middleware.Option applies.
//
// Add it with e.Use after the app's session middleware. Echo runs e.Use
// middleware for every request, routed or not, so tide's routes need no
// Echo route of their own. Behind a group's middleware instead, add it to
// the group with the prefix and give the group a route under it, so Echo
// runs the group's middleware for tide's paths:
//
//	g := e.Group("/tide", requireLogin, tideecho.Middleware(engine, opts...))
//	g.Any("/*", echo.NotFoundHandler)
//
// For a tide route it returns nil, having answered the request itself (an
// error frame for a refusal): after a WebSocket upgrade the connection
// belongs to tide, and an error returned to Echo would be written onto it.
func Middleware(e *core.Engine, opts ...middleware.Option) echo.MiddlewareFunc {
	serve := adapterctx.Mount[echo.Context](middleware.Middleware(e, opts...))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			var err error
			serve(c.Response(), c.Request(), c, func(r *http.Request) {
				c.SetRequest(r)
				err = next(c)
			})
			return err
		}
	}
}

// PrincipalFrom identifies the caller of tide's routes with the app's own
// session, in Echo's terms: fn reads what the app's session middleware,
// added before tide's, stored in c (c.Get("user"), say) and returns the
// user's principal, or authz.Anonymous and a nil error for a visitor who
// is not logged in; an error refuses the request with 401.
//
// fn runs once per request to a tide route (the upgrade, a poll, a token
// request), on the request's goroutine, before the response is written.
// Echo reuses c for later requests once the handler returns: fn must not
// keep c, or anything it hands out, in the principal or elsewhere. It works
// with Middleware only; given to package middleware directly, it refuses
// every request.
func PrincipalFrom(fn func(echo.Context) (authz.Principal, error)) middleware.Option {
	return adapterctx.Principal("tideecho", fn)
}
