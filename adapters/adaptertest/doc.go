// Package adaptertest is the conformance suite every tide framework
// adapter passes: one set of cases, run against a small test app built on
// each framework, over a real HTTP server on loopback.
//
// An adapter's test builds the app Factory describes, in the framework's
// own terms (its router, its middleware, its context), and hands it to Run:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, func(t *testing.T, app *adaptertest.App) http.Handler {
//			e := echo.New()
//			e.Use(ban(app), session(app)) // the app's middleware, before tide
//			e.Use(tideecho.Middleware(app.Engine, append([]middleware.Option{
//				tideecho.PrincipalFrom(userOf(app))}, app.Options...)...))
//			e.POST("/login", login(app))
//			// … the other routes of Factory
//			return e
//		})
//	}
//
// The cases check what the adapters promise: an anonymous token request is
// refused and a session from the app's own login gets a token; subscribing
// over a WebSocket (with the cookie, or with the token in hello) gets the
// snapshot, the replay after a cursor and live changes, also through the
// Go client and the polling endpoint; the app's routes, statuses, headers
// and 404s pass through untouched while tide's routes go no further;
// middleware before tide is respected (a ban still refuses, a session is
// seen by the principal hook); a socket keeps the principal it was opened
// with while the framework reuses its pooled contexts; the origin check
// and other options pass through; and behind a writer that cannot be
// hijacked the upgrade gets an error naming the cause. The cases use no
// sleeps and no timing assertions; they pass with -race.
package adaptertest
