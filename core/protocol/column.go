package protocol

import "fmt"

// Kind is the value kind of a column, derived from its Go field type. It
// decides how a row value is written on the wire, how a condition value from
// a client is validated and how a feed binds the value in a query.
type Kind uint8

// Column kinds. Only KindString, KindInt, KindUint and KindBool may be primary
// key or scope columns, because their canonical text form is exact.
const (
	KindString Kind = iota + 1 // string
	KindInt                    // int, int8 … int64
	KindUint                   // uint, uint8 … uint64
	KindFloat                  // float32, float64
	KindBool                   // bool
	KindTime                   // time.Time
	KindBytes                  // []byte
	KindJSON                   // json.RawMessage
)

var kindNames = [...]string{"", "string", "int", "uint", "float", "bool", "time", "bytes", "json"}

// String returns the kind's name as used in error messages.
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Keyable reports whether columns of this kind may be a primary key or a scope
// column.
func (k Kind) Keyable() bool {
	return k == KindString || k == KindInt || k == KindUint || k == KindBool
}

// Column is one declared column of a resource.
type Column struct {
	Name     string // column name in the table and key in JSON rows
	Kind     Kind
	Nullable bool // the Go field is a pointer; NULL is JSON null
	// Field is the Go struct field declaring the column ("Title"), for
	// messages; "" in a schema built by hand.
	Field string
}
