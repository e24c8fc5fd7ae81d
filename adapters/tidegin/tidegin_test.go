package tidegin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"go.uber.org/goleak"

	"github.com/tidesync/tide/adapters/adaptertest"
	"github.com/tidesync/tide/adapters/tidegin"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

// TestConformance runs the shared cases behind Gin's own Logger and
// Recovery, with tide's routes left unrouted in Gin (so Gin presets 404
// for them before running the middleware).
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, app *adaptertest.App) http.Handler { return buildApp(t, app) })
}

// buildApp is adaptertest's app on Gin.
func buildApp(t *testing.T, app *adaptertest.App) http.Handler {
	r := gin.New()
	r.Use(gin.LoggerWithWriter(testWriter{t}), gin.Recovery())
	r.Use(func(c *gin.Context) { // the ban
		if app.Banned(c.ClientIP()) {
			c.String(http.StatusForbidden, "banned")
			c.Abort()
			return
		}
		c.Next()
	})
	r.Use(func(c *gin.Context) { // the session
		if id, err := c.Cookie(adaptertest.SessionCookie); err == nil {
			if user, ok := app.User(id); ok {
				c.Set("user", user)
			}
		}
		c.Next()
	})
	opts := append([]middleware.Option{tidegin.PrincipalFrom(func(c *gin.Context) (authz.Principal, error) {
		user := c.GetString("user")
		if user == "" {
			return authz.Anonymous, nil
		}
		return app.Principal(user), nil
	})}, app.Options...)
	r.Use(tidegin.Middleware(app.Engine, opts...))
	r.Use(func(c *gin.Context) {
		app.Reached(c.Request)
		c.Next()
	})

	r.POST("/login", func(c *gin.Context) {
		id, err := app.Login(c.PostForm("user"))
		if err != nil {
			c.String(http.StatusUnauthorized, err.Error())
			return
		}
		c.SetCookie(adaptertest.SessionCookie, id, 0, "/", "", false, true)
		c.Status(http.StatusNoContent)
	})
	r.GET("/teapot", func(c *gin.Context) {
		c.Header("X-App", "teapot")
		c.String(http.StatusTeapot, "short and stout")
	})
	r.GET("/tide/about", func(c *gin.Context) { c.String(http.StatusOK, "about") })
	r.GET("/origin", func(c *gin.Context) { c.String(http.StatusOK, core.OriginFrom(c.Request.Context())) })
	return r
}

// testWriter sends Gin's request log to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
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
	requireLogin := func(c *gin.Context) {
		if c.GetHeader("X-Login") == "" {
			c.String(http.StatusUnauthorized, "log in")
			c.Abort()
			return
		}
		c.Next()
	}
	r := gin.New()
	g := r.Group("/tide", requireLogin, tidegin.Middleware(eng))
	g.Any("/*path", func(c *gin.Context) { c.String(http.StatusNotFound, "not tide's") })
	r.GET("/open", func(c *gin.Context) { c.String(http.StatusOK, "open") })
	for _, c := range []struct {
		path, login string
		status      int
		body        string
	}{
		{"/tide/changes", "", http.StatusUnauthorized, "log in"},
		{"/tide/changes", "alice", http.StatusMethodNotAllowed, `"code":"bad_frame"`}, // tide's answer: it takes POST
		{"/tide/nowhere", "alice", http.StatusNotFound, "not tide's"},
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
