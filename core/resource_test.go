package core

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
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
	if s.KeyColumn().Name != "id" || len(s.Scope) != 2 || s.ScopeColumn(0).Name != "project_id" || s.ScopeColumn(1).Name != "owner" {
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
	type twoPK struct {
		A string `tide:"a,pk"`
		B string `tide:"b,pk"`
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
		x  string `tide:"x"`
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
		check(t, err, ErrNoPrimaryKey, "primary key")
	})
	t.Run("two primary keys", func(t *testing.T) {
		_, err := Register(e, Resource[twoPK]{Table: "a"})
		check(t, err, ErrBadTag, "composite")
	})
	t.Run("unknown tag option", func(t *testing.T) {
		_, err := Register(e, Resource[badOpt]{Table: "a"})
		check(t, err, ErrBadTag, `unknown tag option "primary"`)
	})
	t.Run("unsupported field type", func(t *testing.T) {
		_, err := Register(e, Resource[badType]{Table: "a"})
		check(t, err, ErrUnsupportedType, "Tags")
	})
	t.Run("float scope", func(t *testing.T) {
		_, err := Register(e, Resource[floatScope]{Table: "a"})
		check(t, err, ErrUnsupportedType, "scope column")
	})
	t.Run("pointer pk", func(t *testing.T) {
		_, err := Register(e, Resource[ptrPK]{Table: "a"})
		check(t, err, ErrUnsupportedType, "primary key")
	})
	t.Run("duplicate column", func(t *testing.T) {
		_, err := Register(e, Resource[dupCol]{Table: "a"})
		check(t, err, ErrBadTag, `column "a"`)
	})
	t.Run("unexported field", func(t *testing.T) {
		_, err := Register(e, Resource[unexported]{Table: "a"})
		check(t, err, ErrBadTag, "not exported")
	})
	t.Run("struct field", func(t *testing.T) {
		_, err := Register(e, Resource[structField]{Table: "a"})
		check(t, err, ErrUnsupportedType, "Sub")
	})
	t.Run("not a struct", func(t *testing.T) {
		_, err := Register(e, Resource[string]{Table: "a"})
		check(t, err, ErrUnsupportedType, "not a struct")
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

func TestRowRoundTrip(t *testing.T) {
	note := "n\"ote"
	var cnt uint16 = 7
	in := goodRow{
		ID: "t1", ProjectID: "p7", Owner: -3, Title: "hé\nllo", Done: true, Score: 1.5,
		At: time.Date(2026, 11, 30, 15, 4, 5, 123456000, time.UTC), Note: &note,
		Blob: []byte{0, 1, 2, 255}, Meta: json.RawMessage(`{"a":[1,2]}`), Count: &cnt,
		Ignored: "x", Skipped: "y",
	}
	key, row, err := EncodeRow(in)
	if err != nil {
		t.Fatal(err)
	}
	if key != "t1" || !json.Valid(row) {
		t.Fatalf("key %q row %s", key, row)
	}
	out, err := DecodeRow[goodRow](row)
	if err != nil {
		t.Fatal(err)
	}
	in.Ignored, in.Skipped = "", ""
	if !out.At.Equal(in.At) {
		t.Fatalf("time %v != %v", out.At, in.At)
	}
	out.At = in.At
	a, _ := json.Marshal(in)
	b, _ := json.Marshal(out)
	if string(a) != string(b) {
		t.Fatalf("round trip:\n in %s\nout %s", a, b)
	}
	// Nil pointers and slices are null.
	_, row, err = EncodeRow(goodRow{ID: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(row, &m)
	for _, col := range []string{"note", "blob", "meta", "count"} {
		if v, ok := m[col]; !ok || v != nil {
			t.Fatalf("%s = %v, want null", col, v)
		}
	}
}

func TestEncodeRejectsUnencodable(t *testing.T) {
	type f struct {
		ID string  `tide:"id,pk"`
		X  float64 `tide:"x"`
	}
	type j struct {
		ID string          `tide:"id,pk"`
		M  json.RawMessage `tide:"m"`
	}
	nan := 0.0
	nan = nan / nan
	if _, _, err := EncodeRow(f{ID: "a", X: nan}); err == nil {
		t.Fatal("NaN encoded")
	}
	if _, _, err := EncodeRow(j{ID: "a", M: json.RawMessage("{")}); err == nil {
		t.Fatal("invalid raw JSON encoded")
	}
}

func TestKeyAndScopeText(t *testing.T) {
	type r struct {
		ID    uint64 `tide:"id,pk"`
		Org   int8   `tide:"org,scope"`
		Flag  bool   `tide:"flag,scope"`
		Title string `tide:"title"`
	}
	c, err := codecFor(typeOf[r]())
	if err != nil {
		t.Fatal(err)
	}
	key, scope, _, err := c.encode(valueOf(r{ID: 18446744073709551615, Org: -128, Flag: true}))
	if err != nil {
		t.Fatal(err)
	}
	if key != "18446744073709551615" || scope[0] != "-128" || scope[1] != "true" {
		t.Fatalf("key %q scope %q", key, scope)
	}
}

// FuzzDecodeRowFast: wherever the fast row decoder answers, it agrees with
// the encoding/json path.
func FuzzDecodeRowFast(f *testing.F) {
	for _, s := range []string{
		`{"id":"t1","project_id":"p7","owner":-3,"title":"hi","done":true,"score":1.5,"at":"2026-11-30T15:04:05.123456Z","note":"n","blob":"AAEC/w==","meta":{"a":[1,2]},"count":7}`,
		`{"id": "t2", "owner": 9223372036854775807, "note": null, "count": null, "extra": [1, {"x": "y"}]}`,
		`{"id":"t3","at":"2026-11-30T15:04:05+02:00","score":-1e-7,"meta":null}`,
		`{"id":"t\u00e9","owner":1.0}`, `{}`, `{"count":70000}`, `{"id":"a","id":"b"}`,
	} {
		f.Add([]byte(s))
	}
	c, err := codecFor(typeOf[goodRow]())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast goodRow
		if !c.decodeFast(data, valueOf(&fast).Elem()) {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, err)
		}
		var slow goodRow
		sv := valueOf(&slow).Elem()
		for _, fc := range c.fields {
			if raw, ok := obj[fc.col.Name]; ok {
				if err := json.Unmarshal(raw, sv.Field(fc.field).Addr().Interface()); err != nil {
					t.Fatalf("fast path accepted %q, encoding/json refuses column %s: %v", data, fc.col.Name, err)
				}
			}
		}
		a, _ := json.Marshal(fast)
		b, _ := json.Marshal(slow)
		if string(a) != string(b) || !fast.At.Equal(slow.At) {
			t.Fatalf("%q:\nfast %s\nslow %s", data, a, b)
		}
	})
}
