// Package taskapp is the part of the framework examples (examples/echo,
// examples/gin, examples/chi, examples/nethttp) that does not depend on the
// web framework: the synced Task resource and its policy, the accounts, the
// cookie sessions, the store (in memory, or Postgres with DATABASE_URL), the
// page and the server's life.
//
// Each example's main.go holds only what its framework changes, as a
// Routes function: the routes and handlers in the framework's terms, the
// session middleware putting the User in the framework's context, and the
// one tide line reading it back. Its main is one call to Main, and its test
// one call to taskapptest.Run. A diff of two examples' main.go files shows
// exactly what differs.
//
// The package is internal to examples/: it is example code, not API.
package taskapp

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"

	"github.com/tidesync/tide/authz"
)

// Task is the synced resource: rows of the "tasks" table, scoped by project.
type Task struct {
	ID        string    `tide:"id,pk" json:"id"`
	ProjectID string    `tide:"project_id,scope" json:"project_id"`
	Title     string    `tide:"title" json:"title"`
	Done      bool      `tide:"done" json:"done"`
	UpdatedAt time.Time `tide:"updated_at" json:"updated_at"`
}

// Policy lets a user subscribe to the projects listed in their "projects"
// claim, and to nothing else. The Store checks writes with it too.
var Policy = authz.RequireClaim("project_id", "projects")

// User is an account of the example app.
type User struct {
	Name     string   `json:"user"`
	Projects []string `json:"projects"`
}

// users are the example's accounts; every password is Password.
var users = map[string]*User{
	"alice": {Name: "alice", Projects: []string{"apollo", "gemini"}},
	"bob":   {Name: "bob", Projects: []string{"gemini"}},
}

// Password is the password of every account (alice and bob).
const Password = "tide"

// Principal is who tide is told the user is: the projects it may read. A
// nil user is authz.Anonymous.
func Principal(u *User) authz.Principal {
	if u == nil {
		return authz.Anonymous
	}
	return authz.Principal{ID: u.Name, Claims: map[string]any{"projects": u.Projects}}
}

// CookieName names the cookie holding the session id. It is HttpOnly and
// SameSite=Lax: another site can neither read it nor send it with a form
// post, and tide refuses other origins on its own routes.
const CookieName = "tide_example_session"

// Cookie is the session cookie to set after a login.
func Cookie(id string) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

// ExpiredCookie is the cookie to set on logout: it removes the session
// cookie from the browser.
func ExpiredCookie() *http.Cookie {
	return &http.Cookie{Name: CookieName, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

// Sessions is the app's cookie session store, in memory: a restart logs
// everyone out. It is safe for concurrent use.
type Sessions struct {
	mu sync.Mutex
	m  map[string]*User
}

// NewSessions returns an empty session store.
func NewSessions() *Sessions { return &Sessions{m: map[string]*User{}} }

// Login checks the credentials and returns a new session id.
func (s *Sessions) Login(name, password string) (id string, ok bool) {
	u, ok := users[name]
	if !ok || password != Password {
		return "", false
	}
	id = randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[id] = u
	return id, true
}

// User returns the user of a session id, or nil.
func (s *Sessions) User(id string) *User {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

// Logout ends a session and returns its user, or nil. The caller revokes
// the user's tide sockets (Engine.Revoke) after it, so that a reconnect is
// anonymous.
func (s *Sessions) Logout(id string) *User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.m[id]
	delete(s.m, id)
	return u
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
