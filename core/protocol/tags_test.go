package protocol

import (
	"strings"
	"testing"

	"github.com/tidesync/tide/internal/text"
)

func TestParseTag(t *testing.T) {
	tests := []struct {
		tag     string
		want    tagSpec
		wantErr string
	}{
		{tag: "id,pk", want: tagSpec{Column: "id", PK: true}},
		{tag: "project_id,scope", want: tagSpec{Column: "project_id", Scope: true}},
		{tag: "id,pk,scope", want: tagSpec{Column: "id", PK: true, Scope: true}},
		{tag: "title", want: tagSpec{Column: "title"}},
		{tag: "-", want: tagSpec{Skip: true}},
		{tag: "a1_b", want: tagSpec{Column: "a1_b"}},
		{tag: "", wantErr: "empty column name"},
		{tag: ",pk", wantErr: "empty column name"},
		{tag: "id,primary", wantErr: `unknown tag option "primary"`},
		{tag: "id,pk,pk", wantErr: "repeated"},
		{tag: "id,", wantErr: `unknown tag option ""`},
		{tag: "ID", wantErr: "lower-case"},
		{tag: "1abc", wantErr: "not starting with a digit"},
		{tag: "a-b", wantErr: "lower-case"},
		{tag: `a"b`, wantErr: "lower-case"},
		{tag: strings.Repeat("a", 64), wantErr: "longer than 63"},
		{tag: "-,pk", wantErr: "lower-case"},
	}
	for _, tt := range tests {
		t.Run(tt.tag, func(t *testing.T) {
			got, err := parseTag(tt.tag)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseTag(%q) error = %v, want it to contain %q", tt.tag, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseTag(%q): %v", tt.tag, err)
			}
			if got != tt.want {
				t.Fatalf("parseTag(%q) = %+v, want %+v", tt.tag, got, tt.want)
			}
		})
	}
}

func FuzzParseTag(f *testing.F) {
	for _, s := range []string{"id,pk", "project_id,scope", "-", "", ",", "a,pk,scope", "x,unknown", "é,pk"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		spec, err := parseTag(tag)
		if err != nil {
			return
		}
		if spec.Skip {
			if tag != "-" {
				t.Fatalf("%q parsed as skip", tag)
			}
			return
		}
		// An accepted column name is a safe identifier.
		if text.ValidIdent(spec.Column) != nil {
			t.Fatalf("%q accepted with column %q", tag, spec.Column)
		}
		if !strings.HasPrefix(tag, spec.Column) {
			t.Fatalf("%q: column %q is not its first part", tag, spec.Column)
		}
	})
}
