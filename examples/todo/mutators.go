package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
)

// putArgs are the arguments of todos.put: create or change a todo. The
// client picks the id (it shows the todo before the server answers).
type putArgs struct {
	ID        string `json:"id"`
	ProjectID string `json:"project_id"`
	Title     string `json:"title"`
	Done      bool   `json:"done"`
}

// removeArgs are the arguments of todos.remove.
type removeArgs struct {
	ID        string `json:"id"`
	ProjectID string `json:"project_id"`
}

// mayWriteProject is the mutators' policy, the rule reads have: members of
// a project write its todos.
func mayWriteProject(ctx context.Context, p authz.Principal, project string) error {
	return projectMember(ctx, authz.Request{Principal: p, Resource: "todos", Conditions: map[string][]string{"project_id": {project}}})
}

// addMutators declares the writes the demo's clients make: optimistic on
// the client, applied at most once here.
func (a *app) addMutators() error {
	err := core.AddMutator(a.todos, "put", core.Mutator[putArgs]{
		Authorize: func(ctx context.Context, p authz.Principal, args putArgs) error {
			return mayWriteProject(ctx, p, args.ProjectID)
		},
		Run: func(ctx context.Context, tx *core.Tx, args putArgs) error {
			title := strings.TrimSpace(args.Title)
			if args.ID == "" || len(args.ID) > 64 || title == "" || len(title) > 200 {
				return fmt.Errorf("%w: an id and a title of 1-200 characters", core.ErrInvalidArgs)
			}
			if old, found := a.find(ctx, args.ID, args.ProjectID, "@"+tx.Principal().ID); found && old.ProjectID != args.ProjectID {
				// A move: the writer must belong to the project it leaves too.
				if err := mayWriteProject(ctx, tx.Principal(), old.ProjectID); err != nil {
					return fmt.Errorf("%w: the todo is in another project", core.ErrConflict)
				}
			}
			return a.todos.UpsertTx(ctx, tx, Todo{ID: args.ID, ProjectID: args.ProjectID, Title: title, Done: args.Done, UpdatedAt: time.Now().UTC()})
		},
	})
	if err != nil {
		return err
	}
	return core.AddMutator(a.todos, "remove", core.Mutator[removeArgs]{
		Authorize: func(ctx context.Context, p authz.Principal, args removeArgs) error {
			return mayWriteProject(ctx, p, args.ProjectID)
		},
		Run: func(ctx context.Context, tx *core.Tx, args removeArgs) error {
			old, found := a.find(ctx, args.ID, args.ProjectID, "@"+tx.Principal().ID)
			if !found {
				return nil // already gone: removing is idempotent
			}
			if old.ProjectID != args.ProjectID {
				return fmt.Errorf("%w: the todo is in another project", core.ErrConflict)
			}
			return a.todos.DeleteTx(ctx, tx, old)
		},
	})
}
