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
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/tidesync/tide/adapters/tideecho"
	"github.com/tidesync/tide/authz"
)

//go:embed index.html
var indexHTML []byte

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address (a free port is picked if it is taken)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(ctx, *addr, os.Getenv("DATABASE_URL"), log, func(url string) {
		fmt.Printf("tide + Echo example: %s (log in as alice or bob, password %q)\n", url, demoPassword)
	})
	if err != nil {
		log.Error("echo example failed", "err", err)
		os.Exit(1)
	}
}

// run serves the app on addr until ctx ends; ready gets its URL once it
// listens. databaseURL "" means the in-memory feed.
func run(ctx context.Context, addr, databaseURL string, log *slog.Logger, ready func(url string)) error {
	st, err := openStore(ctx, databaseURL, log)
	if err != nil {
		return err
	}
	defer st.close()
	sess := newSessions()

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(echomw.Recover())
	e.Use(withSession(sess))
	// The one line: tide's routes under /tide, with the user the session
	// middleware above put in the echo.Context.
	e.Use(tideecho.Middleware(st.engine, tideecho.PrincipalFrom(func(c echo.Context) (authz.Principal, error) {
		return principal(currentUser(c)), nil
	})))

	e.GET("/", func(c echo.Context) error { return c.HTMLBlob(http.StatusOK, indexHTML) })
	e.POST("/login", func(c echo.Context) error {
		id, ok := sess.login(c.FormValue("user"), c.FormValue("password"))
		if !ok {
			return c.Redirect(http.StatusSeeOther, "/?failed")
		}
		c.SetCookie(sessionCookieFor(id))
		return c.Redirect(http.StatusSeeOther, "/")
	})
	e.POST("/logout", func(c echo.Context) error {
		if cookie, err := c.Cookie(sessionCookie); err == nil {
			if u := sess.logout(cookie.Value); u != nil {
				st.engine.Revoke(u.Name) // after the session: a reconnect is anonymous
			}
		}
		c.SetCookie(expiredSessionCookie())
		return c.Redirect(http.StatusSeeOther, "/")
	})

	api := e.Group("/api", requireLogin)
	api.GET("/me", func(c echo.Context) error { return c.JSON(http.StatusOK, currentUser(c)) })
	api.POST("/tasks", func(c echo.Context) error {
		var in taskInput
		if err := c.Bind(&in); err != nil {
			return err
		}
		t, err := st.create(c.Request().Context(), currentUser(c), in)
		if err != nil {
			return echo.NewHTTPError(statusOf(err), err.Error())
		}
		return c.JSON(http.StatusCreated, t)
	})
	api.PATCH("/tasks/:id", func(c echo.Context) error {
		var in taskInput
		if err := c.Bind(&in); err != nil {
			return err
		}
		if err := st.update(c.Request().Context(), currentUser(c), c.Param("id"), in); err != nil {
			return echo.NewHTTPError(statusOf(err), err.Error())
		}
		return c.NoContent(http.StatusNoContent)
	})
	api.DELETE("/tasks/:id", func(c echo.Context) error {
		if err := st.remove(c.Request().Context(), currentUser(c), c.Param("id")); err != nil {
			return echo.NewHTTPError(statusOf(err), err.Error())
		}
		return c.NoContent(http.StatusNoContent)
	})

	return serve(ctx, addr, e, st.engine, log, ready)
}

// withSession is the app's session middleware: it puts the logged-in user,
// if any, in the echo.Context.
func withSession(sess *sessions) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cookie, err := c.Cookie(sessionCookie); err == nil {
				if u := sess.user(cookie.Value); u != nil {
					c.Set("user", u)
				}
			}
			return next(c)
		}
	}
}

// currentUser returns the user withSession found, or nil.
func currentUser(c echo.Context) *User {
	u, _ := c.Get("user").(*User)
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
