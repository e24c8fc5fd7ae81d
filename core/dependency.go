package core

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Dependency names a synced resource whose rows a resource's policy reads,
// so that a change of those rows runs the policy again for the
// subscriptions it may concern (see Resource.DependsOn). Principal and
// Scope narrow which subscriptions those are; without them a change of the
// dependency re-checks every subscription of the dependent resource.
//
// A policy that reads memberships to allow a project's todos:
//
//	core.Register(engine, core.Resource[Todo]{
//		Table:     "todos",
//		Authorize: isMember,
//		DependsOn: []core.Dependency{{
//			Resource:  "memberships",
//			Principal: "user_id",                                 // a membership concerns its user…
//			Scope:     map[string]string{"project_id": "project_id"}, // …and the todos of its project
//		}},
//	})
type Dependency struct {
	// Resource is the wire name of the resource the policy reads. It is
	// registered before the resource that depends on it (so its changes
	// are captured by the feed's migration), or is that resource itself.
	// It needs no policy of its own: without one, clients cannot subscribe
	// to it, and its changes are still followed.
	Resource string
	// Principal, if set, is the column of Resource that holds the id of
	// the principal a row concerns (a membership's user): a change of the
	// row re-checks only that principal's subscriptions. It is a column of
	// Resource's primary key (a part of a composite key, such as user_id
	// of a membership keyed by (user_id, board_id)) or one of its scope
	// columns, so every change, a delete included, carries its value
	// whatever the feed keeps of old rows.
	// Zero value: the subscriptions of every principal.
	Principal string
	// Scope maps columns of Resource to scope columns of the dependent
	// resource (a membership's project_id to a todo's project_id): a change
	// of the row re-checks only the subscriptions whose condition on the
	// scope column includes the row's value, or that have no condition on
	// that column. Each key is a column of Resource's primary key or one
	// of its scope columns, each value a scope column of the dependent resource of the
	// same kind, named at most once. Zero value: every scope.
	Scope map[string]string
}

// DependencyCode is a stable reason a Resource's DependsOn is refused.
// Codes never change meaning; new ones may be added.
type DependencyCode string

// Reasons Register refuses a dependency.
const (
	CodeDependencyUnknown   DependencyCode = "dependency_unknown"   // names no registered resource (register it first), or is empty
	CodeDependencyDuplicate DependencyCode = "dependency_duplicate" // names a resource another dependency of the list names
	CodeDependencyColumn    DependencyCode = "dependency_column"    // Principal or a Scope key is not a column of the dependency's primary key or a scope column
	CodeDependencyScope     DependencyCode = "dependency_scope"     // a Scope value is not a scope column of the dependent resource, or is named twice
	CodeDependencyKind      DependencyCode = "dependency_kind"      // a Scope entry maps columns of different kinds
)

// DependencyError is a refused Resource.DependsOn entry. It wraps
// ErrInvalidResource; errors.As recovers the code.
type DependencyError struct {
	Code       DependencyCode
	Resource   string // the resource being registered
	Dependency string // the dependency's Resource
	msg        string
}

// Error says which dependency of which resource is wrong, and why.
func (e *DependencyError) Error() string {
	return fmt.Sprintf("tide: register %s: %s: dependency on %q: %s", e.Resource, e.Code, e.Dependency, e.msg)
}

// Unwrap returns ErrInvalidResource.
func (e *DependencyError) Unwrap() error { return ErrInvalidResource }

// depEdge is a validated dependency: changes of dep re-check subscriptions
// of dependent.
type depEdge struct {
	dep, dependent *resource
	principal      colRef     // where a change of dep names the principal; unset: every principal
	scope          []scopeRef // scope columns of dependent a change of dep narrows to
}

// colRef locates a key or scope column's value in a change.
type colRef struct {
	set   bool
	key   bool // a part of the primary key (Change.Key)
	part  int  // its index in Schema.Keys
	parts int  // len(Schema.Keys): 1, the key is the part's text
	scope int  // else an index in Change.Scope
}

func (r colRef) value(c *feed.Change) (string, bool) {
	switch {
	case !r.set:
		return "", false
	case r.key && r.parts == 1:
		return c.Key, true
	case r.key:
		parts, err := protocol.DecodeKey(c.Key, r.parts)
		if err != nil {
			return "", false
		}
		return parts[r.part], true
	case r.scope < len(c.Scope):
		return c.Scope[r.scope], true
	}
	return "", false
}

// scopeRef maps a column of a dependency to a scope column (an index in
// Schema.Scope) of the dependent resource.
type scopeRef struct {
	from colRef
	col  int
}

// resolveDependencies validates r's declared dependencies against the
// registered resources (and r itself). The caller holds Engine.mu.
func resolveDependencies(r *resource, deps []Dependency, registered map[string]*resource) ([]*depEdge, error) {
	var edges []*depEdge
	seen := map[string]bool{}
	for _, d := range deps {
		fail := func(code DependencyCode, format string, args ...any) error {
			return &DependencyError{Code: code, Resource: r.schema.Name, Dependency: d.Resource, msg: fmt.Sprintf(format, args...)}
		}
		dep := registered[d.Resource]
		if d.Resource == r.schema.Name {
			dep = r
		}
		switch {
		case d.Resource == "":
			return nil, fail(CodeDependencyUnknown, "Resource is required")
		case dep == nil:
			return nil, fail(CodeDependencyUnknown, "no resource %q is registered; register it before %s", d.Resource, r.schema.Name)
		case seen[d.Resource]:
			return nil, fail(CodeDependencyDuplicate, "listed twice")
		}
		seen[d.Resource] = true
		ed := &depEdge{dep: dep, dependent: r}
		if d.Principal != "" {
			ref, _, ok := keyOrScope(dep.schema, d.Principal)
			if !ok {
				return nil, fail(CodeDependencyColumn, "Principal %q is not the primary key or a scope column of %s", d.Principal, dep.schema.Name)
			}
			ed.principal = ref
		}
		to := map[int]bool{}
		for _, from := range slices.Sorted(maps.Keys(d.Scope)) {
			col := d.Scope[from]
			ref, kind, ok := keyOrScope(dep.schema, from)
			if !ok {
				return nil, fail(CodeDependencyColumn, "Scope column %q is not the primary key or a scope column of %s", from, dep.schema.Name)
			}
			i := r.schema.ScopeIndex(col)
			switch {
			case i < 0:
				return nil, fail(CodeDependencyScope, "%q is not a scope column of %s", col, r.schema.Name)
			case to[i]:
				return nil, fail(CodeDependencyScope, "scope column %q is mapped twice", col)
			case r.schema.ScopeColumn(i).Kind != kind:
				return nil, fail(CodeDependencyKind, "%s.%s is %s but %s.%s is %s", dep.schema.Name, from, kind, r.schema.Name, col, r.schema.ScopeColumn(i).Kind)
			}
			to[i] = true
			ed.scope = append(ed.scope, scopeRef{from: ref, col: i})
		}
		edges = append(edges, ed)
	}
	return edges, nil
}

// keyOrScope finds a primary key column (a part of a composite key
// included) or a scope column of s by name.
func keyOrScope(s *feed.Schema, name string) (colRef, protocol.Kind, bool) {
	if i := s.KeyIndex(name); i >= 0 {
		return colRef{set: true, key: true, part: i, parts: len(s.Keys)}, s.KeyColumn(i).Kind, true
	}
	if i := s.ScopeIndex(name); i >= 0 {
		return colRef{set: true, scope: i}, s.ScopeColumn(i).Kind, true
	}
	return colRef{}, 0, false
}

// recheckTarget is the part of a dependent resource's subscriptions one
// change of a dependency may concern.
type recheckTarget struct {
	principal   string
	byPrincipal bool
	conds       []targetCond
}

// targetCond: subscriptions with a condition on scope column col that
// excludes value are not concerned.
type targetCond struct {
	col   int
	value string
}

// target returns what a change of ed.dep may concern, and its key for
// deduplication. ok is false when the change lacks a value the edge
// narrows by; the caller then re-checks every subscription.
func (ed *depEdge) target(c *feed.Change) (t recheckTarget, key string, ok bool) {
	var b strings.Builder
	if ed.principal.set {
		v, ok := ed.principal.value(c)
		if !ok {
			return t, "", false
		}
		t.principal, t.byPrincipal = v, true
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	b.WriteByte('|')
	for _, sr := range ed.scope {
		v, ok := sr.from.value(c)
		if !ok {
			return t, "", false
		}
		t.conds = append(t.conds, targetCond{col: sr.col, value: v})
		b.WriteString(strconv.Itoa(sr.col))
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return t, b.String(), true
}

// covers reports whether a subscription to sc may be concerned: for each
// narrowed column, sc has no condition on it or its condition holds the
// value.
func (t *recheckTarget) covers(sc feed.Scope) bool {
	for _, tc := range t.conds {
		for _, c := range sc.Conds {
			if c.Col != tc.col {
				continue
			}
			if _, ok := slices.BinarySearch(c.Values, tc.value); !ok {
				return false
			}
		}
	}
	return true
}
