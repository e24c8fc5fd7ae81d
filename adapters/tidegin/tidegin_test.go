package tidegin_test

import (
	"net/http"
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
