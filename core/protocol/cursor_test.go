package protocol

import (
	"strings"
	"testing"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []Cursor{
		{Epoch: "abc", Pos: 0},
		{Epoch: "A-b_9", Pos: 18446744073709551615},
		{Epoch: "e", Pos: 42, Snapshot: true, Seq: 1, Sealed: "\x00"},
		{Epoch: "e", Pos: 42, Snapshot: true, Seq: 18446744073709551615, Sealed: "sealed/with.dots and ünïcode\x00"},
	} {
		s := c.String()
		got, err := ParseCursor(s)
		if err != nil {
			t.Fatalf("ParseCursor(%q): %v", s, err)
		}
		if got != c {
			t.Fatalf("round trip of %+v gave %+v via %q", c, got, s)
		}
	}
}

func TestParseCursorRejects(t *testing.T) {
	for _, s := range []string{
		"", "1", "1.", "1.e", "1.e.", "1.e.x", "1.e.-1", "1.e.01", "2.e.1", "1s.e.1", "1s.e.1.***",
		// Snapshot cursors of protocol 1 carried a key in the clear: no longer accepted.
		"1s.e.1.a2V5", "1s.e.1.",
		"2s.e.1.1", "2s.e.1.1.", "2s.e.1.0.AA", "2s.e.1.01.AA", "2s.e.1.x.AA", "2s.e.1.1.***", "2s.e.1.1.AA=",
		"2s.e.01.1.AA", "2s..1.1.AA", "2s.e.1.1.AA.x", "2.e.1.1.AA",
		"1..1", "1.e!.1", "1.e.1.extra", "1.e.18446744073709551616", "1.e.1 ", " 1.e.1",
	} {
		if c, err := ParseCursor(s); err == nil {
			t.Errorf("ParseCursor(%q) = %+v, want an error", s, c)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"1.abc.0", "1.abc.42", "2s.abc.42.1.a2V5", "2s.abc.42.7.AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxw", "1s.abc.42.a2V5", "1s.e.1.", "2.x.1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to itself: cursors have one spelling.
		if c.String() != s {
			t.Fatalf("ParseCursor(%q) = %+v, which encodes as %q", s, c, c.String())
		}
	})
}

// FuzzValidEpoch: ValidEpoch accepts exactly 1 to 64 ASCII letters, digits,
// '-' and '_', and never panics.
func FuzzValidEpoch(f *testing.F) {
	for _, s := range []string{"", "abcdefghijklmnop", "A-b_9", "abcdefgh.jklmnop", "abcdefghijklmnó", "\x00bc", strings.Repeat("a", 64), strings.Repeat("a", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := len(s) >= 1 && len(s) <= 64
		for _, r := range []byte(s) {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_') {
				want = false
			}
		}
		if got := ValidEpoch(s); got != want {
			t.Fatalf("ValidEpoch(%q) = %v, want %v", s, got, want)
		}
	})
}
