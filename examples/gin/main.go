// Command gin is tide in a Gin app: a task list per project, synced live
// to every browser of the project's members. The app has its own cookie
// login; tide reuses it through one middleware line.
//
//	go run ./examples/gin
//
// Open the printed URL, log in as alice (projects apollo and gemini) in one
// browser and as bob (gemini) in another (a private window will do); the
// password is "tide". Edits to gemini show in both, apollo only for alice.
//
// It runs on the in-memory feed; with DATABASE_URL set it runs on Postgres
// instead (the tasks table is created if missing and synced, including rows
// changed with plain SQL):
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go run ./examples/gin
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

	"github.com/gin-gonic/gin"

	"github.com/tidesync/tide/adapters/tidegin"
	"github.com/tidesync/tide/authz"
)

//go:embed index.html
var indexHTML []byte

func main() {
	addr := flag.String("addr", "127.0.0.1:8082", "listen address (a free port is picked if it is taken)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	gin.SetMode(gin.ReleaseMode)
	err := run(ctx, *addr, os.Getenv("DATABASE_URL"), log, func(url string) {
		fmt.Printf("tide + Gin example: %s (log in as alice or bob, password %q)\n", url, demoPassword)
	})
	if err != nil {
		log.Error("gin example failed", "err", err)
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

	r := gin.New()
	r.Use(gin.Recovery())
	r.Use(withSession(sess))
	// The one line: tide's routes under /tide, with the user the session
	// middleware above put in the gin.Context.
	r.Use(tidegin.Middleware(st.engine, tidegin.PrincipalFrom(func(c *gin.Context) (authz.Principal, error) {
		return principal(currentUser(c)), nil
	})))

	r.GET("/", func(c *gin.Context) { c.Data(http.StatusOK, "text/html; charset=utf-8", indexHTML) })
	r.POST("/login", func(c *gin.Context) {
		id, ok := sess.login(c.PostForm("user"), c.PostForm("password"))
		if !ok {
			c.Redirect(http.StatusSeeOther, "/?failed")
			return
		}
		http.SetCookie(c.Writer, sessionCookieFor(id))
		c.Redirect(http.StatusSeeOther, "/")
	})
	r.POST("/logout", func(c *gin.Context) {
		if id, err := c.Cookie(sessionCookie); err == nil {
			if u := sess.logout(id); u != nil {
				st.engine.Revoke(u.Name) // after the session: a reconnect is anonymous
			}
		}
		http.SetCookie(c.Writer, expiredSessionCookie())
		c.Redirect(http.StatusSeeOther, "/")
	})

	api := r.Group("/api", requireLogin)
	api.GET("/me", func(c *gin.Context) { c.JSON(http.StatusOK, currentUser(c)) })
	api.POST("/tasks", func(c *gin.Context) {
		var in taskInput
		if err := c.ShouldBindJSON(&in); err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		t, err := st.create(c.Request.Context(), currentUser(c), in)
		if err != nil {
			c.String(statusOf(err), err.Error())
			return
		}
		c.JSON(http.StatusCreated, t)
	})
	api.PATCH("/tasks/:id", func(c *gin.Context) {
		var in taskInput
		if err := c.ShouldBindJSON(&in); err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		if err := st.update(c.Request.Context(), currentUser(c), c.Param("id"), in); err != nil {
			c.String(statusOf(err), err.Error())
			return
		}
		c.Status(http.StatusNoContent)
	})
	api.DELETE("/tasks/:id", func(c *gin.Context) {
		if err := st.remove(c.Request.Context(), currentUser(c), c.Param("id")); err != nil {
			c.String(statusOf(err), err.Error())
			return
		}
		c.Status(http.StatusNoContent)
	})

	return serve(ctx, addr, r, st.engine, log, ready)
}

// withSession is the app's session middleware: it puts the logged-in user,
// if any, in the gin.Context.
func withSession(sess *sessions) gin.HandlerFunc {
	return func(c *gin.Context) {
		if id, err := c.Cookie(sessionCookie); err == nil {
			if u := sess.user(id); u != nil {
				c.Set("user", u)
			}
		}
		c.Next()
	}
}

// currentUser returns the user withSession found, or nil.
func currentUser(c *gin.Context) *User {
	v, _ := c.Get("user")
	u, _ := v.(*User)
	return u
}

// requireLogin refuses the API to visitors who are not logged in.
func requireLogin(c *gin.Context) {
	if currentUser(c) == nil {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "log in first"})
		return
	}
	c.Next()
}
