package core

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

func condSchema() *feed.Schema {
	return &feed.Schema{
		Name: "todos", Table: "todos",
		Columns: []protocol.Column{
			{Name: "id", Kind: protocol.KindString},
			{Name: "project_id", Kind: protocol.KindString},
			{Name: "owner", Kind: protocol.KindInt},
			{Name: "done", Kind: protocol.KindBool},
			{Name: "n", Kind: protocol.KindUint},
			{Name: "title", Kind: protocol.KindString},
		},
		Keys:  []int{0},
		Scope: []int{1, 2, 3, 4},
	}
}

func TestParseConditions(t *testing.T) {
	s := condSchema()
	tests := []struct {
		name string
		in   string
		key  string // normalized scope key; "" when an error is expected
		code protocol.Code
	}{
		{"none", `{}`, "todos", ""},
		{"string eq", `{"project_id":"p7"}`, "todos?project_id=p7", ""},
		{"int eq", `{"owner":42}`, "todos?owner=42", ""},
		{"int as string", `{"owner":"-9007199254740993"}`, "todos?owner=-9007199254740993", ""},
		{"bool", `{"done":false}`, "todos?done=false", ""},
		{"uint", `{"n":18446744073709551615}`, "todos?n=18446744073709551615", ""},
		{"in sorted deduped", `{"project_id":{"in":["b","a","b"]}}`, "todos?project_id=a,b", ""},
		{"two conditions in column order", `{"done":true,"project_id":"p"}`, "todos?project_id=p&done=true", ""},
		{"escaping", `{"project_id":"a&b=c,d"}`, "todos?project_id=a%26b%3Dc%2Cd", ""},
		{"unknown column", `{"nope":"x"}`, "", protocol.CodeInvalidConditions},
		{"non-scope column", `{"title":"x"}`, "", protocol.CodeInvalidConditions},
		{"pk is not scope", `{"id":"x"}`, "", protocol.CodeInvalidConditions},
		{"string for int", `{"owner":"abc"}`, "", protocol.CodeInvalidConditions},
		{"number for string", `{"project_id":7}`, "", protocol.CodeInvalidConditions},
		{"fraction", `{"owner":1.5}`, "", protocol.CodeInvalidConditions},
		{"exponent", `{"owner":1e3}`, "", protocol.CodeInvalidConditions},
		{"leading zero", `{"owner":"007"}`, "", protocol.CodeInvalidConditions},
		{"int overflow", `{"owner":9223372036854775808}`, "", protocol.CodeInvalidConditions},
		{"negative uint", `{"n":-1}`, "", protocol.CodeInvalidConditions},
		{"bool as string", `{"done":"true"}`, "", protocol.CodeInvalidConditions},
		{"null", `{"project_id":null}`, "", protocol.CodeInvalidConditions},
		{"empty in", `{"project_id":{"in":[]}}`, "", protocol.CodeInvalidConditions},
		{"in with other key", `{"project_id":{"in":["a"],"x":1}}`, "", protocol.CodeInvalidConditions},
		{"object without in", `{"project_id":{"eq":"a"}}`, "", protocol.CodeInvalidConditions},
		{"in wrong type", `{"project_id":{"in":[1]}}`, "", protocol.CodeInvalidConditions},
		{"array value", `{"project_id":["a"]}`, "", protocol.CodeInvalidConditions},
		{"too many conditions", `{"project_id":"a","owner":1,"done":true}`, "", protocol.CodeTooManyConditions},
		{"too many values", `{"project_id":{"in":["a","b","c","d","e"]}}`, "", protocol.CodeTooManyConditions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var conds map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tt.in), &conds); err != nil {
				t.Fatal(err)
			}
			sc, err := parseConditions(s, conds, 2, 4)
			if tt.code != "" {
				if err == nil || err.Code != tt.code {
					t.Fatalf("got %v, want code %s", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected %v", err)
			}
			if sc.Key() != tt.key {
				t.Fatalf("key %q, want %q", sc.Key(), tt.key)
			}
		})
	}
}

func TestScopeMatch(t *testing.T) {
	s := condSchema()
	sc, err := parseConditions(s, map[string]json.RawMessage{
		"project_id": json.RawMessage(`{"in":["p1","p2"]}`),
		"done":       json.RawMessage(`false`),
	}, 8, 16)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		scope []string
		want  bool
	}{
		{[]string{"p1", "1", "false", "0"}, true},
		{[]string{"p2", "9", "false", "0"}, true},
		{[]string{"p3", "1", "false", "0"}, false},
		{[]string{"p1", "1", "true", "0"}, false},
		{[]string{"p1"}, false},
	} {
		if got := sc.Match(tt.scope); got != tt.want {
			t.Errorf("Match(%v) = %v", tt.scope, got)
		}
	}
	if got := conditionsMap(sc); !reflect.DeepEqual(got, map[string][]string{"project_id": {"p1", "p2"}, "done": {"false"}}) {
		t.Fatalf("conditionsMap = %v", got)
	}
}

func FuzzConditions(f *testing.F) {
	for _, s := range []string{
		`{"project_id":"p7"}`, `{"owner":{"in":[1,"2",-3]}}`, `{"done":true,"n":"18446744073709551615"}`,
		`{"project_id":{"in":[]}}`, `{"x":1}`, `{"owner":01}`,
	} {
		f.Add([]byte(s))
	}
	s := condSchema()
	f.Fuzz(func(t *testing.T, data []byte) {
		var conds map[string]json.RawMessage
		if json.Unmarshal(data, &conds) != nil {
			return
		}
		sc, err := parseConditions(s, conds, 8, 64)
		if err != nil {
			if err.Code != protocol.CodeInvalidConditions && err.Code != protocol.CodeTooManyConditions {
				t.Fatalf("unexpected code %s", err.Code)
			}
			return
		}
		// Accepted conditions are normalized: re-parsing the canonical values
		// gives the same scope.
		again := map[string]json.RawMessage{}
		for _, c := range sc.Conds {
			col := s.ScopeColumn(c.Col)
			var vals []json.RawMessage
			for _, v := range c.Values {
				if col.Kind == protocol.KindString {
					b, _ := json.Marshal(v)
					vals = append(vals, b)
				} else {
					vals = append(vals, json.RawMessage(v))
				}
			}
			b, _ := json.Marshal(map[string]any{"in": vals})
			again[col.Name] = b
		}
		sc2, err := parseConditions(s, again, 8, 64)
		if err != nil || sc2.Key() != sc.Key() {
			t.Fatalf("normalized %s re-parsed to %v / %v", sc.Key(), sc2.Key(), err)
		}
	})
}
