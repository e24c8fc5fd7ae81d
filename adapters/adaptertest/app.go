package adaptertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// The test app's fixed names, shared by Run and every Factory.
const (
	// SessionCookie is the name of the cookie the app's login route sets
	// and its session middleware reads.
	SessionCookie = "session"
	// RealIPHeader carries the client address, as a reverse proxy would
	// set it; each framework reads it with its own helper (Echo's
	// c.RealIP, Gin's c.ClientIP, chi's middleware.RealIP).
	RealIPHeader = "X-Real-IP"
	// BannedIP is the address the app's ban middleware refuses.
	BannedIP = "203.0.113.9"
	// AllowedOrigin is a front end on another origin the app lists with
	// middleware.WithAllowedOrigins (in App.Options).
	AllowedOrigin = "https://front.example"
)

// Factory builds the test app on an adapter's framework, in that
// framework's own terms, and returns it as the server's handler. Run calls
// it once per case, with a new App. The app has, in this order:
//
//  1. A ban middleware: a request whose client address (RealIPHeader, read
//     with the framework's real-IP helper) is one App.Banned reports is
//     answered 403 with the body "banned" (a final newline is allowed)
//     and goes no further.
//  2. A session middleware: the SessionCookie cookie's value, looked up
//     with App.User, names the user, who is stored in the framework's
//     request context (c.Set for Echo and Gin, r.Context() for chi and
//     net/http). No cookie, or an unknown session: no user.
//  3. tide, mounted with the adapter's one line, with the adapter's
//     PrincipalFrom reading the user from the framework's context (never the
//     cookie) and returning App.Principal(user), or authz.Anonymous when
//     there is no user; then App.Options.
//  4. A last middleware calling App.Reached for every request it sees
//     (Echo: also the app's HTTPErrorHandler, before its default answer).
//  5. Routes:
//     POST /login: the form field "user" is passed to App.Login; on success
//     the session id is set as the SessionCookie cookie (Path "/",
//     HttpOnly) and the answer is 204, else 401.
//     GET /teapot: status 418, header "X-App: teapot", body "short and stout".
//     GET /tide/about: 200, body "about" (an app route under tide's prefix).
//     GET /origin: 200, the body is core.OriginFrom of the request's context.
//     Anything else: the framework's own 404.
type Factory func(t *testing.T, app *App) http.Handler

// App holds the test app's state: its engine, its sessions and what its
// last middleware saw. It is safe for concurrent use.
type App struct {
	// Engine is the tide engine to mount. It syncs the resource "todos"
	// (scope column project_id), readable with the claim "projects".
	Engine *core.Engine
	// Options are tide options the app passes to the adapter after its
	// PrincipalFrom: the token endpoint and AllowedOrigin.
	Options []middleware.Option

	keyring *authz.Keyring
	todos   *core.Table[todo]

	mu       sync.Mutex
	sessions map[string]string // session id -> user
	reached  []string          // paths the last middleware saw
}

// users are the app's accounts and the projects each may read.
var users = map[string][]string{"alice": {"p7"}, "bob": {"p8"}}

// Login starts a session for user and returns its id, or an error for an
// unknown user.
func (a *App) Login(user string) (string, error) {
	if _, ok := users[user]; !ok {
		return "", errors.New("no such user")
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sessions[id] = user
	return id, nil
}

// User returns the user of a session, or false for an unknown session.
func (a *App) User(session string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	u, ok := a.sessions[session]
	return u, ok
}

// Principal returns the principal of a logged-in user: the user's name as
// its id and the projects it may read as the claim "projects".
func (a *App) Principal(user string) authz.Principal {
	return authz.Principal{ID: user, Claims: map[string]any{"projects": users[user]}}
}

// Banned reports whether the ban middleware refuses the client address ip.
func (a *App) Banned(ip string) bool { return ip == BannedIP }

// Reached records that a request got past tide to the app's last
// middleware. Call it from there.
func (a *App) Reached(r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reached = append(a.reached, r.URL.Path)
}

func (a *App) sawPath(path string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Contains(a.reached, path)
}

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
}

// newApp returns an App with a fresh engine holding t1 (p7) and b1 (p8).
func newApp(t *testing.T) *App {
	t.Helper()
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Tokens: kr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	if err := todos.Upsert(context.Background(), todo{"t1", "p7", "ship it"}, todo{"b1", "p8", "bob's"}); err != nil {
		t.Fatal(err)
	}
	return &App{
		Engine:   e,
		Options:  []middleware.Option{middleware.WithTokenEndpoint(kr), middleware.WithAllowedOrigins(AllowedOrigin)},
		keyring:  kr,
		todos:    todos,
		sessions: map[string]string{},
	}
}
