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
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"

	"github.com/tidesync/tide/adapters/tidechi"
	"github.com/tidesync/tide/authz"
)

//go:embed index.html
var indexHTML []byte

func main() {
	addr := flag.String("addr", "127.0.0.1:8083", "listen address (a free port is picked if it is taken)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(ctx, *addr, os.Getenv("DATABASE_URL"), log, func(url string) {
		fmt.Printf("tide + chi example: %s (log in as alice or bob, password %q)\n", url, demoPassword)
	})
	if err != nil {
		log.Error("chi example failed", "err", err)
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

	r := chi.NewRouter()
	r.Use(chimw.Recoverer, chimw.Compress(5)) // Compress keeps the WebSocket upgrade working
	r.Use(withSession(sess))
	// The one line: tide's routes under /tide, with the user the session
	// middleware above put in the request's context.
	r.Use(tidechi.Middleware(st.engine, tidechi.PrincipalFrom(func(r *http.Request) (authz.Principal, error) {
		return principal(currentUser(r)), nil
	})))

	r.Get("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(indexHTML)
	})
	r.Post("/login", func(w http.ResponseWriter, r *http.Request) {
		id, ok := sess.login(r.FormValue("user"), r.FormValue("password"))
		if !ok {
			http.Redirect(w, r, "/?failed", http.StatusSeeOther)
			return
		}
		http.SetCookie(w, sessionCookieFor(id))
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	r.Post("/logout", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(sessionCookie); err == nil {
			if u := sess.logout(c.Value); u != nil {
				st.engine.Revoke(u.Name) // after the session: a reconnect is anonymous
			}
		}
		http.SetCookie(w, expiredSessionCookie())
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
			t, err := st.create(r.Context(), currentUser(r), in)
			if err != nil {
				http.Error(w, err.Error(), statusOf(err))
				return
			}
			writeJSON(w, http.StatusCreated, t)
		})
		r.Patch("/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
			in, ok := decodeInput(w, r)
			if !ok {
				return
			}
			if err := st.update(r.Context(), currentUser(r), chi.URLParam(r, "id"), in); err != nil {
				http.Error(w, err.Error(), statusOf(err))
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		r.Delete("/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
			if err := st.remove(r.Context(), currentUser(r), chi.URLParam(r, "id")); err != nil {
				http.Error(w, err.Error(), statusOf(err))
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	})

	return serve(ctx, addr, r, st.engine, log, ready)
}

type userKey struct{}

// withSession is the app's session middleware: it puts the logged-in user,
// if any, in the request's context.
func withSession(sess *sessions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, err := r.Cookie(sessionCookie); err == nil {
				if u := sess.user(c.Value); u != nil {
					r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// currentUser returns the user withSession found, or nil.
func currentUser(r *http.Request) *User {
	u, _ := r.Context().Value(userKey{}).(*User)
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

func decodeInput(w http.ResponseWriter, r *http.Request) (taskInput, bool) {
	var in taskInput
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
