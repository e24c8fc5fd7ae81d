package core

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/protocol"
)

type goodRow struct {
	ID        string          `tide:"id,pk"`
	ProjectID string          `tide:"project_id,scope"`
	Owner     int64           `tide:"owner,scope"`
	Title     string          `tide:"title"`
	Done      bool            `tide:"done"`
	Score     float64         `tide:"score"`
	At        time.Time       `tide:"at"`
	Note      *string         `tide:"note"`
	Blob      []byte          `tide:"blob"`
	Meta      json.RawMessage `tide:"meta"`
	Count     *uint16         `tide:"count"`
	Ignored   string
	Skipped   string `tide:"-"`
}

func newTestEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

func TestRegisterSchema(t *testing.T) {
	e := newTestEngine(t)
	tbl, err := Register(e, Resource[goodRow]{Table: "app.todos"})
	if err != nil {
		t.Fatal(err)
	}
	s := tbl.Schema()
	if s.Name != "todos" || s.Table != "app.todos" {
		t.Fatalf("name %q table %q", s.Name, s.Table)
	}
	var names []string
	for _, c := range s.Columns {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "id,project_id,owner,title,done,score,at,note,blob,meta,count" {
		t.Fatalf("columns %s", got)
	}
	if s.KeyColumn(0).Name != "id" || len(s.Scope) != 2 || s.ScopeColumn(0).Name != "project_id" || s.ScopeColumn(1).Name != "owner" {
		t.Fatalf("key/scope wrong: %+v", s)
	}
	if !s.Columns[7].Nullable || s.Columns[3].Nullable {
		t.Fatal("nullability wrong")
	}
}

func TestRegisterErrors(t *testing.T) {
	type noPK struct {
		Title string `tide:"title"`
	}
	type twoPK struct { // a composite key whose second part cannot be one
		A string   `tide:"a,pk"`
		B *float64 `tide:"b,pk"`
	}
	type badOpt struct {
		ID string `tide:"id,primary"`
	}
	type badType struct {
		ID   string         `tide:"id,pk"`
		Tags map[string]int `tide:"tags"`
	}
	type floatScope struct {
		ID string  `tide:"id,pk"`
		X  float64 `tide:"x,scope"`
	}
	type ptrPK struct {
		ID *string `tide:"id,pk"`
	}
	type dupCol struct {
		ID string `tide:"id,pk"`
		A  string `tide:"a"`
		B  string `tide:"a"`
	}
	type unexported struct {
		ID string `tide:"id,pk"`
		x  string `tide:"x"` //lint:ignore U1000 the case is a tagged field the registry must refuse for being unexported
	}
	type structField struct {
		ID  string   `tide:"id,pk"`
		Sub struct{} `tide:"sub"`
	}
	e := newTestEngine(t)
	check := func(t *testing.T, err error, want error, text string) {
		t.Helper()
		if err == nil {
			t.Fatalf("registered, want %v", want)
		}
		if want != nil && !errors.Is(err, want) {
			t.Fatalf("error %v is not %v", err, want)
		}
		if !strings.Contains(err.Error(), text) {
			t.Fatalf("error %q does not mention %q", err, text)
		}
	}
	t.Run("no primary key", func(t *testing.T) {
		_, err := Register(e, Resource[noPK]{Table: "a"})
		check(t, err, protocol.ErrNoPrimaryKey, "primary key")
	})
	t.Run("a composite key part that is not keyable", func(t *testing.T) {
		_, err := Register(e, Resource[twoPK]{Table: "a"})
		check(t, err, protocol.ErrUnsupportedType, "a primary key column must be a string, integer or bool")
	})
	t.Run("unknown tag option", func(t *testing.T) {
		_, err := Register(e, Resource[badOpt]{Table: "a"})
		check(t, err, protocol.ErrBadTag, `unknown tag option "primary"`)
	})
	t.Run("unsupported field type", func(t *testing.T) {
		_, err := Register(e, Resource[badType]{Table: "a"})
		check(t, err, protocol.ErrUnsupportedType, "Tags")
	})
	t.Run("float scope", func(t *testing.T) {
		_, err := Register(e, Resource[floatScope]{Table: "a"})
		check(t, err, protocol.ErrUnsupportedType, "scope column")
	})
	t.Run("pointer pk", func(t *testing.T) {
		_, err := Register(e, Resource[ptrPK]{Table: "a"})
		check(t, err, protocol.ErrUnsupportedType, "primary key")
	})
	t.Run("duplicate column", func(t *testing.T) {
		_, err := Register(e, Resource[dupCol]{Table: "a"})
		check(t, err, protocol.ErrBadTag, `column "a"`)
	})
	t.Run("unexported field", func(t *testing.T) {
		_, err := Register(e, Resource[unexported]{Table: "a"})
		check(t, err, protocol.ErrBadTag, "not exported")
	})
	t.Run("struct field", func(t *testing.T) {
		_, err := Register(e, Resource[structField]{Table: "a"})
		check(t, err, protocol.ErrUnsupportedType, "Sub")
	})
	t.Run("not a struct", func(t *testing.T) {
		_, err := Register(e, Resource[string]{Table: "a"})
		check(t, err, protocol.ErrUnsupportedType, "not a struct")
	})
	t.Run("missing table", func(t *testing.T) {
		_, err := Register(e, Resource[goodRow]{})
		check(t, err, ErrInvalidResource, "Table is required")
	})
	t.Run("bad table", func(t *testing.T) {
		_, err := Register(e, Resource[goodRow]{Table: "todos; drop table x"})
		check(t, err, ErrInvalidResource, "table")
	})
	t.Run("bad name", func(t *testing.T) {
		_, err := Register(e, Resource[goodRow]{Table: "todos", Name: "to.dos"})
		check(t, err, ErrInvalidResource, "name")
	})
	t.Run("duplicate resource", func(t *testing.T) {
		if _, err := Register(e, Resource[goodRow]{Table: "dups"}); err != nil {
			t.Fatal(err)
		}
		_, err := Register(e, Resource[goodRow]{Table: "other.dups"})
		check(t, err, ErrDuplicateResource, "dups")
	})
}
