package client

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestScopeDigestNormalizes(t *testing.T) {
	same := []struct {
		name string
		a, b Scope
	}{
		{"in-list order and duplicates",
			Scope{Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": []string{"b", "a", "a"}}}},
			Scope{Resource: "todos", Conditions: map[string]any{"p": map[string][]any{"in": {"a", "b"}}}}},
		{"one-value in-list is equality",
			Scope{Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": []string{"p7"}}}},
			Scope{Resource: "todos", Conditions: map[string]any{"p": "p7"}}},
		{"integer representations",
			Scope{Resource: "todos", Conditions: map[string]any{"n": 7}},
			Scope{Resource: "todos", Conditions: map[string]any{"n": json.Number("7")}}},
		{"integral float",
			Scope{Resource: "todos", Conditions: map[string]any{"n": int64(7)}},
			Scope{Resource: "todos", Conditions: map[string]any{"n": float64(7)}}},
		{"nil and empty conditions",
			Scope{Resource: "todos", Conditions: nil},
			Scope{Resource: "todos", Conditions: map[string]any{}}},
		{"several columns",
			Scope{Resource: "todos", Conditions: map[string]any{"a": "x", "b": true}},
			Scope{Resource: "todos", Conditions: map[string]any{"b": true, "a": "x"}}},
	}
	for _, tt := range same {
		da, err := tt.a.Digest()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		db, err := tt.b.Digest()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if da != db {
			t.Errorf("%s: digests differ: %s vs %s", tt.name, tt.a, tt.b)
		}
	}

	distinct := []Scope{
		{Resource: "todos", Conditions: nil},
		{Resource: "notes", Conditions: nil},
		{Resource: "todos", Conditions: map[string]any{"p": "p7"}},
		{Resource: "todos", Conditions: map[string]any{"p": "p8"}},
		{Resource: "todos", Conditions: map[string]any{"p": 7}},
		{Resource: "todos", Conditions: map[string]any{"p": "7"}},
		{Resource: "todos", Conditions: map[string]any{"q": "p7"}},
		{Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": []string{"p7", "p8"}}}},
		{Resource: "todos", Conditions: map[string]any{"p": "p7", "done": false}},
		{Resources: []string{"todos", "notes"}, Conditions: map[string]any{"p": "p7"}},
		{Resources: []string{"todos", "notes", "files"}, Conditions: map[string]any{"p": "p7"}},
	}
	seen := map[string]Scope{}
	for _, s := range distinct {
		d, err := s.Digest()
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if prev, dup := seen[d]; dup {
			t.Errorf("%s and %s share a digest", prev, s)
		}
		seen[d] = s
	}
}

func TestScopeInvalid(t *testing.T) {
	bad := map[string]Scope{
		"empty resource":        {Resource: "", Conditions: nil},
		"control character":     {Resource: "to\ndos", Conditions: nil},
		"null value":            {Resource: "todos", Conditions: map[string]any{"p": nil}},
		"fractional number":     {Resource: "todos", Conditions: map[string]any{"p": 7.5}},
		"empty in":              {Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": []string{}}}},
		"in with another key":   {Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": []string{"a"}, "x": 1}}},
		"unknown operator":      {Resource: "todos", Conditions: map[string]any{"p": map[string]any{"eq": 1}}},
		"bare list":             {Resource: "todos", Conditions: map[string]any{"p": []string{"a"}}},
		"nested list in in":     {Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": [][]string{{"a"}}}}},
		"empty column":          {Resource: "todos", Conditions: map[string]any{"": "a"}},
		"unmarshalable value":   {Resource: "todos", Conditions: map[string]any{"p": make(chan int)}},
		"object inside in-list": {Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": []any{map[string]any{}}}}},
	}
	for name, s := range bad {
		if _, err := s.Digest(); !errors.Is(err, ErrInvalidScope) {
			t.Errorf("%s: Digest error = %v, want ErrInvalidScope", name, err)
		}
	}
}

func TestScopeWireConditions(t *testing.T) {
	n, err := Scope{Resource: "todos", Conditions: map[string]any{
		"project_id": map[string]any{"in": []any{"p8", "p7", "p8"}},
		"done":       false,
		"n":          uint64(1 << 63),
	}}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"done":false,"n":9223372036854775808,"project_id":{"in":["p7","p8"]}}`
	if string(n.condJSON) != want {
		t.Errorf("conditions = %s, want %s", n.condJSON, want)
	}
}
