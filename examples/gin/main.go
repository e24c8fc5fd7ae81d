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
//
// This file is all that Gin changes: the routes, the session middleware,
// the tide line and the handlers. The rest (the Task resource and its
// policy, the accounts, the sessions, the store, the page, the server's
// life) is the same for every framework, in examples/internal/taskapp.
package main

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tidesync/tide/adapters/tidegin"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/examples/internal/taskapp"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	taskapp.Main("Gin", "127.0.0.1:8082", routes)
}

// routes is the app on Gin: the session middleware, the tide line, the
// page, the login and logout, and the API over st's tasks.
func routes(st *taskapp.Store, sess *taskapp.Sessions) http.Handler {
	page := taskapp.Page("Gin")

	r := gin.New()
	r.Use(gin.Recovery())
	r.Use(withSession(sess))
	// The one line: tide's routes under /tide, with the user the session
	// middleware above put in the gin.Context.
	r.Use(tidegin.Middleware(st.Engine, tidegin.PrincipalFrom(func(c *gin.Context) (authz.Principal, error) {
		return taskapp.Principal(currentUser(c)), nil
	})))

	r.GET("/", func(c *gin.Context) { c.Data(http.StatusOK, "text/html; charset=utf-8", page) })
	r.POST("/login", func(c *gin.Context) {
		id, ok := sess.Login(c.PostForm("user"), c.PostForm("password"))
		if !ok {
			c.Redirect(http.StatusSeeOther, "/?failed")
			return
		}
		http.SetCookie(c.Writer, taskapp.Cookie(id))
		c.Redirect(http.StatusSeeOther, "/")
	})
	r.POST("/logout", func(c *gin.Context) {
		if id, err := c.Cookie(taskapp.CookieName); err == nil {
			if u := sess.Logout(id); u != nil {
				st.Engine.Revoke(u.Name) // after the session: a reconnect is anonymous
			}
		}
		http.SetCookie(c.Writer, taskapp.ExpiredCookie())
		c.Redirect(http.StatusSeeOther, "/")
	})

	api := r.Group("/api", requireLogin)
	api.GET("/me", func(c *gin.Context) { c.JSON(http.StatusOK, currentUser(c)) })
	api.POST("/tasks", func(c *gin.Context) {
		var in taskapp.Input
		if err := c.ShouldBindJSON(&in); err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		t, err := st.Create(c.Request.Context(), currentUser(c), in)
		if err != nil {
			c.String(taskapp.Status(err), err.Error())
			return
		}
		c.JSON(http.StatusCreated, t)
	})
	api.PATCH("/tasks/:id", func(c *gin.Context) {
		var in taskapp.Input
		if err := c.ShouldBindJSON(&in); err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		if err := st.Update(c.Request.Context(), currentUser(c), c.Param("id"), in); err != nil {
			c.String(taskapp.Status(err), err.Error())
			return
		}
		c.Status(http.StatusNoContent)
	})
	api.DELETE("/tasks/:id", func(c *gin.Context) {
		if err := st.Remove(c.Request.Context(), currentUser(c), c.Param("id")); err != nil {
			c.String(taskapp.Status(err), err.Error())
			return
		}
		c.Status(http.StatusNoContent)
	})

	return r
}

// withSession is the app's session middleware: it puts the logged-in user,
// if any, in the gin.Context.
func withSession(sess *taskapp.Sessions) gin.HandlerFunc {
	return func(c *gin.Context) {
		if id, err := c.Cookie(taskapp.CookieName); err == nil {
			if u := sess.User(id); u != nil {
				c.Set("user", u)
			}
		}
		c.Next()
	}
}

// currentUser returns the user withSession found, or nil.
func currentUser(c *gin.Context) *taskapp.User {
	v, _ := c.Get("user")
	u, _ := v.(*taskapp.User)
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
