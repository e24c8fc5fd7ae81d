package tidehttp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"go.uber.org/goleak"

	"github.com/tidesync/tide/adapters/adaptertest"
	"github.com/tidesync/tide/adapters/tidehttp"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) { adaptertest.Run(t, buildApp) }

type userKey struct{}

// buildApp is adaptertest's app on net/http: ServeMux routes, and the
// app's middleware as handler wrappers, outermost first.
func buildApp(t *testing.T, app *adaptertest.App) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		id, err := app.Login(r.FormValue("user"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: adaptertest.SessionCookie, Value: id, Path: "/", HttpOnly: true})
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /teapot", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-App", "teapot")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "short and stout")
	})
	mux.HandleFunc("GET /tide/about", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "about") })
	mux.HandleFunc("GET /origin", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, core.OriginFrom(r.Context()))
	})

	last := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		app.Reached(r)
		mux.ServeHTTP(w, r)
	})
	opts := append([]middleware.Option{tidehttp.PrincipalFrom(func(r *http.Request) (authz.Principal, error) {
		user, ok := r.Context().Value(userKey{}).(string)
		if !ok {
			return authz.Anonymous, nil
		}
		return app.Principal(user), nil
	})}, app.Options...)
	return ban(app, session(app, tidehttp.Wrap(last, app.Engine, opts...)))
}

func ban(app *adaptertest.App, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := r.Header.Get(adaptertest.RealIPHeader)
		if ip == "" {
			ip, _, _ = net.SplitHostPort(r.RemoteAddr)
		}
		if app.Banned(ip) {
			http.Error(w, "banned", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func session(app *adaptertest.App, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(adaptertest.SessionCookie); err == nil {
			if user, ok := app.User(c.Value); ok {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
			}
		}
		next.ServeHTTP(w, r)
	})
}
