package middleware

import (
	"net/http"

	"github.com/tidesync/tide/core"
)

// OriginHeader is the request header a client sets to its origin id so the
// app's writes made for that request carry it (see core.WithOrigin).
const OriginHeader = "Tide-Origin"

// Middleware returns net/http middleware that serves tide's routes and
// passes every other request to next untouched (apart from the origin, see
// OriginHeader). It is the one line an app adds:
//
//	handler = middleware.Middleware(engine, middleware.WithPrincipal(currentUser))(handler)
func Middleware(e *core.Engine, opts ...Option) func(http.Handler) http.Handler {
	h := newHandler(e, buildOptions(opts))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h.owns(r) {
				h.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, WithOrigin(r))
		})
	}
}

// WithOrigin returns r with the origin from its Tide-Origin header, if any,
// in its context, so core.Table writes made while serving it carry the
// origin. Middleware applies it to every request it passes through.
func WithOrigin(r *http.Request) *http.Request {
	origin := r.Header.Get(OriginHeader)
	if origin == "" || len(origin) > 128 {
		return r
	}
	return r.WithContext(core.WithOrigin(r.Context(), origin))
}
