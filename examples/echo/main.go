// Command echo is tide in an Echo app: a task list per project, synced
// live to every browser of the project's members. The app has its own
// cookie login; tide reuses it through one middleware line.
//
//	go run ./examples/echo
//
// Open the printed URL, log in as alice (projects apollo and gemini) in one
// browser and as bob (gemini) in another (a private window will do); the
// password is "tide". Edits to gemini show in both, apollo only for alice.
//
// It runs on the in-memory feed; with DATABASE_URL set it runs on Postgres
// instead (the tasks table is created if missing and synced, including rows
// changed with plain SQL):
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go run ./examples/echo
//
// This file is all that Echo changes: the routes, the session middleware,
// the tide line and the handlers. The rest (the Task resource and its
// policy, the accounts, the sessions, the store, the page, the server's
// life) is the same for every framework, in examples/internal/taskapp.
package main

import (
	"net/http"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/tidesync/tide/adapters/tideecho"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/examples/internal/taskapp"
)

func main() { taskapp.Main("Echo", "127.0.0.1:8081", routes) }

// routes is the app on Echo: the session middleware, the tide line, the
// page, the login and logout, and the API over st's tasks.
func routes(st *taskapp.Store, sess *taskapp.Sessions) http.Handler {
	page := taskapp.Page("Echo")

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(echomw.Recover())
	e.Use(withSession(sess))
	// The one line: tide's routes under /tide, with the user the session
	// middleware above put in the echo.Context.
	e.Use(tideecho.Middleware(st.Engine, tideecho.PrincipalFrom(func(c echo.Context) (authz.Principal, error) {
		return taskapp.Principal(currentUser(c)), nil
	})))

	e.GET("/", func(c echo.Context) error { return c.HTMLBlob(http.StatusOK, page) })
	e.POST("/login", func(c echo.Context) error {
		id, ok := sess.Login(c.FormValue("user"), c.FormValue("password"))
		if !ok {
			return c.Redirect(http.StatusSeeOther, "/?failed")
		}
		c.SetCookie(taskapp.Cookie(id))
		return c.Redirect(http.StatusSeeOther, "/")
	})
	e.POST("/logout", func(c echo.Context) error {
		if cookie, err := c.Cookie(taskapp.CookieName); err == nil {
			if u := sess.Logout(cookie.Value); u != nil {
				st.Engine.Revoke(u.Name) // after the session: a reconnect is anonymous
			}
		}
		c.SetCookie(taskapp.ExpiredCookie())
		return c.Redirect(http.StatusSeeOther, "/")
	})

	api := e.Group("/api", requireLogin)
	api.GET("/me", func(c echo.Context) error { return c.JSON(http.StatusOK, currentUser(c)) })
	api.POST("/tasks", func(c echo.Context) error {
		var in taskapp.Input
		if err := c.Bind(&in); err != nil {
			return err
		}
		t, err := st.Create(c.Request().Context(), currentUser(c), in)
		if err != nil {
			return echo.NewHTTPError(taskapp.Status(err), err.Error())
		}
		return c.JSON(http.StatusCreated, t)
	})
	api.PATCH("/tasks/:id", func(c echo.Context) error {
		var in taskapp.Input
		if err := c.Bind(&in); err != nil {
			return err
		}
		if err := st.Update(c.Request().Context(), currentUser(c), c.Param("id"), in); err != nil {
			return echo.NewHTTPError(taskapp.Status(err), err.Error())
		}
		return c.NoContent(http.StatusNoContent)
	})
	api.DELETE("/tasks/:id", func(c echo.Context) error {
		if err := st.Remove(c.Request().Context(), currentUser(c), c.Param("id")); err != nil {
			return echo.NewHTTPError(taskapp.Status(err), err.Error())
		}
		return c.NoContent(http.StatusNoContent)
	})

	return e
}

// withSession is the app's session middleware: it puts the logged-in user,
// if any, in the echo.Context.
func withSession(sess *taskapp.Sessions) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cookie, err := c.Cookie(taskapp.CookieName); err == nil {
				if u := sess.User(cookie.Value); u != nil {
					c.Set("user", u)
				}
			}
			return next(c)
		}
	}
}

// currentUser returns the user withSession found, or nil.
func currentUser(c echo.Context) *taskapp.User {
	u, _ := c.Get("user").(*taskapp.User)
	return u
}

// requireLogin refuses the API to visitors who are not logged in.
func requireLogin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if currentUser(c) == nil {
			return echo.NewHTTPError(http.StatusUnauthorized, "log in first")
		}
		return next(c)
	}
}
