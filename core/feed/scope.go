package feed

import (
	"net/url"
	"slices"
	"strings"
)

// Cond is one condition of a scope: the scope column at index Col (an index
// into Schema.Scope) must equal one of Values. Values are canonical text (see
// package core), sorted and free of duplicates; a single value is equality,
// several are an "in" list.
type Cond struct {
	Col    int
	Values []string
}

// Scope is a resource plus conditions on its scope columns: the unit a client
// subscribes to. Conditions are sorted by Col and at most one exists per
// column. A scope without conditions covers the whole resource.
//
// Build scopes with NewScope so they are normalized; two scopes with the same
// Key cover the same rows.
type Scope struct {
	Schema *Schema
	Conds  []Cond
	key    string
}

// NewScope normalizes conds (sorting columns and values, removing duplicate
// values) and returns the scope. It does not validate values against column
// kinds; package core does that before a scope is built. It panics if two
// conditions name the same column or a column index is out of range, which is
// a programming error in the caller.
func NewScope(s *Schema, conds []Cond) Scope {
	out := make([]Cond, len(conds))
	for i, c := range conds {
		if c.Col < 0 || c.Col >= len(s.Scope) {
			panic("feed: condition column out of range")
		}
		vals := slices.Clone(c.Values)
		slices.Sort(vals)
		out[i] = Cond{Col: c.Col, Values: slices.Compact(vals)}
	}
	slices.SortFunc(out, func(a, b Cond) int { return a.Col - b.Col })
	for i := 1; i < len(out); i++ {
		if out[i].Col == out[i-1].Col {
			panic("feed: two conditions on one column")
		}
	}
	sc := Scope{Schema: s, Conds: out}
	sc.key = sc.buildKey()
	return sc
}

// Key returns a canonical string for the scope, equal for equal scopes, e.g.
// "todos?project_id=p7". It is used to group subscriptions and in logs.
func (s Scope) Key() string { return s.key }

func (s Scope) buildKey() string {
	var b strings.Builder
	b.WriteString(url.PathEscape(s.Schema.Name))
	for i, c := range s.Conds {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(s.Schema.ScopeColumn(c.Col).Name))
		b.WriteByte('=')
		for j, v := range c.Values {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(url.QueryEscape(v))
		}
	}
	return b.String()
}

// Match reports whether the change's scope values satisfy every condition.
// The change must belong to the scope's resource.
func (s Scope) Match(scope []string) bool {
	for _, c := range s.Conds {
		if c.Col >= len(scope) || !contains(c.Values, scope[c.Col]) {
			return false
		}
	}
	return true
}

func contains(sorted []string, v string) bool {
	if len(sorted) <= 8 {
		for _, x := range sorted {
			if x == v {
				return true
			}
		}
		return false
	}
	_, ok := slices.BinarySearch(sorted, v)
	return ok
}
