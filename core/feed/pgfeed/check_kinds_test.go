package pgfeed_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

// TestMigrateChecksValueKinds: Migrate checks decimal, text-form and array
// fields, and string fields on enums, domains, uuid, inet, cidr and
// intervals, against the table's column types; a misfit is an error naming
// the column, its type, the field, its kind, what the field needs and the
// Go types that fit the column.
func TestMigrateChecksValueKinds(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ddl := range []string{
		"CREATE TYPE vk_mood AS ENUM ('happy', 'sad')",
		"CREATE DOMAIN vk_money AS numeric(12,2)",
		"CREATE DOMAIN vk_label AS varchar(20)",
		"CREATE DOMAIN vk_ints AS bigint[]",
		"CREATE DOMAIN vk_pos AS bigint CHECK (VALUE > 0)",
		"CREATE DOMAIN vk_money2 AS vk_money",
		"CREATE DOMAIN vk_whole AS numeric(12,0)",
		"CREATE DOMAIN vk_whole2 AS vk_whole",
	} {
		exec2(t, pool, ddl)
	}
	const (
		str  = protocol.KindString
		dec  = protocol.KindDecimal
		txt  = protocol.KindText
		arr  = protocol.KindArray
		flt  = protocol.KindFloat
		intk = protocol.KindInt
		tim  = protocol.KindTime
		jsn  = protocol.KindJSON
	)
	for i, c := range []struct {
		col  string        // the type of column v
		kind protocol.Kind // the kind of field V
		want string        // "" passes; else a fragment of the error
	}{
		// Fitting declarations.
		{"numeric", dec, ""},
		{"numeric(10,2)", dec, ""},
		{"vk_money", dec, ""},
		{"bigint", dec, ""},
		{"integer", dec, ""},
		{"vk_mood", str, ""},
		{"vk_label", str, ""},
		{"uuid", str, ""},
		{"inet", str, ""},
		{"cidr", str, ""},
		{"interval", str, ""},
		{"inet", txt, ""},
		{"uuid", txt, ""},
		{"numeric", txt, ""},
		{"text", txt, ""},
		{"vk_mood", txt, ""},
		{"text[]", arr | str, ""},
		{"varchar(4)[]", arr | str, ""},
		{"vk_mood[]", arr | str, ""},
		{"uuid[]", arr | str, ""},
		{"bigint[]", arr | intk, ""},
		{"int2[]", arr | intk, ""},
		{"vk_ints", arr | intk, ""},
		{"numeric(20,0)[]", arr | protocol.KindUint, ""},
		{"double precision[]", arr | flt, ""},
		{"boolean[]", arr | protocol.KindBool, ""},
		{"timestamptz[]", arr | tim, ""},
		{"date[]", arr | tim, ""},
		{"numeric[]", arr | dec, ""},
		{"vk_money[]", arr | dec, ""},
		{"vk_pos", intk, ""},
		{"vk_money2", dec, ""},
		{"vk_whole2", intk, ""},
		{"vk_whole2", dec, ""},
		{"integer[]", jsn, ""},

		// Misfits.
		{"text", dec, "column v is text, but field V is decimal (KindDecimal): a protocol.Decimal field needs a numeric (or integer) column (declare string for this column)"},
		{"double precision", dec, "column v is double precision, but field V is decimal (KindDecimal): a protocol.Decimal field needs a numeric (or integer) column (declare float64 for this column)"},
		{"numeric[]", dec, "column v is numeric[], but field V is decimal (KindDecimal): a protocol.Decimal field needs a numeric (or integer) column (declare []protocol.Decimal or json.RawMessage for this column)"},
		{"numeric", str, "column v is numeric, but field V is string (KindString): a string field needs a text, varchar, char, enum, uuid, inet, cidr or interval column (declare protocol.Decimal for this column)"},
		{"vk_money", str, "column v is vk_money, but field V is string (KindString)"},
		{"vk_money2", intk, "column v is vk_money2, but field V is int (KindInt): an integer field needs a smallint, integer, bigint or numeric(p,0) column (declare protocol.Decimal for this column)"},
		{"vk_money2", str, "column v is vk_money2, but field V is string (KindString)"},
		{"numeric(10,0)", flt, ""},
		{"numeric", intk, "(declare protocol.Decimal for this column)"},
		{"text", arr | str, "column v is text, but field V is []string (KindArray|KindString): a slice field needs an array column (such as text[]) (declare string for this column)"},
		{"bigint", arr | intk, "column v is bigint, but field V is []int (KindArray|KindInt): a slice field needs an array column (such as bigint[]) (declare int64 for this column)"},
		{"jsonb", arr | str, "column v is jsonb, but field V is []string (KindArray|KindString): a slice field needs an array column"},
		{"text[]", arr | intk, "column v is text[], but field V is []int (KindArray|KindInt): its elements are text: an integer field needs a smallint, integer, bigint or numeric(p,0) column (declare []string or json.RawMessage for this column)"},
		{"numeric(10,2)[]", arr | intk, "its elements are numeric: an integer field needs"},
		{"bigint[]", arr | dec, ""},
		{"timestamptz[]", arr | str, "its elements are timestamptz: a string field needs"},
		{"text[]", str, "column v is text[], but field V is string (KindString): a string field needs"},
		{"bigint[]", intk, "column v is bigint[], but field V is int (KindInt): an integer field needs a smallint, integer, bigint or numeric(p,0) column (declare []int64 or json.RawMessage for this column)"},
		{"bigint[][]", arr | intk, "column v is bigint[], but field V is []int (KindArray|KindInt): multidimensional arrays are not supported (declare json.RawMessage for a multidimensional array column)"},
		{"point", str, "column v is point, but field V is string (KindString): a string field needs a text, varchar, char, enum, uuid, inet, cidr or interval column (declare json.RawMessage, or a type implementing encoding.TextMarshaler, for this column)"},
		{"point", txt, "column v is point, but field V is text (KindText): a field of a type implementing encoding.TextMarshaler needs a column whose text it holds"},
		{"boolean", txt, "column v is boolean, but field V is text (KindText)"},
		{"tsvector", str, "(declare json.RawMessage, or a type implementing encoding.TextMarshaler, for this column)"},
		{"interval", tim, "column v is interval, but field V is time (KindTime): a time.Time field needs a timestamptz, timestamp or date column (declare string for this column)"},
	} {
		table := "vk_" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		exec2(t, pool, "CREATE TABLE "+table+" (id text PRIMARY KEY, v "+c.col+")")
		s := &feed.Schema{Name: table, Table: table, Keys: []int{0}, Columns: []protocol.Column{
			{Name: "id", Kind: str, Field: "ID"}, {Name: "v", Kind: c.kind, Field: "V"},
		}}
		f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		err = f.Migrate(ctx, s)
		f.Close()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s, %s: Migrate refused a fitting declaration: %v", c.col, c.kind, err)
		case c.want == "":
		case err == nil:
			t.Errorf("%s, %s: Migrate accepted a declaration that does not fit (want %q)", c.col, c.kind, c.want)
		case !errors.Is(err, pgfeed.ErrMismatch):
			t.Errorf("%s, %s: the error does not wrap ErrMismatch: %v", c.col, c.kind, err)
		case !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "pgfeed: migrate "+table+": "):
			t.Errorf("%s, %s: the error does not name the resource and %q:\n%v", c.col, c.kind, c.want, err)
		}
	}
}
