package pgfeed_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// Declarations of one shape each, checked against tables of various column
// types.
type (
	declString struct {
		ID string `tide:"id,pk"`
		V  string `tide:"v"`
	}
	declInt struct {
		ID int64 `tide:"id,pk"`
		V  int   `tide:"v"`
	}
	declUint struct {
		ID string `tide:"id,pk"`
		V  uint64 `tide:"v"`
	}
	declFloat struct {
		ID string   `tide:"id,pk"`
		V  *float64 `tide:"v"`
	}
	declBool struct {
		ID string `tide:"id,pk"`
		V  bool   `tide:"v"`
	}
	declTime struct {
		ID string    `tide:"id,pk"`
		V  time.Time `tide:"v"`
	}
	declBytes struct {
		ID string `tide:"id,pk"`
		V  []byte `tide:"v"`
	}
	declJSON struct {
		ID string          `tide:"id,pk"`
		V  json.RawMessage `tide:"v"`
	}
	declNullable struct {
		ID string  `tide:"id,pk"`
		V  *string `tide:"v"`
	}
)

// TestMigrateChecksDeclarations: Migrate refuses every declaration whose
// field kinds do not fit the table's column types, or whose key is not a
// key of the table, with a message naming the resource, its Go type, the
// field, the column and both types; it accepts every fitting one.
func TestMigrateChecksDeclarations(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	type tc struct {
		columns  string // the table's columns
		register func(e *core.Engine, table string) error
		want     string // "" passes; else a fragment of the error
	}
	reg := func(f func(e *core.Engine, r string) error) func(*core.Engine, string) error { return f }
	str := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declString]{Table: r})
		return err
	})
	num := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declInt]{Table: r})
		return err
	})
	unum := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declUint]{Table: r})
		return err
	})
	flt := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declFloat]{Table: r})
		return err
	})
	boo := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declBool]{Table: r})
		return err
	})
	tim := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declTime]{Table: r})
		return err
	})
	byt := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declBytes]{Table: r})
		return err
	})
	jsn := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declJSON]{Table: r})
		return err
	})
	nul := reg(func(e *core.Engine, r string) error {
		_, err := core.Register(e, core.Resource[declNullable]{Table: r})
		return err
	})

	cases := []tc{
		// Fitting declarations.
		{"id text PRIMARY KEY, v text NOT NULL", str, ""},
		{"id text PRIMARY KEY, v varchar(20)", str, ""},
		{"id uuid PRIMARY KEY, v char(3)", str, ""},
		{"id text PRIMARY KEY, v uuid", str, ""},
		{"id text PRIMARY KEY, v citext_like", str, ""}, // a domain over text
		{"id bigint PRIMARY KEY, v int2", num, ""},
		{"id int4 PRIMARY KEY, v int4", num, ""},
		{"id int8 PRIMARY KEY, v int8", num, ""},
		{"id int8 PRIMARY KEY, v numeric(12)", num, ""},
		{"id text PRIMARY KEY, v numeric(20)", unum, ""},
		{"id text PRIMARY KEY, v numeric(10,2)", flt, ""},
		{"id text PRIMARY KEY, v double precision", flt, ""},
		{"id text PRIMARY KEY, v real NOT NULL", flt, ""}, // a pointer field on NOT NULL
		{"id text PRIMARY KEY, v integer", flt, ""},
		{"id text PRIMARY KEY, v boolean", boo, ""},
		{"id text PRIMARY KEY, v timestamptz", tim, ""},
		{"id text PRIMARY KEY, v timestamp", tim, ""},
		{"id text PRIMARY KEY, v date", tim, ""},
		{"id text PRIMARY KEY, v bytea", byt, ""},
		{"id text PRIMARY KEY, v json", jsn, ""},
		{"id text PRIMARY KEY, v jsonb", jsn, ""},
		{"id text PRIMARY KEY, v text[]", jsn, ""},
		{"id text PRIMARY KEY, v text", nul, ""}, // nullable column, pointer field
		{"id text PRIMARY KEY, v text", str, ""}, // nullable column, NULL reads as ""
		{"id text NOT NULL UNIQUE, v text", str, ""},
		{"n serial PRIMARY KEY, id text NOT NULL, v text, UNIQUE (id)", str, ""},

		// Wrong field kinds.
		{"id text PRIMARY KEY, v integer", str, "column v is integer, but field V is string (KindString): a string field needs"},
		{"id text PRIMARY KEY, v timestamptz", str, "column v is timestamp with time zone, but field V is string (KindString)"},
		{"id text PRIMARY KEY, v jsonb", str, "column v is jsonb, but field V is string (KindString)"},
		{"id text PRIMARY KEY, v boolean", str, "column v is boolean, but field V is string (KindString)"},
		{"id bigint PRIMARY KEY, v text", num, "column v is text, but field V is int (KindInt): an integer field needs a smallint, integer, bigint or numeric(p,0) column"},
		{"id bigint PRIMARY KEY, v numeric(10,2)", num, "column v is numeric(10,2), but field V is int (KindInt)"},
		{"id bigint PRIMARY KEY, v numeric", num, "column v is numeric, but field V is int (KindInt)"},
		{"id bigint PRIMARY KEY, v double precision", num, "column v is double precision, but field V is int (KindInt)"},
		{"id text PRIMARY KEY, v text", unum, "column v is text, but field V is uint (KindUint)"},
		{"id text PRIMARY KEY, v text", flt, "column v is text, but field V is float (KindFloat)"},
		{"id text PRIMARY KEY, v integer", boo, "column v is integer, but field V is bool (KindBool)"},
		{"id text PRIMARY KEY, v text", tim, "column v is text, but field V is time (KindTime): a time.Time field needs"},
		{"id text PRIMARY KEY, v bigint", tim, "column v is bigint, but field V is time (KindTime)"},
		{"id text PRIMARY KEY, v text", byt, "column v is text, but field V is bytes (KindBytes): a []byte field needs a bytea column"},
		{"id text PRIMARY KEY, v text", jsn, "column v is text, but field V is json (KindJSON)"},
		{"id integer PRIMARY KEY, v text", str, "column id is integer, but field ID is string (KindString)"},
		{"id text PRIMARY KEY", str, "has no column v (field V)"},

		// A key that is not a key of the table.
		{"id text NOT NULL, v text", str, "the key column id (tagged pk) is neither the primary key of"},
		{"n serial PRIMARY KEY, id text NOT NULL, v text", str, "the key column id (tagged pk) is neither"},
		{"id text NOT NULL, v text NOT NULL, UNIQUE (id, v)", str, "the key column id (tagged pk) is neither"},
		{"id text NOT NULL, v text", str, "the key column id (tagged pk) is neither"}, // with a partial unique index, below
	}
	if _, err := pool.Exec(ctx, "CREATE DOMAIN citext_like AS text"); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		table := "decl_" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" ("+c.columns+")"); err != nil {
			t.Fatalf("%s: %v", c.columns, err)
		}
		if i == len(cases)-1 {
			// A partial unique index does not make a key.
			if _, err := pool.Exec(ctx, "CREATE UNIQUE INDEX ON "+table+" (id) WHERE v <> ''"); err != nil {
				t.Fatal(err)
			}
		}
		e, err := core.New(core.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.register(e, table); err != nil {
			t.Fatal(err)
		}
		f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		err = f.Migrate(ctx, e.Schemas()...)
		f.Close()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: Migrate refused a fitting declaration: %v", c.columns, err)
		case c.want == "":
		case err == nil:
			t.Errorf("%s: Migrate accepted a declaration that does not fit (want %q)", c.columns, c.want)
		case !errors.Is(err, pgfeed.ErrMismatch):
			t.Errorf("%s: the error does not wrap ErrMismatch: %v", c.columns, err)
		case !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "pgfeed: migrate "+table+" (pgfeed_test.decl"):
			t.Errorf("%s: the error does not name the resource, its type and %q:\n%v", c.columns, c.want, err)
		}
	}
}

// TestMigrateMismatchChangesNothing: a declaration that does not fit stops
// Migrate before it installs anything, even for the resources that fit.
func TestMigrateMismatchChangesNothing(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, "CREATE TABLE good (id text PRIMARY KEY, v text); CREATE TABLE bad (id text PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	e, _ := core.New(core.Config{})
	if _, err := core.Register(e, core.Resource[declString]{Table: "good"}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[declInt]{Table: "bad"}); err != nil {
		t.Fatal(err)
	}
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := "pgfeed: migrate bad (pgfeed_test.declInt): column id is text, but field ID is int (KindInt)"
	if err := f.Migrate(ctx, e.Schemas()...); !errors.Is(err, pgfeed.ErrMismatch) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Migrate: %v\nwant %s…", err, want)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = $1", name+"_tide").Scan(&n); err != nil || n != 0 {
		t.Fatalf("tide's schema exists after a refused Migrate (%d, %v)", n, err)
	}
}

// TestMigrateMissingTable: a resource whose table does not exist stops
// Migrate, and tide.Open, with one error that says so, names the table as
// Postgres looked for it (in each schema of the search_path, for a Table
// without a schema) and says what to do; it does not suggest running
// Migrate, which is what failed.
func TestMigrateMissingTable(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		table string
		want  string // the whole error
	}{
		{"ghosts", "pgfeed: migrate ghosts (pgfeed_test.declString): table ghosts does not exist (looked for " + name + ".ghosts, from the connection's search_path): create the table before Migrate, or check the resource's Table (schema.table) and the search_path of the pool's connections"},
		{name + ".ghosts", "pgfeed: migrate ghosts (pgfeed_test.declString): table " + name + ".ghosts does not exist: create the table before Migrate, or check the resource's Table (schema.table) and the search_path of the pool's connections"},
		{name + "_none.ghosts", "pgfeed: migrate ghosts (pgfeed_test.declString): table " + name + "_none.ghosts does not exist: create the table before Migrate, or check the resource's Table (schema.table) and the search_path of the pool's connections"},
	} {
		register := func(e *core.Engine) error {
			_, err := core.Register(e, core.Resource[declString]{Name: "ghosts", Table: c.table})
			return err
		}
		e, err := core.New(core.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := register(e); err != nil {
			t.Fatal(err)
		}
		f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		err = f.Migrate(ctx, e.Schemas()...)
		f.Close()
		if err == nil || err.Error() != c.want || !errors.Is(err, pgfeed.ErrMismatch) {
			t.Errorf("Table %s: Migrate returned\n%v\nwant an error wrapping ErrMismatch:\n%s", c.table, err, c.want)
		}
		td, err := tide.Open(ctx, pool, tide.Config{Feed: pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)}}, register)
		if err == nil {
			td.Close(ctx)
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("Table %s: tide.Open returned\n%v\nwant\n%s", c.table, err, c.want)
		}
	}
}
