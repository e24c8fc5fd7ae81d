package tidegin

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// Middleware returns Gin middleware serving tide's routes (under the
// prefix, "/tide" unless middleware.WithPrefix says otherwise) and passing
// every other request on with c.Next(), untouched apart from the
// Tide-Origin header's origin put into its context (see
// middleware.WithOrigin). Any middleware.Option applies. After serving a
// tide route it calls c.Abort(), so no later handler writes to a response
// tide has answered or a connection tide has taken over.
//
// Add it with r.Use on the engine, after the app's session middleware:
// Gin runs the engine's middleware for unrouted requests too, so tide's
// routes need no Gin route of their own. Middleware added to a group
// (r.Group("/x").Use) runs only for routes registered in it; use Handler
// there instead.
func Middleware(e *core.Engine, opts ...middleware.Option) gin.HandlerFunc {
	h, owns := middleware.Routes(e, opts...)
	return func(c *gin.Context) {
		if !owns(c.Request) {
			c.Request = middleware.WithOrigin(c.Request)
			c.Next()
			return
		}
		serve(h, c)
		c.Abort()
	}
}

// Handler returns a Gin handler serving only tide's routes, for apps that
// put tide behind a group's middleware. Gin hands the handler the full
// path, so register it on tide's routes under tide's prefix ("/tide", or
// the one given with middleware.WithPrefix):
//
//	for _, p := range []string{"/tide/ws", "/tide/changes", "/tide/token"} {
//		authed.Any(p, h)
//	}
//
// or authed.Any("/tide/*path", h) if the app has no route of its own under
// the prefix (Gin refuses a wildcard beside one). Requests under the prefix
// that are not tide's routes get 404. Unlike Middleware, Handler leaves the
// app's own requests alone: tag them with middleware.WithOrigin in the
// app's middleware if its writes should carry the writer's origin.
func Handler(e *core.Engine, opts ...middleware.Option) gin.HandlerFunc {
	h := middleware.Handler(e, opts...)
	return func(c *gin.Context) {
		serve(h, c)
		c.Abort()
	}
}

// serve hands the request to tide with c in its context for PrincipalFrom.
// Nothing tide starts keeps the request: the principal is computed before
// serve returns, and a WebSocket connection lives on with it alone, so the
// pooled c is never used after the handler returns.
func serve(h http.Handler, c *gin.Context) {
	// Gin presets 404 (or 405) before running middleware for an unrouted
	// request, and a response written without WriteHeader would carry it.
	c.Status(http.StatusOK)
	r := c.Request
	h.ServeHTTP(writer(c.Writer), r.WithContext(context.WithValue(r.Context(), ctxKey{}, c)))
}

// writer returns w, or w without its Hijack method when hijacking would
// fail: Gin's writer asserts http.Hijacker on what it wraps, which panics
// under an http.TimeoutHandler. Hiding Hijack makes tide answer with an
// error frame naming the cause instead.
func writer(w gin.ResponseWriter) http.ResponseWriter {
	var rw http.ResponseWriter = w
	for {
		if _, ok := rw.(http.Hijacker); !ok {
			return struct{ http.ResponseWriter }{w}
		}
		u, ok := rw.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		rw = u.Unwrap()
	}
}

type ctxKey struct{}

// errNoContext explains a PrincipalFrom option given to package middleware
// directly, where there is no gin.Context to read.
var errNoContext = errors.New("tidegin.PrincipalFrom needs tidegin.Middleware or tidegin.Handler")

// PrincipalFrom identifies the caller of tide's routes with the app's own
// session, in Gin's terms: fn reads what the app's session middleware,
// added before tide's, stored in c (c.Get("user"), say) and returns the
// user's principal, or authz.Anonymous and a nil error for a visitor who
// is not logged in; an error refuses the request with 401.
//
// fn runs once per request to a tide route (the upgrade, a poll, a token
// request), on the request's goroutine, before the response is written.
// Gin reuses c for later requests once the handler returns: fn must not
// keep c, hand it to a goroutine (use c.Copy(), and c.Request.Context() for
// long-lived work), or put anything of it in the principal.
func PrincipalFrom(fn func(*gin.Context) (authz.Principal, error)) middleware.Option {
	return middleware.WithPrincipal(func(r *http.Request) (authz.Principal, error) {
		c, ok := r.Context().Value(ctxKey{}).(*gin.Context)
		if !ok {
			return authz.Anonymous, errNoContext
		}
		return fn(c)
	})
}
