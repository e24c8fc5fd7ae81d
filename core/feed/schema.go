package feed

import "github.com/tidesync/tide/core/protocol"

// Schema describes a resource: a synced table. Package core builds it from a
// Go struct; feeds use it to capture, replay and snapshot. A Schema is
// immutable once registered and safe to share.
type Schema struct {
	Name    string            // resource name used on the wire
	Table   string            // table name, optionally schema-qualified ("app.todos")
	Columns []protocol.Column // declared columns, in struct field order
	Key     int               // index in Columns of the primary key
	Scope   []int             // indexes in Columns of the scope columns, in declared order
	// PrevColumns are the indexes in Columns of what the engine reads of a
	// row's previous version (Change.Prev), in declared order: the columns
	// the resource's row filter reads, or every column for a resource with
	// column policies (which compare each column with its previous value).
	// Empty: the resource has neither, and a feed need not record previous
	// versions for it.
	PrevColumns []int
	// Type is the Go type declaring the resource ("main.Todo"), for
	// messages; "" in a schema built by hand.
	Type string
}

// KeyColumn returns the primary key column.
func (s *Schema) KeyColumn() protocol.Column { return s.Columns[s.Key] }

// ScopeColumn returns the i-th scope column (i indexes Scope, not Columns).
func (s *Schema) ScopeColumn(i int) protocol.Column { return s.Columns[s.Scope[i]] }

// ScopeIndex returns the index in Scope of the named scope column, or -1.
func (s *Schema) ScopeIndex(name string) int {
	for i, c := range s.Scope {
		if s.Columns[c].Name == name {
			return i
		}
	}
	return -1
}
