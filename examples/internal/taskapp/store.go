package taskapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
)

// The Store's errors, which Status maps to HTTP statuses.
var (
	ErrNotFound  = errors.New("no such task")
	ErrForbidden = errors.New("not one of your projects")
	ErrInvalid   = errors.New("invalid task")
)

// Status maps a Store error to an HTTP status: 404, 403, 400, else 500.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// Input is the JSON body of a create or an update; a nil field is left
// as it is.
type Input struct {
	ProjectID *string `json:"project_id"`
	Title     *string `json:"title"`
	Done      *bool   `json:"done"`
}

// Store is the tide engine and the tasks table, on the in-memory feed or on
// Postgres.
type Store struct {
	// Engine is what the tide line mounts, and what logout revokes on.
	Engine *core.Engine
	tasks  *core.Table[Task]
	close  func() // closes tide, and the Postgres pool if any
}

// openStore starts tide with tide.Open: on Postgres if databaseURL is set
// (creating the tasks table if it is missing; Open installs tide's schema
// and capture), else in memory; an empty table is seeded. st.close
// releases it; serve shuts the engine down before.
func openStore(ctx context.Context, databaseURL string, log *slog.Logger) (*Store, error) {
	st := &Store{close: func() {}}
	seed := true
	var pool *pgxpool.Pool // nil: tide.Open runs in memory
	if databaseURL != "" {
		var err error
		if pool, err = pgxpool.New(ctx, databaseURL); err != nil {
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
		log.Info("using Postgres", "database", pool.Config().ConnConfig.Database)
	}
	// Safe on every boot, and from several processes at once: run two of
	// the examples on one database and they sync with each other.
	td, err := tide.Open(ctx, pool, tide.Config{Engine: core.Config{Logger: log}}, func(e *core.Engine) (err error) {
		if st.tasks, err = core.Register(e, core.Resource[Task]{Table: "tasks", Authorize: Policy}); err != nil {
			return err
		}
		return st.addMutators()
	})
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, err
	}
	st.Engine = td.Engine
	st.close = func() {
		_ = td.Close(context.Background())
		if pool != nil {
			pool.Close()
		}
	}
	if seed {
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

// Create adds a task to one of the user's projects; ctx carries the
// writer's origin, if any.
func (s *Store) Create(ctx context.Context, u *User, in Input) (Task, error) {
	if in.ProjectID == nil || in.Title == nil {
		return Task{}, fmt.Errorf("%w: project_id and title are required", ErrInvalid)
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

// Update changes a task's title or done flag.
func (s *Store) Update(ctx context.Context, u *User, id string, in Input) error {
	t, err := s.find(ctx, u, id)
	if err != nil {
		return err
	}
	if in.ProjectID != nil && *in.ProjectID != t.ProjectID {
		return fmt.Errorf("%w: a task stays in its project", ErrInvalid)
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

// Remove deletes a task.
func (s *Store) Remove(ctx context.Context, u *User, id string) error {
	t, err := s.find(ctx, u, id)
	if err != nil {
		return err
	}
	return s.tasks.Delete(ctx, t)
}

// find returns a task of one of the user's projects.
func (s *Store) find(ctx context.Context, u *User, id string) (Task, error) {
	if u == nil {
		return Task{}, ErrForbidden
	}
	rows, err := s.tasks.Rows(ctx, map[string]any{"project_id": map[string]any{"in": u.Projects}})
	if err != nil {
		return Task{}, err
	}
	if i := slices.IndexFunc(rows, func(t Task) bool { return t.ID == id }); i >= 0 {
		return rows[i], nil
	}
	return Task{}, ErrNotFound
}

// mayWrite applies the read policy to writes: a user writes only to their
// projects.
func mayWrite(ctx context.Context, u *User, project string) error {
	err := Policy(ctx, authz.Request{Principal: Principal(u), Resource: "tasks",
		Conditions: map[string][]string{"project_id": {project}}})
	if err != nil {
		return ErrForbidden
	}
	return nil
}

func validTitle(title string) (string, error) {
	title = strings.TrimSpace(title)
	if title == "" || len(title) > 200 {
		return "", fmt.Errorf("%w: the title must be 1-200 characters", ErrInvalid)
	}
	return title, nil
}
