package jsontext

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDescribeError(t *testing.T) {
	type inner struct {
		X bool `json:"x"`
	}
	type args struct {
		ID    string            `json:"id"`
		N     int8              `json:"n"`
		F     float32           `json:"f"`
		Tags  []string          `json:"tags"`
		Sub   inner             `json:"sub"`
		Items []inner           `json:"items"`
		M     map[string]string `json:"m"`
		B     []byte            `json:"b"`
		P     *int              `json:"p"`
		A     [2]int            `json:"a"`
		Any   any               `json:"any"`
	}
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{`{"id":5}`, "id must be a string", true},
		{`{"id":{}}`, "id must be a string", true},
		{`{"n":"5"}`, "n must be a number", true},
		{`{"n":300}`, "n is out of range", true},
		{`{"n":1.5}`, "n must be a whole number", true},
		{`{"f":1e300}`, "f is out of range", true},
		{`{"tags":"x"}`, "tags must be an array", true},
		{`{"tags":[1]}`, "tags must be a string", true},
		{`{"sub":{"x":"y"}}`, "sub.x must be a boolean", true},
		{`{"sub":[]}`, "sub must be an object", true},
		{`{"items":[{"x":1}]}`, "items.x must be a boolean", true},
		{`{"m":{"k":1}}`, "m must be a string", true},
		{`{"m":7}`, "m must be an object", true},
		{`{"b":5}`, "b must be a string", true},
		{`{"p":"x"}`, "p must be a number", true},
		{`{"a":{}}`, "a must be an array", true},
		{`[1]`, "the arguments must be an object", true},
		{`{"id":`, "the arguments must be valid JSON", true},
		{`{"b":"!!"}`, "", false}, // base64's own error
	} {
		var a args
		err := json.Unmarshal([]byte(tt.in), &a)
		if err == nil {
			t.Fatalf("%s decoded", tt.in)
		}
		got, ok := DescribeError(err, "the arguments")
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s (%v): %q, %v; want %q, %v", tt.in, err, got, ok, tt.want, tt.ok)
		}
		if strings.Contains(got, "Go") || strings.Contains(got, "int8") || strings.Contains(got, "args") {
			t.Errorf("%s: %q names Go types", tt.in, got)
		}
	}
}
