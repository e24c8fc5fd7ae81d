package text

import (
	"strings"
	"testing"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestValidIdent(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"todos", true},
		{"project_id", true},
		{"_x1", true},
		{"a" + strings.Repeat("b", MaxIdentLen-1), true},
		{"", false},
		{"a" + strings.Repeat("b", MaxIdentLen), false},
		{"1abc", false},
		{"Todos", false},
		{"to-dos", false},
		{"todos;drop", false},
		{"é", false},
	} {
		if err := ValidIdent(tc.in); (err == nil) != tc.ok {
			t.Errorf("ValidIdent(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}
