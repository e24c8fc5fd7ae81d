package protocol

import (
	"math/rand/v2"
	"testing"

	"github.com/tidesync/tide/internal/jsontext"
)

// plainBytesNaive is plainBytes one byte at a time.
func plainBytesNaive(s []byte) (plain, ascii bool) {
	ascii = true
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' {
			return false, false
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	return true, ascii
}

// checkPlain compares plainBytes and EscapeIndex with their byte loops.
func checkPlain(t *testing.T, s []byte) {
	t.Helper()
	gp, ga := plainBytes(s)
	wp, wa := plainBytesNaive(s)
	if gp != wp || ga != wa {
		t.Fatalf("plainBytes(%q) = %v, %v; the byte loop says %v, %v", s, gp, ga, wp, wa)
	}
	g, ga := jsontext.EscapeIndex(s)
	if w := escapeIndexNaive(s); g != w {
		t.Fatalf("jsontext.EscapeIndex(%q) = %d; the byte loop says %d", s, g, w)
	}
	if _, wa := plainBytesNaive(s[:g]); ga != wa {
		t.Fatalf("jsontext.EscapeIndex(%q) says ASCII %v before %d; the byte loop says %v", s, ga, g, wa)
	}
}

// escapeIndexNaive is EscapeIndex one byte at a time.
func escapeIndexNaive(s []byte) int {
	for i, c := range s {
		if c < 0x20 || c == '"' || c == '\\' {
			return i
		}
	}
	return len(s)
}

func TestPlainBytes(t *testing.T) {
	for _, tc := range []struct {
		in           string
		plain, ascii bool
	}{
		{"", true, true},
		{"abc", true, true},
		{"exactly8", true, true},
		{"lorem ipsum dolor sit amet lorem ipsum dolor sit amet", true, true},
		{"tab\there", false, false},
		{"12345678\x1f", false, false},
		{"1234567\x00", false, false},
		{"back\\slash", false, false},
		{"1234567\\", false, false},
		{"\\", false, false},
		{" !#$%&'()", true, true}, // 0x20 and up are plain
		{"1234567\"", false, false},
		{"\x80\x80\x80\x80\x80\x80\x80\"", false, false},
		{"caf\xc3\xa9 au lait", true, false},
		{"\x80\x80\x80\x80\x80\x80\x80\x80", true, false},
		{"\xff\xff\xff\xff\xff\xff\xff\xff\x1f", false, false},
		{"\x9c\x9c\x9c\x9c\x9c\x9c\x9c\x9c", true, false}, // '\\'|0x80 is not '\\'
		{"\xa0\xa0\xa0\xa0\xa0\xa0\xa0\xa0", true, false}, // 0x20|0x80 is not below 0x20
		{"\x1f\x80\x80\x80\x80\x80\x80\x80", false, false},
		{"\x80\x80\x80\x80\x80\x80\x80\x1f", false, false},
	} {
		plain, ascii := plainBytes([]byte(tc.in))
		if plain != tc.plain || ascii != tc.ascii {
			t.Errorf("plainBytes(%q) = %v, %v; want %v, %v", tc.in, plain, ascii, tc.plain, tc.ascii)
		}
	}
}

// TestPlainBytesRandom checks plainBytes against the byte-at-a-time loop
// on random strings drawn mostly from the bytes near its lane tests'
// edges.
func TestPlainBytesRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	edges := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"', '"' + 1, 0xa2, '\\' - 1, '\\', '\\' + 1, 0x7f, 0x80, 0x81, 0x9c, 0x9f, 0xa0, 0xdc, 0xff, 'a', 'z'}
	for range 200_000 {
		n := r.IntN(40)
		s := make([]byte, n)
		for i := range s {
			if r.IntN(4) == 0 {
				s[i] = edges[r.IntN(len(edges))]
			} else {
				s[i] = byte(0x20 + r.IntN(0x5f))
				if s[i] == '\\' || s[i] == '"' {
					s[i] = 'x'
				}
			}
		}
		checkPlain(t, s)
	}
}

func FuzzPlainBytes(f *testing.F) {
	for _, s := range []string{"", "abc", "1234567\\", "\x80\x80\x80\x80\x80\x80\x80\x1f", "caf\xc3\xa9 au lait"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		checkPlain(t, s)
	})
}

func BenchmarkPlainBytes(b *testing.B) {
	s := []byte("lorem ipsum dolor sit amet lorem ipsum dolor sit amet lorem ipsum")[:64]
	b.SetBytes(int64(len(s)))
	for _, name := range []string{"words", "bytes"} {
		b.Run(name, func(b *testing.B) {
			f := plainBytes
			if name == "bytes" {
				f = plainBytesNaive
			}
			for b.Loop() {
				if p, _ := f(s); !p {
					b.Fatal("not plain")
				}
			}
		})
	}
}
