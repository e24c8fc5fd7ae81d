// Command todo is tide's demo: a live todo list synced to every open browser
// tab. It runs on the in-memory feed, so it needs no database:
//
//	go run ./examples/todo
//
// Open the printed URL in two tabs; an edit in one shows in the other.
//
// With DATABASE_URL set it runs on Postgres instead: it creates the todos
// table if it is missing, installs tide's schema and capture (tide.Open
// does, safe on every boot), and syncs the table, including rows changed
// with plain SQL from psql:
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go run ./examples/todo
//
// TIDE_FEED_SCHEMA names the Postgres schema of tide's own tables (default
// "tide"); the browser tests give each run its own. TIDE_DEMO_HEARTBEAT
// sets the server's heartbeat (default 10 s; the browser tests shorten it to
// see a dead connection noticed within two heartbeats).
//
// The page uses tide's browser client, served by the middleware at
// /tide/client.js. Every user may see the projects "demo" and "home", and a
// private project "@<user>" (open /?project=@<user>).
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/middleware"
)

// Todo is the synced resource: rows of the "todos" table, scoped by project.
type Todo struct {
	ID        string    `tide:"id,pk"`
	ProjectID string    `tide:"project_id,scope"`
	Title     string    `tide:"title"`
	Done      bool      `tide:"done"`
	UpdatedAt time.Time `tide:"updated_at"`
}

//go:embed index.html
var indexHTML string

// page is the index page, importing the client module by its
// content-hashed URL (cached for a year, replaced when the module changes).
// {{USER}} is the session's user, per request: the client keeps each user's
// data in a database of its own (docs/client-js.md, the user option).
var page = strings.ReplaceAll(indexHTML, "{{CLIENT_JS}}", middleware.ClientJSPath("/tide"))

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address (a free port is picked if it is taken)")
	typescript := flag.String("typescript", "", "write the TypeScript types of the demo's resources to this file, and exit")
	flag.Parse()
	if *typescript != "" {
		var b bytes.Buffer
		if err := writeTypeScript(context.Background(), &b); err != nil {
			fmt.Fprintln(os.Stderr, "todo:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(*typescript, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "todo:", err)
			os.Exit(1)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopping := make(chan struct{})
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C ends the process at once
		fmt.Println("\ntide todo demo: stopping (Ctrl-C again to force)")
		close(stopping)
	}()
	err := run(ctx, *addr, log, func(url string) { fmt.Printf("tide todo demo: %s (Ctrl-C to stop)\n", url) })
	if err != nil {
		log.Error("todo demo failed", "err", err)
		os.Exit(1)
	}
	<-stopping
	fmt.Println("tide todo demo: stopped")
}

// run serves the demo until ctx ends, calling ready with its URL once it
// listens.
func run(ctx context.Context, addr string, log *slog.Logger, ready func(url string)) error {

	// Channel tokens: the page fetches one from /tide/token with its session
	// cookie and refreshes it before it expires. The key is made at boot;
	// a real app keeps its keys (see docs/authorization.md).
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "demo", Secret: secret}})
	if err != nil {
		return err
	}
	tokenTTL := middleware.DefaultTokenTTL
	if s := os.Getenv("TIDE_DEMO_TOKEN_TTL"); s != "" { // short-lived tokens, for the browser tests
		if tokenTTL, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("TIDE_DEMO_TOKEN_TTL: %w", err)
		}
	}
	cfg := core.Config{Logger: log, Tokens: kr} // tide.Open picks the feed: in memory, unless DATABASE_URL is set
	if s := os.Getenv("TIDE_DEMO_HEARTBEAT"); s != "" {
		if cfg.Heartbeat, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("TIDE_DEMO_HEARTBEAT: %w", err)
		}
	}
	app := &app{idPrefix: "t"}
	seed := true
	var pool *pgxpool.Pool // nil: tide.Open runs in memory
	if url := os.Getenv("DATABASE_URL"); url != "" {
		var empty bool
		if pool, empty, err = openPostgres(ctx, url, log); err != nil {
			return err
		}
		defer pool.Close()
		seed = empty
		// Ids must not collide with the rows of earlier runs.
		app.idPrefix = fmt.Sprintf("t%d-", time.Now().UnixMilli())
	}
	// Declare the resources, then (on Postgres) install tide's schema and
	// the capture of every resource, safe on every boot and from several
	// nodes at once, and start the engine: commits get their positions,
	// and old changes are pruned, whether or not a browser is connected.
	td, err := tide.Open(ctx, pool, tide.Config{Engine: cfg, Feed: pgfeed.Options{Logger: log, Schema: os.Getenv("TIDE_FEED_SCHEMA")}}, app.register)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			_ = td.Close(context.Background())
		}
	}()
	if seed {
		if err := app.seed(ctx); err != nil {
			return err
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", app.index)
	mux.HandleFunc("POST /api/todos", app.create)
	mux.HandleFunc("PATCH /api/todos/{id}", app.update)
	mux.HandleFunc("DELETE /api/todos/{id}", app.remove)

	// The one line: tide's routes in front of the app, with the app's notion
	// of who the user is.
	handler := middleware.Middleware(td.Engine, middleware.WithPrincipal(sessionUser),
		middleware.WithTokenEndpoint(kr), middleware.WithTokenTTL(tokenTTL))(withSession(mux))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("address taken; using a free port", "addr", addr, "err", err)
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	ready(fmt.Sprintf("http://%s/", ln.Addr()))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = td.Close(shutdownCtx) // closes sockets with 4002, then the feed
	closed = true
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// The demo's "session": a cookie naming a guest user who may see two
// projects. A real app reads its own session here.
const sessionCookie = "todo_demo_user"

var guestSeq atomic.Int64

func withSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := r.Cookie(sessionCookie); err != nil {
			name := fmt.Sprintf("guest-%d-%d", time.Now().Unix()%100000, guestSeq.Add(1))
			http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: name, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
			r.AddCookie(&http.Cookie{Name: sessionCookie, Value: name}) // this request is the new guest's too
		}
		next.ServeHTTP(w, r)
	})
}

func sessionUser(r *http.Request) (authz.Principal, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return authz.Anonymous, nil
	}
	return authz.Principal{ID: c.Value, Claims: map[string]any{"projects": []string{"demo", "home", "@" + c.Value}}}, nil
}

// projectMember allows a logged-in user to subscribe to projects listed in
// their "projects" claim, one project at a time.
func projectMember(_ context.Context, r authz.Request) error {
	if r.Principal.IsAnonymous() {
		return authz.ErrUnauthenticated
	}
	want := r.Conditions["project_id"]
	if len(want) != 1 {
		return fmt.Errorf("%w: subscribe to one project", authz.ErrForbidden)
	}
	for _, p := range r.Principal.Strings("projects") {
		if p == want[0] {
			return nil
		}
	}
	return authz.ErrForbidden
}

// register declares the demo's resources, mutators and channels on
// engine: what the server syncs, and what web/tide.gen.ts describes.
func (a *app) register(engine *core.Engine) error {
	todos, err := core.Register(engine, core.Resource[Todo]{Table: "todos", Authorize: projectMember})
	if err != nil {
		return err
	}
	a.todos = todos
	// Who is viewing a project: an app channel with presence, open to
	// the project's members (the same policy as the todos).
	if err := core.RegisterChannel(engine, core.Channel[json.RawMessage]{Pattern: "project:{project_id}", Subscribe: projectMember, Presence: true}); err != nil {
		return err
	}
	return a.addMutators()
}

// generateCommand regenerates web/tide.gen.ts, the TypeScript types of
// what register declares (go generate runs it in this directory).
const generateCommand = "go generate ./examples/todo"

//go:generate go run . -typescript web/tide.gen.ts

// writeTypeScript writes the TypeScript types of the demo's declarations
// to w, from an engine built in memory.
func writeTypeScript(ctx context.Context, w io.Writer) error {
	a := &app{}
	td, err := tide.Open(ctx, nil, tide.Config{Engine: core.Config{Logger: slog.New(slog.DiscardHandler)}}, a.register)
	if err != nil {
		return err
	}
	defer td.Close(ctx)
	return td.Engine.TypeScript(w, generateCommand)
}

type app struct {
	todos    *core.Table[Todo]
	idPrefix string
	seq      atomic.Int64
}

func (a *app) newID() string { return fmt.Sprintf("%s%d", a.idPrefix, a.seq.Add(1)) }

// openPostgres connects to url, creates the todos table if it is missing and
// returns the pool and whether the table was empty.
func openPostgres(ctx context.Context, url string, log *slog.Logger) (*pgxpool.Pool, bool, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, false, fmt.Errorf("DATABASE_URL: %w", err)
	}
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS todos (
  id text PRIMARY KEY,
  project_id text NOT NULL,
  title text NOT NULL,
  done boolean NOT NULL DEFAULT false,
  updated_at timestamptz NOT NULL DEFAULT now())`)
	var empty bool
	if err == nil {
		err = pool.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM todos)").Scan(&empty)
	}
	if err != nil {
		pool.Close()
		return nil, false, fmt.Errorf("create the todos table: %w", err)
	}
	log.Info("using Postgres", "database", pool.Config().ConnConfig.Database)
	return pool, empty, nil
}

func (a *app) seed(ctx context.Context) error {
	now := time.Now().UTC()
	return a.todos.Upsert(ctx,
		Todo{ID: a.newID(), ProjectID: "demo", Title: "Open this page in a second tab", UpdatedAt: now},
		Todo{ID: a.newID(), ProjectID: "demo", Title: "Tick me off in one tab, watch the other", UpdatedAt: now},
		Todo{ID: a.newID(), ProjectID: "home", Title: "Water the plants", UpdatedAt: now},
	)
}

func (a *app) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	user := ""
	if p, err := sessionUser(r); err == nil {
		user = p.ID
	}
	js, _ := json.Marshal(user) // a JS string literal; < > & are escaped
	_, _ = io.WriteString(w, strings.ReplaceAll(page, "{{USER}}", string(js)))
}

type todoInput struct {
	ProjectID *string `json:"project_id"`
	Title     *string `json:"title"`
	Done      *bool   `json:"done"`
}

func decodeInput(w http.ResponseWriter, r *http.Request) (todoInput, bool) {
	var in todoInput
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
		return in, false
	}
	if in.Title != nil && (strings.TrimSpace(*in.Title) == "" || len(*in.Title) > 200) {
		http.Error(w, "title must be 1-200 characters", http.StatusBadRequest)
		return in, false
	}
	return in, true
}

func (a *app) create(w http.ResponseWriter, r *http.Request) {
	in, ok := decodeInput(w, r)
	if !ok {
		return
	}
	if in.Title == nil || in.ProjectID == nil {
		http.Error(w, "project_id and title are required", http.StatusBadRequest)
		return
	}
	if !a.mayWrite(w, r, *in.ProjectID) {
		return
	}
	t := Todo{ID: a.newID(), ProjectID: *in.ProjectID, Title: strings.TrimSpace(*in.Title), UpdatedAt: time.Now().UTC()}
	if err := a.todos.Upsert(r.Context(), t); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"id": t.ID})
}

func (a *app) update(w http.ResponseWriter, r *http.Request) {
	in, ok := decodeInput(w, r)
	if !ok {
		return
	}
	t, found := a.find(r.Context(), r.PathValue("id"))
	if !found {
		http.NotFound(w, r)
		return
	}
	if !a.mayWrite(w, r, t.ProjectID) {
		return
	}
	if in.Title != nil {
		t.Title = strings.TrimSpace(*in.Title)
	}
	if in.Done != nil {
		t.Done = *in.Done
	}
	if in.ProjectID != nil {
		if !a.mayWrite(w, r, *in.ProjectID) {
			return
		}
		t.ProjectID = *in.ProjectID // moves the row between scopes
	}
	t.UpdatedAt = time.Now().UTC()
	if err := a.todos.Upsert(r.Context(), t); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *app) remove(w http.ResponseWriter, r *http.Request) {
	t, found := a.find(r.Context(), r.PathValue("id"))
	if !found {
		http.NotFound(w, r)
		return
	}
	if !a.mayWrite(w, r, t.ProjectID) {
		return
	}
	if err := a.todos.Delete(r.Context(), t); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// mayWrite applies the same rule to writes as the policy applies to reads.
func (a *app) mayWrite(w http.ResponseWriter, r *http.Request, project string) bool {
	p, _ := sessionUser(r)
	err := projectMember(r.Context(), authz.Request{Principal: p, Resource: "todos", Conditions: map[string][]string{"project_id": {project}}})
	if err != nil {
		http.Error(w, "not your project", http.StatusForbidden)
		return false
	}
	return true
}

// find reads a todo's current row from the feed's snapshot of the shared
// projects and the more named.
func (a *app) find(ctx context.Context, id string, more ...string) (Todo, bool) {
	for _, project := range append([]string{"demo", "home"}, more...) {
		rows, err := a.todos.Rows(ctx, map[string]any{"project_id": project})
		if err != nil {
			return Todo{}, false
		}
		for _, t := range rows {
			if t.ID == id {
				return t, true
			}
		}
	}
	return Todo{}, false
}
