package tidechi_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"go.uber.org/goleak"

	"github.com/tidesync/tide/adapters/adaptertest"
	"github.com/tidesync/tide/adapters/tidechi"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the shared cases with tide added by r.Use, behind
// chi's own Logger, Recoverer, Compress and Timeout, which must keep the
// WebSocket upgrade working.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, app *adaptertest.App) http.Handler { return buildApp(t, app) })
}

type userKey struct{}

// buildApp is adaptertest's app on chi.
func buildApp(t *testing.T, app *adaptertest.App) http.Handler {
	opts := append([]middleware.Option{tidechi.PrincipalFrom(func(r *http.Request) (authz.Principal, error) {
		user, ok := r.Context().Value(userKey{}).(string)
		if !ok {
			return authz.Anonymous, nil
		}
		return app.Principal(user), nil
	})}, app.Options...)

	r := chi.NewRouter()
	r.Use(chimw.RequestLogger(&chimw.DefaultLogFormatter{Logger: testLogger{t}}), chimw.Recoverer, chimw.Compress(5), chimw.Timeout(time.Minute))
	//lint:ignore SA1019 the chain is a typical app's, deprecated middleware included: tide must work behind it
	r.Use(chimw.RealIP, ban(app), session(app))
	r.Use(tidechi.Middleware(app.Engine, opts...))
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			app.Reached(r)
			next.ServeHTTP(w, r)
		})
	})
	r.Post("/login", func(w http.ResponseWriter, r *http.Request) {
		id, err := app.Login(r.FormValue("user"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: adaptertest.SessionCookie, Value: id, Path: "/", HttpOnly: true})
		w.WriteHeader(http.StatusNoContent)
	})
	r.Get("/teapot", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-App", "teapot")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "short and stout")
	})
	r.Get("/origin", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, core.OriginFrom(r.Context()))
	})
	r.Get("/tide/about", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "about") })
	return r
}

func ban(app *adaptertest.App) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ip, _, err := net.SplitHostPort(r.RemoteAddr) // chi's RealIP has set it from X-Real-IP
			if err != nil {
				ip = r.RemoteAddr
			}
			if app.Banned(ip) {
				http.Error(w, "banned", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func session(app *adaptertest.App) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, err := r.Cookie(adaptertest.SessionCookie); err == nil {
				if user, ok := app.User(c.Value); ok {
					r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// testLogger sends chi's request log to the test's log.
type testLogger struct{ t *testing.T }

func (l testLogger) Print(v ...any) { l.t.Log(v...) }

// TestGroup: the package documentation's recipe for tide behind a group's
// middleware only: the group's middleware runs for tide's routes, tide
// answers them, and routes outside the group do not see either.
func TestGroup(t *testing.T) {
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Shutdown(context.Background())
	requireLogin := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Login") == "" {
				http.Error(w, "log in", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(requireLogin, tidechi.Middleware(eng))
		r.Handle("/tide/*", http.NotFoundHandler())
	})
	r.Get("/open", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "open") })
	for _, c := range []struct {
		path, login string
		status      int
		body        string
	}{
		{"/tide/changes", "", http.StatusUnauthorized, "log in"},
		{"/tide/changes", "alice", http.StatusMethodNotAllowed, `"code":"bad_frame"`}, // tide's answer: it takes POST
		{"/tide/nowhere", "alice", http.StatusNotFound, "not found"},
		{"/open", "", http.StatusOK, "open"},
	} {
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		if c.login != "" {
			req.Header.Set("X-Login", c.login)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%s (login %q): %d %s", c.path, c.login, w.Code, w.Body)
		}
	}
}
