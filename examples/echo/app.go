package main

// This file is the part of the example that does not depend on the web
// framework: the synced resource, the accounts, the cookie sessions, the
// store (in memory, or Postgres with DATABASE_URL) and the server's life.
// The four framework examples carry the same copy, so a diff of their
// main.go files shows exactly what each framework changes.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/pgfeed"
)

// Task is the synced resource: rows of the "tasks" table, scoped by project.
type Task struct {
	ID        string    `tide:"id,pk" json:"id"`
	ProjectID string    `tide:"project_id,scope" json:"project_id"`
	Title     string    `tide:"title" json:"title"`
	Done      bool      `tide:"done" json:"done"`
	UpdatedAt time.Time `tide:"updated_at" json:"updated_at"`
}

// taskPolicy lets a user subscribe to the projects listed in their
// "projects" claim, and to nothing else. Writes are checked with it too.
var taskPolicy = authz.RequireClaim("project_id", "projects")

// User is an account of the example app.
type User struct {
	Name     string   `json:"user"`
	Projects []string `json:"projects"`
}

// users are the example's accounts; every password is demoPassword.
var users = map[string]*User{
	"alice": {Name: "alice", Projects: []string{"apollo", "gemini"}},
	"bob":   {Name: "bob", Projects: []string{"gemini"}},
}

const demoPassword = "tide"

// principal is who tide is told the user is: the projects it may read.
func principal(u *User) authz.Principal {
	if u == nil {
		return authz.Anonymous
	}
	return authz.Principal{ID: u.Name, Claims: map[string]any{"projects": u.Projects}}
}

// sessionCookie names the cookie holding the session id. It is HttpOnly
// and SameSite=Lax: another site can neither read it nor send it with a
// form post, and tide refuses other origins on its own routes.
const sessionCookie = "tide_example_session"

// sessions is the app's cookie session store, in memory: a restart logs
// everyone out.
type sessions struct {
	mu sync.Mutex
	m  map[string]*User
}

func newSessions() *sessions { return &sessions{m: map[string]*User{}} }

// login checks the credentials and returns a new session id.
func (s *sessions) login(name, password string) (string, bool) {
	u, ok := users[name]
	if !ok || password != demoPassword {
		return "", false
	}
	id := randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[id] = u
	return id, true
}

// user returns the user of a session id, or nil.
func (s *sessions) user(id string) *User {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

// logout ends a session and returns its user, or nil.
func (s *sessions) logout(id string) *User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.m[id]
	delete(s.m, id)
	return u
}

func sessionCookieFor(id string) *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

func expiredSessionCookie() *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The store's errors, which the handlers map to HTTP statuses.
var (
	errNotFound  = errors.New("no such task")
	errForbidden = errors.New("not one of your projects")
	errInvalid   = errors.New("invalid task")
)

// taskInput is the JSON body of a create or an update.
type taskInput struct {
	ProjectID *string `json:"project_id"`
	Title     *string `json:"title"`
	Done      *bool   `json:"done"`
}

// store is the tide engine and the tasks table, on the in-memory feed or on
// Postgres.
type store struct {
	engine *core.Engine
	tasks  *core.Table[Task]
	close  func()
}

// openStore starts the engine: on Postgres if databaseURL is set (creating
// the tasks table if it is missing, installing tide's schema and capture,
// and seeding an empty table), else in memory with seed tasks.
func openStore(ctx context.Context, databaseURL string, log *slog.Logger) (*store, error) {
	cfg := core.Config{Logger: log}
	st := &store{close: func() {}}
	seed := true
	if databaseURL != "" {
		pool, err := pgxpool.New(ctx, databaseURL)
		if err != nil {
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// Under a lock: two processes creating the table at once can
			// collide even with IF NOT EXISTS.
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('tide example: tasks'))"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS tasks (
  id text PRIMARY KEY,
  project_id text NOT NULL,
  title text NOT NULL,
  done boolean NOT NULL DEFAULT false,
  updated_at timestamptz NOT NULL DEFAULT now())`)
			return err
		})
		if err == nil {
			err = pool.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM tasks)").Scan(&seed)
		}
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("create the tasks table: %w", err)
		}
		pf, err := pgfeed.New(pool, pgfeed.Options{Logger: log})
		if err != nil {
			pool.Close()
			return nil, err
		}
		cfg.Feed = pf
		st.close = func() { _ = pf.Close(); pool.Close() }
		log.Info("using Postgres", "database", pool.Config().ConnConfig.Database)
	}
	engine, err := core.New(cfg)
	if err == nil {
		st.engine = engine
		st.tasks, err = core.Register(engine, core.Resource[Task]{Table: "tasks", Authorize: taskPolicy})
	}
	if pf, ok := cfg.Feed.(*pgfeed.Feed); ok && err == nil {
		// Safe on every boot, and from several processes at once: run two
		// of the examples on one database and they sync with each other.
		if err = pf.Migrate(ctx, engine.Schemas()...); err == nil {
			pf.StartPruner()
		}
	}
	if seed && err == nil {
		now := time.Now().UTC() // fixed ids: examples starting together seed once
		err = st.tasks.Upsert(ctx,
			Task{ID: "seed-1", ProjectID: "apollo", Title: "Open this page in a second browser, log in as bob", UpdatedAt: now},
			Task{ID: "seed-2", ProjectID: "gemini", Title: "Tick me off here, watch the other window", UpdatedAt: now},
			Task{ID: "seed-3", ProjectID: "gemini", Title: "bob can see gemini, not apollo", UpdatedAt: now},
		)
	}
	if err != nil {
		st.close()
		return nil, err
	}
	return st, nil
}

// mayWrite applies the read policy to writes: a user writes only to their
// projects.
func mayWrite(ctx context.Context, u *User, project string) error {
	err := taskPolicy(ctx, authz.Request{Principal: principal(u), Resource: "tasks",
		Conditions: map[string][]string{"project_id": {project}}})
	if err != nil {
		return errForbidden
	}
	return nil
}

func validTitle(title string) (string, error) {
	title = strings.TrimSpace(title)
	if title == "" || len(title) > 200 {
		return "", fmt.Errorf("%w: the title must be 1-200 characters", errInvalid)
	}
	return title, nil
}

// create adds a task; ctx carries the writer's origin, if any.
func (s *store) create(ctx context.Context, u *User, in taskInput) (Task, error) {
	if in.ProjectID == nil || in.Title == nil {
		return Task{}, fmt.Errorf("%w: project_id and title are required", errInvalid)
	}
	title, err := validTitle(*in.Title)
	if err != nil {
		return Task{}, err
	}
	if err := mayWrite(ctx, u, *in.ProjectID); err != nil {
		return Task{}, err
	}
	t := Task{ID: randomID(), ProjectID: *in.ProjectID, Title: title, UpdatedAt: time.Now().UTC()}
	return t, s.tasks.Upsert(ctx, t)
}

// update changes a task's title or done flag.
func (s *store) update(ctx context.Context, u *User, id string, in taskInput) error {
	t, err := s.find(ctx, u, id)
	if err != nil {
		return err
	}
	if in.ProjectID != nil && *in.ProjectID != t.ProjectID {
		return fmt.Errorf("%w: a task stays in its project", errInvalid)
	}
	if in.Title != nil {
		if t.Title, err = validTitle(*in.Title); err != nil {
			return err
		}
	}
	if in.Done != nil {
		t.Done = *in.Done
	}
	t.UpdatedAt = time.Now().UTC()
	return s.tasks.Upsert(ctx, t)
}

// remove deletes a task.
func (s *store) remove(ctx context.Context, u *User, id string) error {
	t, err := s.find(ctx, u, id)
	if err != nil {
		return err
	}
	return s.tasks.Delete(ctx, t)
}

// find returns a task of one of the user's projects.
func (s *store) find(ctx context.Context, u *User, id string) (Task, error) {
	if u == nil {
		return Task{}, errForbidden
	}
	rows, err := s.tasks.Rows(ctx, map[string]any{"project_id": map[string]any{"in": u.Projects}})
	if err != nil {
		return Task{}, err
	}
	if i := slices.IndexFunc(rows, func(t Task) bool { return t.ID == id }); i >= 0 {
		return rows[i], nil
	}
	return Task{}, errNotFound
}

// statusOf maps a store error to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errNotFound):
		return http.StatusNotFound
	case errors.Is(err, errForbidden):
		return http.StatusForbidden
	case errors.Is(err, errInvalid):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// serve listens on addr (or, if it is taken, on a free port), reports the
// URL to ready, and serves h until ctx ends; then it drains tide's sockets
// (close 4002: clients reconnect elsewhere) and shuts the server down.
func serve(ctx context.Context, addr string, h http.Handler, engine *core.Engine, log *slog.Logger, ready func(url string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("address taken; using a free port", "addr", addr, "err", err)
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	ready("http://" + ln.Addr().String() + "/")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = engine.Shutdown(shutdownCtx)
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
