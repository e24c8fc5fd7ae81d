package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
)

// membership is the resource the policies of these tests read: who belongs
// to which project.
type membership struct {
	ID        string `tide:"id,pk"`
	UserID    string `tide:"user_id,scope"`
	ProjectID string `tide:"project_id,scope"`
	Role      string `tide:"role"`
}

// counter is a resource whose scope column is an integer.
type counter struct {
	ID    string `tide:"id,pk"`
	Shard int64  `tide:"shard,scope"`
}

// TestDependencyRules: Register accepts the declarations a policy can be
// followed by and refuses the others with a stable code, naming the
// resource, the dependency and what to change.
func TestDependencyRules(t *testing.T) {
	cases := []struct {
		name string
		deps []core.Dependency
		code core.DependencyCode // "" accepts
		says string              // in the message
	}{
		{name: "none"},
		{name: "whole resource", deps: []core.Dependency{{Resource: "memberships"}}},
		{name: "by principal", deps: []core.Dependency{{Resource: "memberships", Principal: "user_id"}}},
		{name: "by scope", deps: []core.Dependency{{Resource: "memberships", Scope: map[string]string{"project_id": "project_id"}}}},
		{name: "by principal and scope", deps: []core.Dependency{{Resource: "memberships", Principal: "user_id", Scope: map[string]string{"project_id": "project_id"}}}},
		{name: "principal is the key", deps: []core.Dependency{{Resource: "memberships", Principal: "id"}}},
		{name: "itself", deps: []core.Dependency{{Resource: "todos", Scope: map[string]string{"project_id": "project_id"}}}},
		{name: "two resources", deps: []core.Dependency{{Resource: "memberships"}, {Resource: "counters"}}},

		{name: "empty name", deps: []core.Dependency{{}}, code: core.CodeDependencyUnknown, says: "Resource is required"},
		{name: "unknown resource", deps: []core.Dependency{{Resource: "roles"}}, code: core.CodeDependencyUnknown, says: `no resource "roles" is registered; register it before todos`},
		{name: "twice", deps: []core.Dependency{{Resource: "memberships"}, {Resource: "memberships", Principal: "user_id"}}, code: core.CodeDependencyDuplicate},
		{name: "principal not a column", deps: []core.Dependency{{Resource: "memberships", Principal: "user"}}, code: core.CodeDependencyColumn, says: `Principal "user"`},
		{name: "principal not key or scope", deps: []core.Dependency{{Resource: "memberships", Principal: "role"}}, code: core.CodeDependencyColumn, says: "not the primary key or a scope column of memberships"},
		{name: "scope from a plain column", deps: []core.Dependency{{Resource: "memberships", Scope: map[string]string{"role": "project_id"}}}, code: core.CodeDependencyColumn},
		{name: "scope onto a plain column", deps: []core.Dependency{{Resource: "memberships", Scope: map[string]string{"project_id": "title"}}}, code: core.CodeDependencyScope, says: `"title" is not a scope column of todos`},
		{name: "scope onto the key", deps: []core.Dependency{{Resource: "memberships", Scope: map[string]string{"project_id": "id"}}}, code: core.CodeDependencyScope},
		{name: "scope mapped twice", deps: []core.Dependency{{Resource: "memberships", Scope: map[string]string{"project_id": "project_id", "user_id": "project_id"}}}, code: core.CodeDependencyScope, says: "mapped twice"},
		{name: "kinds differ", deps: []core.Dependency{{Resource: "counters", Scope: map[string]string{"shard": "project_id"}}}, code: core.CodeDependencyKind, says: "counters.shard is int but todos.project_id is string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := core.New(core.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := core.Register(e, core.Resource[membership]{Table: "memberships"}); err != nil {
				t.Fatal(err)
			}
			if _, err := core.Register(e, core.Resource[counter]{Table: "counters"}); err != nil {
				t.Fatal(err)
			}
			_, err = core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.Allow, DependsOn: tc.deps})
			if tc.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var de *core.DependencyError
			if !errors.As(err, &de) || de.Code != tc.code || !errors.Is(err, core.ErrInvalidResource) {
				t.Fatalf("err = %v, want a DependencyError %s wrapping ErrInvalidResource", err, tc.code)
			}
			if de.Resource != "todos" || !strings.Contains(err.Error(), string(tc.code)) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %q (resource %q), want it to name todos, %s and %q", err, de.Resource, tc.code, tc.says)
			}
			// A refused declaration registers nothing: a correct one may follow.
			if _, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.Allow}); err != nil {
				t.Fatalf("register after a refusal: %v", err)
			}
		})
	}
}
