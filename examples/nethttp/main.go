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

	"github.com/tidesync/tide/adapters/tidehttp"
	"github.com/tidesync/tide/authz"
)

//go:embed index.html
var indexHTML []byte

func main() {
	addr := flag.String("addr", "127.0.0.1:8084", "listen address (a free port is picked if it is taken)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(ctx, *addr, os.Getenv("DATABASE_URL"), log, func(url string) {
		fmt.Printf("tide + net/http example: %s (log in as alice or bob, password %q)\n", url, demoPassword)
	})
	if err != nil {
		log.Error("nethttp example failed", "err", err)
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

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(indexHTML)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		id, ok := sess.login(r.FormValue("user"), r.FormValue("password"))
		if !ok {
			http.Redirect(w, r, "/?failed", http.StatusSeeOther)
			return
		}
		http.SetCookie(w, sessionCookieFor(id))
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	mux.HandleFunc("POST /logout", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(sessionCookie); err == nil {
			if u := sess.logout(c.Value); u != nil {
				st.engine.Revoke(u.Name) // after the session: a reconnect is anonymous
			}
		}
		http.SetCookie(w, expiredSessionCookie())
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	mux.Handle("GET /api/me", requireLogin(func(w http.ResponseWriter, r *http.Request, u *User) {
		writeJSON(w, http.StatusOK, u)
	}))
	mux.Handle("POST /api/tasks", requireLogin(func(w http.ResponseWriter, r *http.Request, u *User) {
		in, ok := decodeInput(w, r)
		if !ok {
			return
		}
		t, err := st.create(r.Context(), u, in)
		if err != nil {
			http.Error(w, err.Error(), statusOf(err))
			return
		}
		writeJSON(w, http.StatusCreated, t)
	}))
	mux.Handle("PATCH /api/tasks/{id}", requireLogin(func(w http.ResponseWriter, r *http.Request, u *User) {
		in, ok := decodeInput(w, r)
		if !ok {
			return
		}
		if err := st.update(r.Context(), u, r.PathValue("id"), in); err != nil {
			http.Error(w, err.Error(), statusOf(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.Handle("DELETE /api/tasks/{id}", requireLogin(func(w http.ResponseWriter, r *http.Request, u *User) {
		if err := st.remove(r.Context(), u, r.PathValue("id")); err != nil {
			http.Error(w, err.Error(), statusOf(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))

	// The one line: tide's routes under /tide in front of the app, inside
	// the session middleware, whose user PrincipalFrom reads.
	handler := withSession(sess, tidehttp.Wrap(mux, st.engine, tidehttp.PrincipalFrom(func(r *http.Request) (authz.Principal, error) {
		return principal(currentUser(r)), nil
	})))
	return serve(ctx, addr, handler, st.engine, log, ready)
}

type userKey struct{}

// withSession is the app's session middleware: it puts the logged-in user,
// if any, in the request's context.
func withSession(sess *sessions, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(sessionCookie); err == nil {
			if u := sess.user(c.Value); u != nil {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// currentUser returns the user withSession found, or nil.
func currentUser(r *http.Request) *User {
	u, _ := r.Context().Value(userKey{}).(*User)
	return u
}

// requireLogin refuses the API to visitors who are not logged in.
func requireLogin(h func(http.ResponseWriter, *http.Request, *User)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := currentUser(r)
		if u == nil {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "log in first"})
			return
		}
		h(w, r, u)
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
