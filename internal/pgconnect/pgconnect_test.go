package pgconnect_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidesync/tide/internal/pgconnect"
	"github.com/tidesync/tide/internal/testenv"
)

func TestTooManyClients(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"53300", &pgconn.PgError{Code: "53300"}, true},
		{"wrapped 53300", errors.Join(errors.New("connect"), &pgconn.PgError{Code: "53300"}), true},
		{"another code", &pgconn.PgError{Code: "3D000"}, false},
		{"not a server error", context.DeadlineExceeded, false},
	} {
		if got := pgconnect.TooManyClients(tc.err); got != tc.want {
			t.Errorf("%s: TooManyClients(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// records is a slog handler that keeps its records and signals each one.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
	got  chan slog.Level
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	select {
	case r.got <- rec.Level:
	default:
	}
	return nil
}

// limitedRole creates a login role of the test's own that may hold one
// session at a time, and returns the URL that connects as it.
func limitedRole(t *testing.T) string {
	t.Helper()
	admin := testenv.Postgres(t)
	ctx := context.Background()
	role := "tidetest_role_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	if len(role) > 50 {
		role = role[:50]
	}
	role += "_" + time.Now().Format("150405.000000")[7:]
	if _, err := admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN CONNECTION LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// TestRetryWaitsForAFreeConnection holds the only session a role may have,
// so the server refuses the next with 53300; Retry must wait, log one
// warning, and connect once the session ends.
func TestRetryWaitsForAFreeConnection(t *testing.T) {
	dsn := limitedRole(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang bound
	defer cancel()
	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, dsn); !pgconnect.TooManyClients(err) {
		t.Fatalf("a second session of a role limited to one: %v, want SQLSTATE 53300", err)
	}

	rec := &records{got: make(chan slog.Level, 16)}
	type result struct {
		conn *pgx.Conn
		err  error
	}
	done := make(chan result, 1)
	attempts := 0
	go func() {
		c, err := pgconnect.Retry(ctx, slog.New(rec), "test session", func(ctx context.Context) (*pgx.Conn, error) {
			attempts++
			return pgx.Connect(ctx, dsn)
		})
		done <- result{c, err}
	}()
	select {
	case lvl := <-rec.got:
		if lvl != slog.LevelWarn {
			t.Fatalf("first log line at %v, want a warning", lvl)
		}
	case r := <-done:
		t.Fatalf("Retry returned while the only session was held: %v", r.err)
	case <-ctx.Done():
		t.Fatal("Retry neither logged nor returned")
	}
	if err := holder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("Retry did not connect once the session was free")
	}
	if r.err != nil {
		t.Fatalf("Retry: %v", r.err)
	}
	defer r.conn.Close(context.Background())
	if err := r.conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var warns, infos int
	for _, l := range rec.recs {
		switch l.Level {
		case slog.LevelWarn:
			warns++
			if !strings.Contains(l.Message, "53300") || !strings.Contains(l.Message, "max_connections") {
				t.Errorf("the warning does not say what happened and what to do: %q", l.Message)
			}
		case slog.LevelInfo:
			infos++
		}
	}
	if warns != 1 || infos != 1 || attempts < 2 {
		t.Errorf("%d attempts, %d warnings, %d info lines; want at least 2 attempts, one warning for the episode and one line when it ends", attempts, warns, infos)
	}
}

// TestRetryReturnsOtherErrors: an error that is not 53300 is the caller's
// to handle, at once.
func TestRetryReturnsOtherErrors(t *testing.T) {
	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/tidetest_no_such_database"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testenv.Postgres(t) // skips, or fails in CI, without a server
	attempts := 0
	_, err = pgconnect.Retry(ctx, slog.New(slog.DiscardHandler), "test", func(ctx context.Context) (*pgx.Conn, error) {
		attempts++
		return pgx.Connect(ctx, u.String())
	})
	if err == nil || pgconnect.TooManyClients(err) || attempts != 1 {
		t.Fatalf("%d attempts, err %v; want one attempt and the server's error", attempts, err)
	}
}

// TestRetryEndsWithContext: a wait for a free connection ends with ctx.
func TestRetryEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	_, err := pgconnect.Retry(ctx, slog.New(slog.DiscardHandler), "test", func(ctx context.Context) (*pgx.Conn, error) {
		attempts++
		if attempts == 3 {
			cancel()
		}
		return nil, &pgconn.PgError{Code: pgconnect.TooManyConnectionsCode}
	})
	if !errors.Is(err, context.Canceled) || attempts != 3 {
		t.Fatalf("%d attempts, err %v; want 3 and context.Canceled", attempts, err)
	}
}
