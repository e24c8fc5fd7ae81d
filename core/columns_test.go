package core

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
)

// memberRow is a row of the tests of column trimming.
type memberRow struct {
	ID    string          `tide:"id,pk"`
	Email string          `tide:"email"`
	Note  string          `tide:"note"`
	Meta  json.RawMessage `tide:"meta"`
}

// TestTrimmedRows: a row loses exactly the members of the columns hidden,
// whatever its spacing (the Postgres feed's rows are jsonb text), nested
// keys of the same name, or escaped keys; a row that is not an object
// cannot be trimmed and is sent as a delete.
func TestTrimmedRows(t *testing.T) {
	e := newTestEngine(t)
	tbl, err := Register(e, Resource[memberRow]{Table: "members", Authorize: authz.Allow,
		ColumnPolicies: map[string]authz.ColumnPolicy[memberRow]{
			"email": func(authz.Principal, *memberRow) bool { return false },
			"meta":  func(authz.Principal, *memberRow) bool { return true },
		}})
	if err != nil {
		t.Fatal(err)
	}
	cp := tbl.res.cols
	for _, tc := range []struct{ row, want string }{
		{`{"id":"a","email":"x@y","note":"n","meta":{}}`, `{"id":"a","note":"n","meta":{}}`},
		{`{"email": "x@y", "id": "a"}`, `{"id": "a"}`},
		{` { "id" : "a" , "email" : "x@y" } `, `{"id" : "a"}`},
		{`{"id":"a","meta":{"email":"kept, nested","list":[{"email":1}]},"email":"x"}`, `{"id":"a","meta":{"email":"kept, nested","list":[{"email":1}]}}`},
		{`{"id":"a","em\u0061il":"x@y"}`, `{"id":"a"}`},
		{`{"email":"x\"}","note":"n"}`, `{"note":"n"}`},
		{`{"email":"x"}`, `{}`},
		{`{}`, `{}`},
		{`{"email":"x",}`, ``},
		{`["email","x"]`, ``},
		{`{"email":"x"`, ``},
		{`{"email":"x"}{}`, ``},
	} {
		c := &feed.Change{Op: feed.OpUpsert, Key: "a", Row: json.RawMessage(tc.row)}
		var eb entryBytes
		got := string(eb.trimmed(c, "", 1, cp))
		var want string
		if tc.want == "" {
			want = `{"op":"delete","key":"a"}`
		} else {
			want = `{"op":"upsert","key":"a","row":` + tc.want + `}`
		}
		if got != want {
			t.Errorf("%s: got %s, want %s", tc.row, got, want)
		}
		if again := eb.trimmed(c, "", 1, cp); tc.want != "" && !sameBytes(again, eb.trims[0].entry) {
			t.Errorf("%s: a second subscriber hiding the same columns got another encoding", tc.row)
		}
	}
}

// FuzzSplitObject: splitObject never panics; a JSON object splits, and
// its members rebuild the same object.
func FuzzSplitObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a": "x\"y", "b": [1, {"c": null}], "d": true}`, `{"a\u0062":-1.5e3}`, `[]`, `{"a":}`, `{"a":1,}`, ` {"a" : {"b" : "}"} } `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, ok := splitObject(b)
		var obj map[string]any
		valid := json.Unmarshal(b, &obj) == nil && obj != nil
		if valid && !ok {
			t.Fatalf("the object %q did not split", b)
		}
		if !ok {
			return
		}
		parts := make([]string, len(ms))
		for i, m := range ms {
			if m.start > m.val || m.val > m.end || m.end > len(b) {
				t.Fatalf("member %d of %q out of place: %+v", i, b, m)
			}
			parts[i] = string(b[m.start:m.end])
			if _, has := obj[string(m.name)]; valid && utf8.Valid(m.name) && !has {
				t.Fatalf("member %q of %q is not a key of the object", m.name, b)
			}
		}
		if !valid {
			return
		}
		var again map[string]any
		rebuilt := "{" + strings.Join(parts, ",") + "}"
		if err := json.Unmarshal([]byte(rebuilt), &again); err != nil || !reflect.DeepEqual(again, obj) {
			t.Fatalf("%q rebuilt as %q (%v)", b, rebuilt, err)
		}
	})
}
