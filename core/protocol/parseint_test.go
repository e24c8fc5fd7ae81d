package protocol

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// checkParseInt compares parseInt and parseUint with strconv for every size
// a row's integer field can have.
func checkParseInt(t *testing.T, tok string) {
	t.Helper()
	for _, bits := range []int{8, 16, 32, 64} {
		n, err := strconv.ParseInt(tok, 10, bits)
		if g, ok := parseInt(tok, bits); ok != (err == nil) || (ok && g != n) {
			t.Fatalf("parseInt(%q, %d) = %d, %v; strconv says %d, %v", tok, bits, g, ok, n, err)
		}
		u, err := strconv.ParseUint(tok, 10, bits)
		if g, ok := parseUint(tok, bits); ok != (err == nil) || (ok && g != u) {
			t.Fatalf("parseUint(%q, %d) = %d, %v; strconv says %d, %v", tok, bits, g, ok, u, err)
		}
	}
}

func TestParseIntAgreesWithStrconv(t *testing.T) {
	for _, tok := range []string{
		"", "-", "+", "0", "-0", "7", "-7", "+7", "007", "127", "128", "-128", "-129", "255", "256",
		"32767", "32768", "-32768", "-32769", "65535", "65536", "2147483647", "2147483648", "-2147483648", "-2147483649",
		"4294967295", "4294967296", "999999999999999999", "-999999999999999999", "1000000000000000000",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"9999999999999999999", "-9999999999999999999", "18446744073709551615", "18446744073709551616", "1.5", "1e3", "1E3", "-1.0", "12a", "1_000", " 1", "1 ",
	} {
		checkParseInt(t, tok)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		b := make([]byte, rng.IntN(22))
		for i := range b {
			b[i] = "0123456789"[rng.IntN(10)]
		}
		if len(b) > 0 && rng.IntN(3) == 0 {
			b[0] = '-'
		}
		checkParseInt(t, string(b))
	}
}

// FuzzParseInt: the fast integer parse of row fields agrees with strconv
// on any text.
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", "-1", "127", "-128", "999999999999999999", "9223372036854775808", "1e3", "+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) { checkParseInt(t, tok) })
}
