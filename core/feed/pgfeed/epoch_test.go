package pgfeed

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/protocol"
)

func TestNewEpoch(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		e := newEpoch()
		if len(e) != 16 || !protocol.ValidEpoch(e) {
			t.Fatalf("newEpoch() = %q, not a valid epoch", e)
		}
		if seen[e] {
			t.Fatalf("newEpoch() repeated %q", e)
		}
		seen[e] = true
	}
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
