// Package tidechi mounts tide on a go-chi/chi v5 router with one line:
//
//	r := chi.NewRouter()
//	r.Use(chimw.RealIP, sessions) // the app's own middleware, first
//	r.Use(tidechi.Middleware(engine,
//		tidechi.PrincipalFrom(func(r *http.Request) (authz.Principal, error) {
//			u, ok := r.Context().Value(userKey{}).(*User) // stored by sessions
//			if !ok {
//				return authz.Anonymous, nil
//			}
//			return authz.Principal{ID: u.ID, Claims: map[string]any{"projects": u.Projects}}, nil
//		}),
//		middleware.WithTokenEndpoint(keyring), // any middleware.Option
//	))
//	r.Get("/", index) // the app's routes, untouched
//
// or, to put tide's routes behind a group's middleware only, add it in the
// group with a route under tide's prefix (see Middleware).
//
// Middleware registered before tide's runs first for tide's routes too:
// a session middleware stores the user PrincipalFrom reads, and one that
// refuses a request (a banned address, a rate limit) refuses it for tide as
// well. Every request that is not for a tide route reaches the app's
// routes untouched, including chi's 404 and 405 answers.
//
// The WebSocket upgrade takes over the connection, which needs a
// ResponseWriter that can be hijacked. chi's own middleware.Compress,
// Logger and Recoverer keep Hijack working; http.TimeoutHandler around the
// router cannot, and the upgrade is answered with a 500 error frame naming
// the cause instead. chi's middleware.Timeout only sets a context deadline:
// tide's connections do not use the request's context, so it does not end
// them.
//
// Nothing here holds state of its own: the package is a thin translation
// onto package middleware, which documents the routes, the origin check and
// the token endpoint.
package tidechi
