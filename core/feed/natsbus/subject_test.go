package natsbus

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

func TestToken(t *testing.T) {
	long := strings.Repeat("x", maxTokenLen+1)
	for _, tc := range []struct{ in, want string }{
		{"p7", "p7"},
		{"", "%"},
		{"acme.com", "acme%2Ecom"},
		{"a b", "a%20b"},
		{"*", "%2A"},
		{">", "%3E"},
		{"%", "%25"},
		{"#", "%23"},
		{"é", "%C3%A9"},
		{"snake_case-id", "snake_case-id"},
		{"3f2504e0-4f89-11d3-9a0c-0305e82c3301", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"},
		{"tab\there", "tab%09here"},
		{"nul\x00", "nul%00"},
		{strings.Repeat("x", maxTokenLen), strings.Repeat("x", maxTokenLen)},
	} {
		got := token(tc.in)
		if got != tc.want {
			t.Errorf("token(%q) = %q, want %q", tc.in, got, tc.want)
		}
		checkToken(t, tc.in, got)
	}
	checkToken(t, long, token(long))
	if got := token(long); len(got) != 33 || got[0] != '#' {
		t.Errorf("token of a %d-byte value = %q, want '#' and 32 hex digits", len(long), got)
	}
	if token(long) == token(long+"y") {
		t.Error("two long values hash to one token")
	}
	for _, bad := range []string{"", "a.b", "a%2", "a%2e", "a%41", "%%", "a b", "é"} {
		if v, err := parseToken(bad); err == nil {
			t.Errorf("parseToken(%q) = %q, want an error", bad, v)
		}
	}
	if _, err := parseToken(token(long)); !errors.Is(err, errHashedToken) {
		t.Errorf("parseToken(hashed) err = %v, want errHashedToken", err)
	}
}

func TestSubject(t *testing.T) {
	if got, want := subject("tide", "todos", "p7"), "tide.change.todos.p7"; got != want {
		t.Errorf("subject = %q, want %q", got, want)
	}
	if got, want := subject("app.tide", "todos", "a.b"), "app.tide.change.todos.a%2Eb"; got != want {
		t.Errorf("subject = %q, want %q", got, want)
	}
	if got, want := resourceSubject("tide", "todos"), "tide.change.todos.*"; got != want {
		t.Errorf("resourceSubject = %q, want %q", got, want)
	}
	for _, p := range []string{"tide", "app.tide", "a-b_c.d"} {
		if err := validPrefix(p); err != nil {
			t.Errorf("validPrefix(%q): %v", p, err)
		}
	}
	for _, p := range []string{"", "a..b", ".a", "a.", "a*", "a>", "a b", strings.Repeat("a", 65)} {
		if err := validPrefix(p); err == nil {
			t.Errorf("validPrefix(%q) accepted", p)
		}
	}
	if got := defaultStream("app.tide"); got != "APP_TIDE_CHANGES" {
		t.Errorf("defaultStream = %q", got)
	}
}

// TestSubjectTenants: tenants are escaped into one subject token each (the
// examples of the package doc).
func TestSubjectTenants(t *testing.T) {
	for _, tc := range []struct{ tenant, want string }{
		{"p7", "tide.change.todos.p7"},
		{"acme.com", "tide.change.todos.acme%2Ecom"},
		{"", "tide.change.todos.%"},
	} {
		if got := subject("tide", "todos", tc.tenant); got != tc.want {
			t.Errorf("subject(%q) = %q, want %q", tc.tenant, got, tc.want)
		}
	}
}

// checkToken asserts that tok is one valid NATS subject token and that it
// decodes back to in (unless hashed).
func checkToken(t *testing.T, in, tok string) {
	t.Helper()
	if tok == "" || len(tok) > maxTokenLen {
		t.Fatalf("token(%q) = %q: empty or longer than %d", in, tok, maxTokenLen)
	}
	for _, r := range tok {
		if r > unicode.MaxASCII || r <= ' ' || r == '.' || r == '*' || r == '>' || r == 0x7f {
			t.Fatalf("token(%q) = %q holds %q, invalid in a NATS subject token", in, tok, r)
		}
	}
	back, err := parseToken(tok)
	if errors.Is(err, errHashedToken) {
		if len(in) <= maxTokenLen/3 {
			t.Fatalf("token(%q) hashed a short value", in)
		}
		return
	}
	if err != nil || back != in {
		t.Fatalf("parseToken(token(%q)) = %q, %v", in, back, err)
	}
}

func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "p7", "acme.com", "a b", "*", ">", "%", "#", "é", "\x00", strings.Repeat("é", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkToken(t, s, token(s))
		// Distinct values that are not hashed get distinct tokens: the
		// mapping is its own inverse on them.
		if v, err := parseToken(s); err == nil && token(v) != s {
			t.Fatalf("token(parseToken(%q)) = %q", s, token(v))
		}
	})
}
