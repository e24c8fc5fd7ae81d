package feed

import "github.com/tidesync/tide/core/protocol"

// Schema describes a resource: a synced table. Package core builds it from a
// Go struct; feeds use it to capture, replay and snapshot. A Schema is
// immutable once registered and safe to share.
type Schema struct {
	Name    string            // resource name used on the wire
	Table   string            // table name, optionally schema-qualified ("app.todos")
	Columns []protocol.Column // declared columns, in struct field order
	// Keys are the indexes in Columns of the primary key's parts, in
	// declared order: one for a single-column key, several for a
	// composite key. A change's Key is protocol.EncodeKey of the parts'
	// canonical texts.
	Keys  []int
	Scope []int // indexes in Columns of the scope columns, in declared order
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

// KeyColumn returns the i-th part of the primary key (i indexes Keys, not
// Columns).
func (s *Schema) KeyColumn(i int) protocol.Column { return s.Columns[s.Keys[i]] }

// KeyIndex returns the index in Keys of the named key column, or -1.
func (s *Schema) KeyIndex(name string) int {
	for i, c := range s.Keys {
		if s.Columns[c].Name == name {
			return i
		}
	}
	return -1
}

// KeyParts returns the canonical texts of the parts of key, a change's or
// a mutation's Key: key itself for a single-column key, the decoded parts
// of a composite one (see protocol.DecodeKey), whose error it returns for
// a text that is not a key of this schema.
func (s *Schema) KeyParts(key string) ([]string, error) {
	return protocol.DecodeKey(key, len(s.Keys))
}

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
