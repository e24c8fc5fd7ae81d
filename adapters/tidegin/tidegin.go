package tidegin

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/internal/adapterctx"
	"github.com/tidesync/tide/middleware"
)

// Middleware returns Gin middleware serving tide's routes (under the
// prefix, "/tide" unless middleware.WithPrefix says otherwise) and passing
// every other request on with c.Next(), with the client origin of its
// Tide-Origin header in its context (see middleware.Middleware, which it is
// in Gin's terms). Any middleware.Option applies. After serving a tide
// route it calls c.Abort(), so no later handler writes to a response tide
// has answered or a connection tide has taken over.
//
// Add it with r.Use on the engine, after the app's session middleware:
// Gin runs the engine's middleware for unrouted requests too, so tide's
// routes need no Gin route of their own. Behind a group's middleware
// instead, add it to a group on the prefix and give the group a route
// under it, so Gin runs the group's middleware for tide's paths:
//
//	g := r.Group("/tide", requireLogin, tidegin.Middleware(engine, opts...))
//	g.Any("/*path", func(c *gin.Context) { c.Status(http.StatusNotFound) }) // for paths not tide's
func Middleware(e *core.Engine, opts ...middleware.Option) gin.HandlerFunc {
	serve := adapterctx.Mount[*gin.Context](middleware.Middleware(e, opts...))
	return func(c *gin.Context) {
		// Gin presets 404 (or 405) before running middleware for an
		// unrouted request, and a response tide writes without WriteHeader
		// would carry it; the app's requests get Gin's status back.
		status := c.Writer.Status()
		c.Status(http.StatusOK)
		passed := serve(writer(c.Writer), c.Request, c, func(r *http.Request) {
			c.Status(status)
			c.Request = r
			c.Next()
		})
		if !passed {
			c.Abort()
		}
	}
}

// writer returns w, or w without its Hijack method when hijacking would
// fail: Gin's writer asserts http.Hijacker on what it wraps, which panics
// under an http.TimeoutHandler. Hiding Hijack makes tide answer with an
// error frame naming the cause instead. Only tide's routes write to it:
// the app's handlers keep writing to c.Writer.
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
// long-lived work), or put anything of it in the principal. It works with
// Middleware only; given to package middleware directly, it refuses every
// request.
func PrincipalFrom(fn func(*gin.Context) (authz.Principal, error)) middleware.Option {
	return adapterctx.Principal("tidegin", fn)
}
