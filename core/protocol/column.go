package protocol

import "fmt"

// Kind is the value kind of a column, derived from its Go field type. It
// decides how a row value is written on the wire, how a condition value from
// a client is validated and how a feed binds the value in a query.
//
// A kind with the KindArray bit is an array of the kind without it
// (Elem): KindArray|KindInt is a []int64 field on an int[] column.
type Kind uint8

// Column kinds. Only KindString, KindInt, KindUint and KindBool may be primary
// key or scope columns, because their canonical text form is exact.
const (
	KindString  Kind = iota + 1 // string, or a named string type
	KindInt                     // int, int8 … int64
	KindUint                    // uint, uint8 … uint64
	KindFloat                   // float32, float64
	KindBool                    // bool
	KindTime                    // time.Time
	KindBytes                   // []byte
	KindJSON                    // json.RawMessage
	KindDecimal                 // Decimal: an exact decimal number as its text
	// KindText is a field whose type implements encoding.TextMarshaler
	// and encoding.TextUnmarshaler (the latter on its pointer) and is not
	// of a basic kind (a named string, integer, float or bool type keeps
	// its kind): its value on the wire is the JSON string of its text,
	// which is the column's Postgres text form.
	KindText

	// KindArray marks an array kind: KindArray|k is a slice of k's Go type
	// (or of pointers to it, whose nil is a NULL element), a JSON array on
	// the wire. Arrays of KindString, KindInt, KindUint, KindFloat,
	// KindBool, KindTime and KindDecimal are supported.
	KindArray Kind = 0x40
)

var kindNames = [...]string{"", "string", "int", "uint", "float", "bool", "time", "bytes", "json", "decimal", "text"}

// String returns the kind's name as used in error messages: "int",
// "[]decimal".
func (k Kind) String() string {
	if k.IsArray() {
		return "[]" + k.Elem().String()
	}
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// IsArray reports whether k is an array kind (KindArray|element).
func (k Kind) IsArray() bool { return k&KindArray != 0 }

// Elem returns the element kind of an array kind, and k itself otherwise.
func (k Kind) Elem() Kind { return k &^ KindArray }

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
