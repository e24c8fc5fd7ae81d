// Command nethttp is tide in a plain net/http app: a task list per
// project, synced live to every browser of the project's members. The app
// has its own cookie login; tide reuses it through one wrapping call.
//
//	go run ./examples/nethttp
//
// Open the printed URL, log in as alice (projects apollo and gemini) in one
// browser and as bob (gemini) in another (a private window will do); the
// password is "tide". Edits to gemini show in both, apollo only for alice.
//
// It runs on the in-memory feed; with DATABASE_URL set it runs on Postgres
// instead (the tasks table is created if missing and synced, including rows
// changed with plain SQL):
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go run ./examples/nethttp
//
// This file is all that net/http changes: the routes, the session
// middleware, the tide line and the handlers. The rest (the Task resource
// and its policy, the accounts, the sessions, the store, the page, the
// server's life) is the same for every framework, in
// examples/internal/taskapp.
package main

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/tidesync/tide/adapters/tidehttp"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/examples/internal/taskapp"
)

func main() { taskapp.Main("net/http", "127.0.0.1:8084", routes) }

// routes is the app on net/http: the session middleware, the tide line, the
// page, the login and logout, and the API over st's tasks.
func routes(st *taskapp.Store, sess *taskapp.Sessions) http.Handler {
	page := taskapp.Page("net/http")

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		id, ok := sess.Login(r.FormValue("user"), r.FormValue("password"))
		if !ok {
			http.Redirect(w, r, "/?failed", http.StatusSeeOther)
			return
		}
		http.SetCookie(w, taskapp.Cookie(id))
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	mux.HandleFunc("POST /logout", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(taskapp.CookieName); err == nil {
			if u := sess.Logout(c.Value); u != nil {
				st.Engine.Revoke(u.Name) // after the session: a reconnect is anonymous
			}
		}
		http.SetCookie(w, taskapp.ExpiredCookie())
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	mux.Handle("GET /api/me", requireLogin(func(w http.ResponseWriter, r *http.Request, u *taskapp.User) {
		writeJSON(w, http.StatusOK, u)
	}))
	mux.Handle("POST /api/tasks", requireLogin(func(w http.ResponseWriter, r *http.Request, u *taskapp.User) {
		in, ok := decodeInput(w, r)
		if !ok {
			return
		}
		t, err := st.Create(r.Context(), u, in)
		if err != nil {
			http.Error(w, err.Error(), taskapp.Status(err))
			return
		}
		writeJSON(w, http.StatusCreated, t)
	}))
	mux.Handle("PATCH /api/tasks/{id}", requireLogin(func(w http.ResponseWriter, r *http.Request, u *taskapp.User) {
		in, ok := decodeInput(w, r)
		if !ok {
			return
		}
		if err := st.Update(r.Context(), u, r.PathValue("id"), in); err != nil {
			http.Error(w, err.Error(), taskapp.Status(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.Handle("DELETE /api/tasks/{id}", requireLogin(func(w http.ResponseWriter, r *http.Request, u *taskapp.User) {
		if err := st.Remove(r.Context(), u, r.PathValue("id")); err != nil {
			http.Error(w, err.Error(), taskapp.Status(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))

	// The one line: tide's routes under /tide in front of the app, inside
	// the session middleware, whose user PrincipalFrom reads.
	handler := withSession(sess, tidehttp.Wrap(mux, st.Engine, tidehttp.PrincipalFrom(func(r *http.Request) (authz.Principal, error) {
		return taskapp.Principal(currentUser(r)), nil
	})))
	return handler
}

type userKey struct{}

// withSession is the app's session middleware: it puts the logged-in user,
// if any, in the request's context.
func withSession(sess *taskapp.Sessions, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(taskapp.CookieName); err == nil {
			if u := sess.User(c.Value); u != nil {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// currentUser returns the user withSession found, or nil.
func currentUser(r *http.Request) *taskapp.User {
	u, _ := r.Context().Value(userKey{}).(*taskapp.User)
	return u
}

// requireLogin refuses the API to visitors who are not logged in.
func requireLogin(h func(http.ResponseWriter, *http.Request, *taskapp.User)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := currentUser(r)
		if u == nil {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "log in first"})
			return
		}
		h(w, r, u)
	})
}

func decodeInput(w http.ResponseWriter, r *http.Request) (taskapp.Input, bool) {
	var in taskapp.Input
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil {
		http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
		return in, false
	}
	return in, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
