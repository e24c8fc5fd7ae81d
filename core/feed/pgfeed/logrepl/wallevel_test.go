package logrepl

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidesync/tide/internal/testenv"
)

// On a server with wal_level = replica (the shared test server), setup and
// the consumer refuse with an error that names the setting and the fix.
func TestWALLevelError(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	var level string
	if err := pool.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level == "logical" {
		t.Skipf("the server at %s has wal_level = logical: nothing to refuse", testenv.DatabaseURLEnv)
	}
	want := `logrepl: wal_level is "` + level + `"; logical replication needs wal_level = logical: run ALTER SYSTEM SET wal_level = logical; and restart Postgres`
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrWALLevel) {
			t.Fatalf("%s: %v, want ErrWALLevel", what, err)
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeWALLevel || err.Error() != want {
			t.Fatalf("%s: %q, want %q", what, err, want)
		}
	}
	check("CheckWALLevel", CheckWALLevel(ctx, pool))
	_, err := EnsureSlot(ctx, pool, "tide_never_made")
	check("EnsureSlot", err)
	c, err := NewConsumer(Config{ConnString: testenv.DatabaseURL(), Slot: "tide_never_made", Publication: "tide_never_made"})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Run(ctx, func(context.Context, *Tx) error { return nil })
	if err != nil && strings.Contains(err.Error(), "replication") && !errors.Is(err, ErrWALLevel) {
		// The role or pg_hba.conf may refuse replication connections on the
		// shared server: then only setup can be checked.
		t.Logf("Run on the shared server: %v", err)
		return
	}
	check("Run", err)
}
