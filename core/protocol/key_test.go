package protocol

import (
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEncodeKey(t *testing.T) {
	for _, tc := range []struct {
		parts []string
		want  string
	}{
		{[]string{"t1"}, "t1"},
		{[]string{""}, ""},
		{[]string{`["a","b"]`}, `["a","b"]`}, // one part: as it is
		{[]string{"u1", "b7"}, `["u1","b7"]`},
		{[]string{"a:b", "c"}, `["a:b","c"]`},
		{[]string{"a", "b:c"}, `["a","b:c"]`},
		{[]string{"a,b", "c"}, `["a,b","c"]`},
		{[]string{"a", "b", "c"}, `["a","b","c"]`},
		{[]string{"", ""}, `["",""]`},
		{[]string{`"`, `\`}, `["\"","\\"]`},
		{[]string{"\b\t\n\f\r", "\x00\x01\x1f\x7f"}, `["\b\t\n\f\r","\u0000\u0001\u001f` + "\x7f" + `"]`},
		{[]string{"ünï/<>&\u2028", "42"}, "[\"ünï/<>&\u2028\",\"42\"]"},
	} {
		got := EncodeKey(tc.parts...)
		if got != tc.want {
			t.Errorf("EncodeKey(%q) = %q, want %q", tc.parts, got, tc.want)
		}
		back, err := DecodeKey(got, len(tc.parts))
		if err != nil || !slices.Equal(back, tc.parts) {
			t.Errorf("DecodeKey(%q, %d) = %q, %v", got, len(tc.parts), back, err)
		}
	}
}

func TestDecodeKeyRejects(t *testing.T) {
	for _, tc := range []struct {
		s string
		n int
	}{
		{"x", 0},
		{"", 2}, {"[]", 2}, {`["a"]`, 2}, {`["a","b","c"]`, 2}, {`["a","b"]`, 3},
		{`["a", "b"]`, 2}, {` ["a","b"]`, 2}, {`["a","b"] `, 2}, {`["a","b"],`, 2}, {`["a","b"]]`, 2},
		{`["a",b]`, 2}, {`["a",1]`, 2}, {`["a",null]`, 2}, {`["a","b"`, 2}, {`["a","b]`, 2},
		{`["\/","b"]`, 2}, {`["\u0041","b"]`, 2}, {`["\u000A","b"]`, 2}, {`["\u000a","b"]`, 2},
		{`["\u001F","b"]`, 2}, {`["\u00e9","b"]`, 2}, {`["\x","b"]`, 2}, {`["\u00","b"]`, 2},
		{"[\"\n\",\"b\"]", 2}, {`["a\","b"]`, 2}, {`["a"]["b"]`, 2}, {`[["a"],"b"]`, 2},
	} {
		if parts, err := DecodeKey(tc.s, tc.n); !errors.Is(err, ErrBadKey) {
			t.Errorf("DecodeKey(%q, %d) = %q, %v; want ErrBadKey", tc.s, tc.n, parts, err)
		}
	}
}

func TestKeyPartText(t *testing.T) {
	for v, want := range map[any]string{"x": "x", true: "true", false: "false", -7: "-7", int64(-1 << 63): "-9223372036854775808",
		uint64(1<<64 - 1): "18446744073709551615", int8(-3): "-3", uint16(9): "9", int32(5): "5", uint(1): "1", uint8(2): "2", int16(-2): "-2", uint32(3): "3"} {
		if got, ok := KeyPartText(v); !ok || got != want {
			t.Errorf("KeyPartText(%#v) = %q, %v; want %q", v, got, ok, want)
		}
	}
	for _, v := range []any{nil, 1.5, []byte("x"), struct{}{}} {
		if _, ok := KeyPartText(v); ok {
			t.Errorf("KeyPartText(%#v) is ok", v)
		}
	}
}

// FuzzKeyRoundTrip: every tuple of parts has one key text, which decodes
// back to the tuple (and, for valid UTF-8, is the JSON array of the parts);
// a text that decodes is the encoding of what it decodes to, so decoding
// refuses every other spelling.
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("u1", "b7", "", uint8(2), `["u1","b7"]`)
	f.Add("a:b", "c", "d", uint8(3), `["a","b:c"]`)
	f.Add("\"\\", "\x00\x1f", "ü", uint8(2), `["\u001f","\\"]`)
	f.Add("", "", "", uint8(1), `["a", "b"]`)
	f.Add("x", "y", "z", uint8(2), `["\u00e9","b"]`)
	f.Fuzz(func(t *testing.T, a, b, c string, n uint8, text string) {
		parts := []string{a, b, c}[:1+int(n)%3]
		s := EncodeKey(parts...)
		back, err := DecodeKey(s, len(parts))
		if err != nil || !slices.Equal(back, parts) {
			t.Fatalf("DecodeKey(EncodeKey(%q)) = %q, %v (text %q)", parts, back, err, s)
		}
		if len(parts) > 1 && !slices.ContainsFunc(parts, func(p string) bool { return !utf8.ValidString(p) }) {
			var std []string
			if err := json.Unmarshal([]byte(s), &std); err != nil || !slices.Equal(std, parts) {
				t.Fatalf("EncodeKey(%q) = %q is not their JSON array: %q, %v", parts, s, std, err)
			}
		}
		for k := 1; k <= 3; k++ {
			got, err := DecodeKey(text, k)
			if err != nil {
				if !errors.Is(err, ErrBadKey) {
					t.Fatalf("DecodeKey(%q, %d): %v does not wrap ErrBadKey", text, k, err)
				}
				continue
			}
			if len(got) != k || EncodeKey(got...) != text {
				t.Fatalf("DecodeKey(%q, %d) = %q, which encodes as %q", text, k, got, EncodeKey(got...))
			}
		}
	})
}

// TestKeyDocTable: the examples of docs/protocol.md's "Row keys" table are
// what EncodeKey writes.
func TestKeyDocTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### Row keys\n")
	if !ok {
		t.Fatal(`docs/protocol.md has no "### Row keys" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	code := regexp.MustCompile("`([^`]*)`")
	n := 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) != 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		var parts []string
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			parts = append(parts, m[1])
		}
		want := code.FindStringSubmatch(cells[2])
		if want == nil || len(parts) == 0 {
			t.Fatalf("unreadable row %q", line)
		}
		if got := EncodeKey(parts...); got != want[1] {
			t.Errorf("docs/protocol.md: EncodeKey(%q) = %s, the table says %s", parts, got, want[1])
		}
		n++
	}
	if n < 5 {
		t.Fatalf("read %d rows of the table, want 5", n)
	}
}
