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
}

// checkDeclaration reads the catalog entries of s's table and returns an
// error wrapping ErrMismatch naming every declared column that does not fit.
func (f *Feed) checkDeclaration(ctx context.Context, q querier, s *feed.Schema) error {
	rows, err := q.Query(ctx, `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod),
  coalesce(b.typname, t.typname)::text, coalesce(b.typcategory, t.typcategory)::text,
  CASE WHEN coalesce(b.typname, t.typname) = 'numeric' AND coalesce(nullif(t.typtypmod, -1), a.atttypmod) >= 4
    THEN (coalesce(nullif(t.typtypmod, -1), a.atttypmod) - 4) & 65535 ELSE -1 END,
  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = a.attrelid AND i.indisunique
    AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum AND i.indpred IS NULL AND i.indexprs IS NULL)
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_catalog.pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, tableIdent(s.Table))
	if err != nil {
		return readColumnsError(ctx, q, s, err)
	}
	cols := map[string]catalogColumn{}
	for rows.Next() {
		var name string
		var c catalogColumn
		if err := rows.Scan(&name, &c.typ, &c.base, &c.category, &c.scale, &c.unique); err != nil {
			rows.Close()
			return readColumnsError(ctx, q, s, err)
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
			problems = append(problems, fmt.Sprintf("column %s is %s, but %s is %s: %s", d.Name, c.typ, fieldName(d), kindGo(d.Kind), want))
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

// kindGo renders a kind with its constant, "int (KindInt)".
func kindGo(k protocol.Kind) string {
	names := map[protocol.Kind]string{
		protocol.KindString: "KindString", protocol.KindInt: "KindInt", protocol.KindUint: "KindUint",
		protocol.KindFloat: "KindFloat", protocol.KindBool: "KindBool", protocol.KindTime: "KindTime",
		protocol.KindBytes: "KindBytes", protocol.KindJSON: "KindJSON",
	}
	return k.String() + " (" + names[k] + ")"
}

// fits returns "" if a field of kind k holds every value of column c as the
// capture renders it, and otherwise the column types such a field needs.
//
// Nullability is not checked: NULL reaches a field that is not a pointer
// as its zero value, and a pointer field on a NOT NULL column is merely
// never nil.
func fits(k protocol.Kind, c catalogColumn) string {
	isInt := c.base == "int2" || c.base == "int4" || c.base == "int8"
	switch k {
	case protocol.KindString:
		// Text types, enums, uuid, network addresses: JSON strings.
		if c.category == "S" || c.category == "E" || c.category == "I" || c.base == "uuid" {
			return ""
		}
		return "a string field needs a text, varchar, char, uuid or enum column"
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
