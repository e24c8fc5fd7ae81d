package pgfeed

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestNewEpoch(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		e := newEpoch()
		if !ValidEpoch(e) {
			t.Fatalf("newEpoch() = %q, not a valid epoch", e)
		}
		if seen[e] {
			t.Fatalf("newEpoch() repeated %q", e)
		}
		seen[e] = true
	}
}

// FuzzValidEpoch checks the epoch parser that guards what is read from the
// meta table: it accepts exactly 16 ASCII letters and digits, and never
// panics.
func FuzzValidEpoch(f *testing.F) {
	for _, s := range []string{"", "abcdefghijklmnop", "ABCDEFGHIJKLMNO1", "abcdefghijklmno", "abcdefghijklmnopq", "abcdefgh-jklmnop", "abcdefghijklmnó", "\x00bcdefghijklmnop"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := len(s) == 16
		for _, r := range []byte(s) {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
				want = false
			}
		}
		if got := ValidEpoch(s); got != want {
			t.Fatalf("ValidEpoch(%q) = %v, want %v", s, got, want)
		}
	})
}

func TestNames(t *testing.T) {
	long := "a_very_long_schema_name_that_is_fourty_" // 39 bytes
	n := newNames(long)
	if len(n.channel) > 63 {
		t.Fatalf("channel %q is longer than an identifier", n.channel)
	}
	if a, b := shortIdent(long+long), shortIdent(long+long+"x"); a == b || len(a) > 63 {
		t.Fatalf("shortIdent: %q and %q", a, b)
	}
	for _, bad := range []string{"", "Tide", "1tide", "ti-de", "tide;drop", `ti"de`} {
		if validName(bad, 40) == nil {
			t.Fatalf("validName(%q) accepted", bad)
		}
	}
	if quoteLit("o'k") != "'o''k'" {
		t.Fatal("quoteLit")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New(nil pool) returned no error")
	}
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := New(pool, Options{Schema: "Bad-Name"}); err == nil {
		t.Fatal("New with an invalid schema name returned no error")
	}
	f, err := New(pool, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Schema() != DefaultSchema || f.Epoch() != "" {
		t.Fatalf("schema %q, epoch %q", f.Schema(), f.Epoch())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
