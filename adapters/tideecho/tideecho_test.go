package tideecho_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"go.uber.org/goleak"

	"github.com/tidesync/tide/adapters/adaptertest"
	"github.com/tidesync/tide/adapters/tideecho"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the shared cases behind Echo's own Recover, logger,
// Gzip and BodyDump middleware, whose writers must keep the WebSocket
// upgrade working.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, app *adaptertest.App) http.Handler {
		return buildApp(t, app, nil)
	})
}

// TestTimeoutMiddleware: under Echo's Timeout middleware (an
// http.TimeoutHandler inside Echo's writer, which still has a Hijack
// method) the upgrade is answered with the error naming the cause, not a
// bare 500; skipping Timeout for tide's prefix makes it work.
func TestTimeoutMiddleware(t *testing.T) {
	engine, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Shutdown(context.Background())
	for _, skip := range []bool{false, true} {
		e := echo.New()
		//lint:ignore SA1019 the timeout middleware that breaks WebSocket upgrades is the case under test
		e.Use(echomw.TimeoutWithConfig(echomw.TimeoutConfig{
			Timeout: time.Minute,
			Skipper: func(c echo.Context) bool { return skip && strings.HasPrefix(c.Request().URL.Path, "/tide/") },
		}))
		e.Use(tideecho.Middleware(engine))
		srv := httptest.NewServer(e)
		ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws", nil)
		switch {
		case skip && err != nil:
			t.Errorf("with Timeout skipped: %v", err)
		case skip:
			ws.Close()
		case err == nil:
			ws.Close()
			t.Error("upgraded through Echo's Timeout")
		default:
			body, _ := io.ReadAll(resp.Body)
			f, err := protocol.DecodeServerFrame(body)
			if resp.StatusCode != http.StatusInternalServerError || err != nil || f.Code != protocol.CodeInternal || !strings.Contains(f.Message, "cannot be hijacked") {
				t.Errorf("under Timeout: %d %s", resp.StatusCode, body)
			}
		}
		srv.Close()
	}
}

// buildApp is adaptertest's app on Echo. extra runs first, if given.
func buildApp(t *testing.T, app *adaptertest.App, extra echo.MiddlewareFunc) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		app.Reached(c.Request()) // an error returned for a tide route would show here
		e.DefaultHTTPErrorHandler(err, c)
	}
	if extra != nil {
		e.Use(extra)
	}
	e.Use(echomw.Recover(), echomw.RequestLoggerWithConfig(echomw.RequestLoggerConfig{
		LogStatus: true, LogURI: true,
		LogValuesFunc: func(c echo.Context, v echomw.RequestLoggerValues) error {
			t.Logf("%s %d", v.URI, v.Status)
			return nil
		},
	}), echomw.Gzip(), echomw.BodyDump(func(echo.Context, []byte, []byte) {}))
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the ban
		return func(c echo.Context) error {
			if app.Banned(c.RealIP()) {
				return c.String(http.StatusForbidden, "banned")
			}
			return next(c)
		}
	})
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the session
		return func(c echo.Context) error {
			if cookie, err := c.Cookie(adaptertest.SessionCookie); err == nil {
				if user, ok := app.User(cookie.Value); ok {
					c.Set("user", user)
				}
			}
			return next(c)
		}
	})
	opts := append([]middleware.Option{tideecho.PrincipalFrom(func(c echo.Context) (authz.Principal, error) {
		user, ok := c.Get("user").(string)
		if !ok {
			return authz.Anonymous, nil
		}
		return app.Principal(user), nil
	})}, app.Options...)
	e.Use(tideecho.Middleware(app.Engine, opts...))
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			app.Reached(c.Request())
			return next(c)
		}
	})

	e.POST("/login", func(c echo.Context) error {
		id, err := app.Login(c.FormValue("user"))
		if err != nil {
			return echo.NewHTTPError(http.StatusUnauthorized, err.Error())
		}
		c.SetCookie(&http.Cookie{Name: adaptertest.SessionCookie, Value: id, Path: "/", HttpOnly: true})
		return c.NoContent(http.StatusNoContent)
	})
	e.GET("/teapot", func(c echo.Context) error {
		c.Response().Header().Set("X-App", "teapot")
		return c.String(http.StatusTeapot, "short and stout")
	})
	e.GET("/tide/about", func(c echo.Context) error { return c.String(http.StatusOK, "about") })
	e.GET("/origin", func(c echo.Context) error {
		return c.String(http.StatusOK, core.OriginFrom(c.Request().Context()))
	})
	return e
}

// TestGroup: the package documentation's recipe for tide behind a group's
// middleware only: the group's middleware runs for tide's routes, tide
// answers them, and routes outside the group do not see either.
func TestGroup(t *testing.T) {
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Shutdown(context.Background())
	requireLogin := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Request().Header.Get("X-Login") == "" {
				return c.String(http.StatusUnauthorized, "log in")
			}
			return next(c)
		}
	}
	e := echo.New()
	g := e.Group("/tide", requireLogin, tideecho.Middleware(eng))
	g.Any("/*", echo.NotFoundHandler)
	e.GET("/open", func(c echo.Context) error { return c.String(http.StatusOK, "open") })
	for _, c := range []struct {
		path, login string
		status      int
		body        string
	}{
		{"/tide/changes", "", http.StatusUnauthorized, "log in"},
		{"/tide/changes", "alice", http.StatusMethodNotAllowed, `"code":"bad_frame"`}, // tide's answer: it takes POST
		{"/tide/nowhere", "alice", http.StatusNotFound, "Not Found"},
		{"/open", "", http.StatusOK, "open"},
	} {
		r := httptest.NewRequest(http.MethodGet, c.path, nil)
		if c.login != "" {
			r.Header.Set("X-Login", c.login)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%s (login %q): %d %s", c.path, c.login, w.Code, w.Body)
		}
	}
}
