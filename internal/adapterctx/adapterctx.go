// Package adapterctx is what the framework adapters whose handlers take a
// context of their own (tideecho's echo.Context, tidegin's *gin.Context)
// share: it hands that context to their PrincipalFrom hook through the
// request tide serves, and serves a request with package middleware's
// one mounting call, so the adapters translate and hold no logic of their
// own.
package adapterctx

import (
	"context"
	"errors"
	"net/http"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/middleware"
)

// key is the context key of a framework context of type C.
type key[C any] struct{}

// holder carries a framework context for the time tide serves a request,
// and nothing once the request passes to the app: a framework reuses its
// contexts, and one must not outlive the request in the app's context.
type holder[C any] struct{ c *C }

// Mount returns serve, which serves one request with package middleware's
// Middleware(e, opts...): tide answers its own routes with fc, the
// framework's context of the request, at hand for Principal's hook; every
// other request goes to next with the client origin in its context, and fc
// no longer reachable from it. serve reports whether next ran.
func Mount[C any](mw func(http.Handler) http.Handler) func(w http.ResponseWriter, r *http.Request, fc C, next func(r *http.Request)) bool {
	return func(w http.ResponseWriter, r *http.Request, fc C, next func(r *http.Request)) bool {
		h := &holder[C]{c: &fc}
		passed := false
		mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			h.c = nil
			passed = true
			next(r)
		})).ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), key[C]{}, h)))
		h.c = nil
		return passed
	}
}

// Principal is an adapter's PrincipalFrom: a middleware.WithPrincipal hook
// that calls fn with the framework context Mount passed. Given to package
// middleware directly, where there is no such context, it refuses every
// request with an error naming the adapter.
func Principal[C any](adapter string, fn func(C) (authz.Principal, error)) middleware.Option {
	errNoContext := errors.New(adapter + ".PrincipalFrom needs " + adapter + ".Middleware")
	return middleware.WithPrincipal(func(r *http.Request) (authz.Principal, error) {
		h, ok := r.Context().Value(key[C]{}).(*holder[C])
		if !ok || h.c == nil {
			return authz.Anonymous, errNoContext
		}
		return fn(*h.c)
	})
}
