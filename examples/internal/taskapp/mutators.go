package taskapp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
)

// PutArgs are the arguments of tasks.put: create or change a task. The
// client picks the id, so it can show the task before the server answers.
type PutArgs struct {
	ID        string `json:"id"`
	ProjectID string `json:"project_id"`
	Title     string `json:"title"`
	Done      bool   `json:"done"`
}

// RemoveArgs are the arguments of tasks.remove.
type RemoveArgs struct {
	ID        string `json:"id"`
	ProjectID string `json:"project_id"`
}

// userOf turns a principal back into the example's user.
func userOf(p authz.Principal) *User {
	if p.IsAnonymous() {
		return nil
	}
	return &User{Name: p.ID, Projects: p.Strings("projects")}
}

// mayWriteArgs is the mutators' policy: the rule reads have.
func mayWriteArgs(ctx context.Context, p authz.Principal, project string) error {
	if p.IsAnonymous() {
		return authz.ErrUnauthenticated
	}
	if mayWrite(ctx, userOf(p), project) != nil {
		return fmt.Errorf("%w: not a member of %s", authz.ErrForbidden, project)
	}
	return nil
}

// addMutators declares the writes clients make optimistically; the
// example's HTTP handlers stay for clients that write through the API.
func (s *Store) addMutators() error {
	err := core.AddMutator(s.tasks, "put", core.Mutator[PutArgs]{
		Authorize: func(ctx context.Context, p authz.Principal, a PutArgs) error {
			return mayWriteArgs(ctx, p, a.ProjectID)
		},
		Run: func(ctx context.Context, tx *core.Tx, a PutArgs) error {
			title, err := validTitle(a.Title)
			if err != nil || a.ID == "" || len(a.ID) > 64 {
				return fmt.Errorf("%w: an id and a title of 1-200 characters", core.ErrInvalidArgs)
			}
			old, err := s.find(ctx, userOf(tx.Principal()), a.ID)
			switch {
			case err == nil && old.ProjectID != a.ProjectID:
				return fmt.Errorf("%w: a task stays in its project", core.ErrConflict)
			case err != nil && !errors.Is(err, ErrNotFound):
				return err
			}
			return s.tasks.UpsertTx(ctx, tx, Task{ID: a.ID, ProjectID: a.ProjectID, Title: title, Done: a.Done, UpdatedAt: time.Now().UTC()})
		},
	})
	if err != nil {
		return err
	}
	return core.AddMutator(s.tasks, "remove", core.Mutator[RemoveArgs]{
		Authorize: func(ctx context.Context, p authz.Principal, a RemoveArgs) error {
			return mayWriteArgs(ctx, p, a.ProjectID)
		},
		Run: func(ctx context.Context, tx *core.Tx, a RemoveArgs) error {
			old, err := s.find(ctx, userOf(tx.Principal()), a.ID)
			switch {
			case errors.Is(err, ErrNotFound):
				return nil // already gone: removing is idempotent
			case err != nil:
				return err
			case old.ProjectID != a.ProjectID:
				return fmt.Errorf("%w: the task is in another project", core.ErrConflict)
			}
			return s.tasks.DeleteTx(ctx, tx, old)
		},
	})
}
