package pgfeed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// ErrMismatch is wrapped by the error Migrate returns when a resource's
// declaration does not fit its table: a table that does not exist, a
// column the table lacks, a field
// whose Go type cannot hold the column's values, or a key column that is
// neither the table's primary key nor covered alone by a unique index.
// Migrate then changes nothing.
var ErrMismatch = errors.New("the declaration does not match the table")

// catalogColumn is what the declaration check reads of one table column.
type catalogColumn struct {
	typ      string // format_type: "text", "timestamp with time zone", "numeric(20,0)"
	base     string // pg_type.typname of the column's type, through domains: "text", "timestamptz"
	category string // pg_type.typcategory: 'A' array, 'E' enum, 'S' string …
	scale    int    // numeric's scale, -1 if unconstrained or not numeric
	unique   bool   // the column alone is the primary key or a unique index
	// elem is an array column's element type (through domains), nil for
	// any other column.
	elem *catalogColumn
	dims int // the declared dimensions of an array column (int[][]: 2); 0 if undeclared
}

// checkDeclaration reads the catalog entries of s's table and returns an
// error wrapping ErrMismatch naming every declared column that does not fit.
func (f *Feed) checkDeclaration(ctx context.Context, q querier, s *feed.Schema) error {
	// A domain is checked by its base type (b, through two levels of
	// domains); an array by its element
	// type (e, or its base type eb if the elements are of a domain), with
	// the column's typmod (numeric(p,s)[]).
	rows, err := q.Query(ctx, `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod),
  coalesce(b.typname, t.typname)::text, coalesce(b.typcategory, t.typcategory)::text,
  CASE WHEN coalesce(b.typname, t.typname) = 'numeric' AND coalesce(nullif(t.typtypmod, -1), nullif(b1.typtypmod, -1), a.atttypmod) >= 4
    THEN (coalesce(nullif(t.typtypmod, -1), nullif(b1.typtypmod, -1), a.atttypmod) - 4) & 65535 ELSE -1 END,
  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = a.attrelid AND i.indisunique
    AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum AND i.indpred IS NULL AND i.indexprs IS NULL),
  coalesce(eb.typname, e.typname, '')::text, coalesce(eb.typcategory, e.typcategory, '')::text,
  CASE WHEN coalesce(eb.typname, e.typname) = 'numeric' AND coalesce(nullif(e.typtypmod, -1), nullif(t.typtypmod, -1), a.atttypmod) >= 4
    THEN (coalesce(nullif(e.typtypmod, -1), nullif(t.typtypmod, -1), a.atttypmod) - 4) & 65535 ELSE -1 END,
  a.attndims
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_catalog.pg_type b1 ON t.typtype = 'd' AND b1.oid = t.typbasetype
LEFT JOIN pg_catalog.pg_type b ON b.oid = CASE WHEN b1.typtype = 'd' THEN b1.typbasetype ELSE b1.oid END
LEFT JOIN pg_catalog.pg_type e ON coalesce(b.typcategory, t.typcategory) = 'A' AND e.oid = coalesce(b.typelem, t.typelem)
LEFT JOIN pg_catalog.pg_type eb ON e.typtype = 'd' AND eb.oid = e.typbasetype
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, tableIdent(s.Table))
	if err != nil {
		return readColumnsError(ctx, q, s, err)
	}
	cols := map[string]catalogColumn{}
	for rows.Next() {
		var name string
		var c catalogColumn
		var dims int16
		c.elem = &catalogColumn{}
		if err := rows.Scan(&name, &c.typ, &c.base, &c.category, &c.scale, &c.unique, &c.elem.base, &c.elem.category, &c.elem.scale, &dims); err != nil {
			rows.Close()
			return readColumnsError(ctx, q, s, err)
		}
		c.dims = int(dims)
		if c.category != "A" {
			c.elem = nil
		} else {
			c.elem.typ = c.elem.base
		}
		cols[name] = c
	}
	if err := rows.Err(); err != nil {
		// The server reports a missing table here, when the rows are
		// read, not when the query is sent.
		return readColumnsError(ctx, q, s, err)
	}
	var problems []string
	for i, d := range s.Columns {
		c, ok := cols[d.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("table %s has no column %s (%s)", s.Table, d.Name, fieldName(d)))
			continue
		}
		if want := fits(d.Kind, c); want != "" {
			problems = append(problems, fmt.Sprintf("column %s is %s, but %s is %s: %s (%s)", d.Name, c.typ, fieldName(d), kindGo(d.Kind), want, nearest(c)))
		}
		if len(s.Keys) == 1 && i == s.Keys[0] && !c.unique {
			problems = append(problems, fmt.Sprintf("the key column %s (tagged pk) is neither the primary key of %s nor alone in a unique index: declare the table's key, or add a unique index on %s", d.Name, s.Table, d.Name))
		}
	}
	if len(s.Keys) > 1 {
		p, err := checkCompositeKey(ctx, q, s)
		if err != nil {
			return readColumnsError(ctx, q, s, err)
		}
		if p != "" {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %s: %w", declName(s), strings.Join(problems, "; "), ErrMismatch)
	}
	return nil
}

// checkCompositeKey returns "" if the columns of s's composite key are
// together, and alone, the primary key of its table or the columns of a
// unique index (in any order: what ON CONFLICT needs), and otherwise the
// problem.
func checkCompositeKey(ctx context.Context, q querier, s *feed.Schema) (string, error) {
	rows, err := q.Query(ctx, `SELECT ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(n, o)
  JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
  WHERE k.o <= i.indnkeyatts ORDER BY a.attname)
FROM pg_catalog.pg_index i
WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL`, tableIdent(s.Table))
	if err != nil {
		return "", err
	}
	names := make([]string, len(s.Keys))
	for i := range s.Keys {
		names[i] = s.KeyColumn(i).Name
	}
	want := slices.Sorted(slices.Values(names))
	found := false
	for rows.Next() {
		var cols []string
		if err := rows.Scan(&cols); err != nil {
			rows.Close()
			return "", err
		}
		found = found || slices.Equal(cols, want)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if found {
		return "", nil
	}
	list := strings.Join(names, ", ")
	return fmt.Sprintf("the key columns %s (tagged pk) are neither the primary key of %s nor together the columns of a unique index: declare the table's key as PRIMARY KEY (%s), or add a unique index on (%s)", list, s.Table, list, list), nil
}

// readColumnsError describes err, the failure to read the columns of s's
// table, for Migrate (which prefixes "pgfeed: migrate "): a missing table
// is named as Postgres looked for it, with what to do (see
// missingTableError); any other failure names the resource and the table.
func readColumnsError(ctx context.Context, q querier, s *feed.Schema, err error) error {
	if isUndefinedTable(err) {
		return missingTableError(ctx, q, s)
	}
	return fmt.Errorf("%s: read the columns of table %s: %w", declName(s), s.Table, err)
}

// missingTableError is the error for a resource whose table does not
// exist. It wraps ErrMismatch (Migrate changed nothing), and names the
// table as Postgres looked for it: a Table without a schema is looked up in
// each schema of the connection's search_path, which it lists, since a
// table created in another schema than the app's connections search is a
// common cause.
func missingTableError(ctx context.Context, q querier, s *feed.Schema) error {
	msg := fmt.Sprintf("%s: table %s does not exist", declName(s), s.Table)
	if !strings.Contains(s.Table, ".") {
		var searched []string
		read := false
		if rows, err := q.Query(ctx, "SELECT pg_catalog.current_schemas(false)::text[]"); err == nil {
			for rows.Next() {
				read = rows.Scan(&searched) == nil
			}
			rows.Close()
		}
		names := make([]string, len(searched))
		for i, sch := range searched {
			names[i] = sch + "." + s.Table
		}
		switch {
		case !read:
		case len(names) == 0:
			msg += " (the connection's search_path names no existing schema to look in)"
		default:
			msg += " (looked for " + strings.Join(names, ", ") + ", from the connection's search_path)"
		}
	}
	return &noTableError{msg: msg + ": create the table before Migrate, or check the resource's Table (schema.table) and the search_path of the pool's connections"}
}

// noTableError is Migrate's error for a resource whose table is missing.
// It wraps ErrMismatch without repeating its text, which says the
// declaration does not match a table that is there.
type noTableError struct{ msg string }

func (e *noTableError) Error() string { return e.msg }
func (e *noTableError) Unwrap() error { return ErrMismatch }

// declName names a resource in messages: "todos (main.Todo)".
func declName(s *feed.Schema) string {
	if s.Type != "" {
		return s.Name + " (" + s.Type + ")"
	}
	return s.Name
}

// fieldName names a declared column's field in messages.
func fieldName(c protocol.Column) string {
	if c.Field != "" {
		return "field " + c.Field
	}
	return "the field"
}

// kindGo renders a kind with its constant, "int (KindInt)", "[]int
// (KindArray|KindInt)".
func kindGo(k protocol.Kind) string {
	names := map[protocol.Kind]string{
		protocol.KindString: "KindString", protocol.KindInt: "KindInt", protocol.KindUint: "KindUint",
		protocol.KindFloat: "KindFloat", protocol.KindBool: "KindBool", protocol.KindTime: "KindTime",
		protocol.KindBytes: "KindBytes", protocol.KindJSON: "KindJSON", protocol.KindDecimal: "KindDecimal",
		protocol.KindText: "KindText",
	}
	if k.IsArray() {
		return k.String() + " (KindArray|" + names[k.Elem()] + ")"
	}
	return k.String() + " (" + names[k] + ")"
}

// nearest names the Go field types that fit column c, for messages.
func nearest(c catalogColumn) string {
	if c.elem != nil {
		if c.dims > 1 {
			return "declare json.RawMessage for a multidimensional array column"
		}
		el := nearestType(*c.elem)
		if el == "" {
			return "declare json.RawMessage for this column"
		}
		return "declare []" + el + " or json.RawMessage for this column"
	}
	if t := nearestType(c); t != "" {
		return "declare " + t + " for this column"
	}
	return "declare json.RawMessage, or a type implementing encoding.TextMarshaler, for this column"
}

// nearestType returns the Go type that fits a scalar column c best, "" if
// none is natural.
func nearestType(c catalogColumn) string {
	switch {
	case c.base == "int2" || c.base == "int4" || c.base == "int8" || c.base == "numeric" && c.scale == 0:
		return "int64"
	case c.base == "numeric":
		return "protocol.Decimal"
	case c.base == "float4" || c.base == "float8":
		return "float64"
	case c.base == "bool":
		return "bool"
	case c.base == "timestamptz" || c.base == "timestamp" || c.base == "date":
		return "time.Time"
	case c.base == "bytea":
		return "[]byte"
	case c.base == "json" || c.base == "jsonb":
		return "json.RawMessage"
	case textForm(c):
		return "string"
	}
	return ""
}

// textForm reports whether a string field holds column c's values: text
// types, enums, uuid, network addresses and intervals, which the capture
// renders as their Postgres text.
func textForm(c catalogColumn) bool {
	return c.category == "S" || c.category == "E" || c.category == "I" || c.base == "uuid" || c.base == "interval"
}

// fits returns "" if a field of kind k holds every value of column c as the
// capture renders it, and otherwise the column types such a field needs.
//
// Nullability is not checked: NULL reaches a field that is not a pointer
// as its zero value, and a pointer field on a NOT NULL column is merely
// never nil.
func fits(k protocol.Kind, c catalogColumn) string {
	if k.IsArray() {
		if c.elem == nil {
			return "a slice field needs an array column (such as " + arrayExample(k.Elem()) + ")"
		}
		if c.dims > 1 {
			return "multidimensional arrays are not supported"
		}
		if want := fits(k.Elem(), *c.elem); want != "" {
			return "its elements are " + c.elem.typ + ": " + want
		}
		return ""
	}
	isInt := c.base == "int2" || c.base == "int4" || c.base == "int8"
	switch k {
	case protocol.KindString:
		// Text types, enums, uuid, network addresses, intervals: JSON
		// strings of their text.
		if textForm(c) {
			return ""
		}
		return "a string field needs a text, varchar, char, enum, uuid, inet, cidr or interval column"
	case protocol.KindText:
		if textForm(c) || c.base == "numeric" || isInt {
			return ""
		}
		return "a field of a type implementing encoding.TextMarshaler needs a column whose text it holds: text, varchar, char, enum, uuid, inet, cidr, interval, numeric or integer"
	case protocol.KindDecimal:
		if c.base == "numeric" || isInt {
			return ""
		}
		return "a protocol.Decimal field needs a numeric (or integer) column"
	case protocol.KindInt, protocol.KindUint:
		if isInt || c.base == "numeric" && c.scale == 0 {
			return ""
		}
		return "an integer field needs a smallint, integer, bigint or numeric(p,0) column"
	case protocol.KindFloat:
		if isInt || c.base == "float4" || c.base == "float8" || c.base == "numeric" {
			return ""
		}
		return "a float field needs a real, double precision or numeric column"
	case protocol.KindBool:
		if c.base == "bool" {
			return ""
		}
		return "a bool field needs a boolean column"
	case protocol.KindTime:
		if c.base == "timestamptz" || c.base == "timestamp" || c.base == "date" {
			return ""
		}
		return "a time.Time field needs a timestamptz, timestamp or date column"
	case protocol.KindBytes:
		if c.base == "bytea" {
			return ""
		}
		return "a []byte field needs a bytea column"
	case protocol.KindJSON:
		if c.base == "json" || c.base == "jsonb" || c.category == "A" {
			return ""
		}
		return "a json.RawMessage field needs a json, jsonb or array column"
	}
	return "no column type fits this kind"
}

// arrayExample names an array column type for elements of kind k.
func arrayExample(k protocol.Kind) string {
	switch k {
	case protocol.KindInt, protocol.KindUint:
		return "bigint[]"
	case protocol.KindFloat:
		return "double precision[]"
	case protocol.KindBool:
		return "boolean[]"
	case protocol.KindTime:
		return "timestamptz[]"
	case protocol.KindDecimal:
		return "numeric[]"
	}
	return "text[]"
}
