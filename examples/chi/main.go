// Command chi is tide in a chi app: a task list per project, synced live
// to every browser of the project's members. The app has its own cookie
// login; tide reuses it through one middleware line.
//
//	go run ./examples/chi
//
// Open the printed URL, log in as alice (projects apollo and gemini) in one
// browser and as bob (gemini) in another (a private window will do); the
// password is "tide". Edits to gemini show in both, apollo only for alice.
//
// It runs on the in-memory feed; with DATABASE_URL set it runs on Postgres
// instead (the tasks table is created if missing and synced, including rows
// changed with plain SQL):
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go run ./examples/chi
//
// This file is all that chi changes: the routes, the session middleware,
// the tide line and the handlers. The rest (the Task resource and its
// policy, the accounts, the sessions, the store, the page, the server's
// life) is the same for every framework, in examples/internal/taskapp.
package main

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"

	"github.com/tidesync/tide/adapters/tidechi"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/examples/internal/taskapp"
)

func main() { taskapp.Main("chi", "127.0.0.1:8083", routes) }

// routes is the app on chi: the session middleware, the tide line, the
// page, the login and logout, and the API over st's tasks.
func routes(st *taskapp.Store, sess *taskapp.Sessions) http.Handler {
	page := taskapp.Page("chi")

	r := chi.NewRouter()
	r.Use(chimw.Recoverer, chimw.Compress(5)) // Compress keeps the WebSocket upgrade working
	r.Use(withSession(sess))
	// The one line: tide's routes under /tide, with the user the session
	// middleware above put in the request's context.
	r.Use(tidechi.Middleware(st.Engine, tidechi.PrincipalFrom(func(r *http.Request) (authz.Principal, error) {
		return taskapp.Principal(currentUser(r)), nil
	})))

	r.Get("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	})
	r.Post("/login", func(w http.ResponseWriter, r *http.Request) {
		id, ok := sess.Login(r.FormValue("user"), r.FormValue("password"))
		if !ok {
			http.Redirect(w, r, "/?failed", http.StatusSeeOther)
			return
		}
		http.SetCookie(w, taskapp.Cookie(id))
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	r.Post("/logout", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(taskapp.CookieName); err == nil {
			if u := sess.Logout(c.Value); u != nil {
				st.Engine.Revoke(u.Name) // after the session: a reconnect is anonymous
			}
		}
		http.SetCookie(w, taskapp.ExpiredCookie())
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})

	r.Route("/api", func(r chi.Router) {
		r.Use(requireLogin)
		r.Get("/me", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, currentUser(r)) })
		r.Post("/tasks", func(w http.ResponseWriter, r *http.Request) {
			in, ok := decodeInput(w, r)
			if !ok {
				return
			}
			t, err := st.Create(r.Context(), currentUser(r), in)
			if err != nil {
				http.Error(w, err.Error(), taskapp.Status(err))
				return
			}
			writeJSON(w, http.StatusCreated, t)
		})
		r.Patch("/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
			in, ok := decodeInput(w, r)
			if !ok {
				return
			}
			if err := st.Update(r.Context(), currentUser(r), chi.URLParam(r, "id"), in); err != nil {
				http.Error(w, err.Error(), taskapp.Status(err))
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		r.Delete("/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
			if err := st.Remove(r.Context(), currentUser(r), chi.URLParam(r, "id")); err != nil {
				http.Error(w, err.Error(), taskapp.Status(err))
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	})

	return r
}

type userKey struct{}

// withSession is the app's session middleware: it puts the logged-in user,
// if any, in the request's context.
func withSession(sess *taskapp.Sessions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, err := r.Cookie(taskapp.CookieName); err == nil {
				if u := sess.User(c.Value); u != nil {
					r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// currentUser returns the user withSession found, or nil.
func currentUser(r *http.Request) *taskapp.User {
	u, _ := r.Context().Value(userKey{}).(*taskapp.User)
	return u
}

// requireLogin refuses the API to visitors who are not logged in.
func requireLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if currentUser(r) == nil {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "log in first"})
			return
		}
		next.ServeHTTP(w, r)
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
