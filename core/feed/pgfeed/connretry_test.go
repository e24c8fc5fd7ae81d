package pgfeed_test

import (
	"context"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// connLog is a slog handler that passes the records about the sequencer's
// session (pgconnect's, with connection "pgfeed sequencer") to a channel.
type connLog struct {
	recs chan slog.Record
}

func (h connLog) Enabled(context.Context, slog.Level) bool { return true }
func (h connLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h connLog) WithGroup(string) slog.Handler            { return h }
func (h connLog) Handle(_ context.Context, r slog.Record) error {
	conn := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "connection" {
			conn = a.Value.String()
		}
		return true
	})
	if conn == "pgfeed sequencer" {
		h.recs <- r
	}
	return nil
}

// TestSequencerWaitsForAFreeConnection runs the feed as a role whose
// connection limit is what its pool holds, so the sequencer's own session
// is refused with 53300 (as on a server at max_connections). A change
// committed meanwhile must be sequenced once a connection frees up: the
// sequencer waits with one warning, connects and catches up, and nothing
// is lost.
func TestSequencerWaitsForAFreeConnection(t *testing.T) {
	t.Parallel()
	admin, name := testenv.PostgresSchema(t)
	ctx := testCtx(t)
	role := name + "_role"
	ident := pgx.Identifier{role}.Sanitize()
	var db string
	if err := admin.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE ROLE " + ident + " LOGIN",
		"ALTER SCHEMA " + pgx.Identifier{name}.Sanitize() + " OWNER TO " + ident,
		"GRANT CREATE ON DATABASE " + pgx.Identifier{db}.Sanitize() + " TO " + ident,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range []string{
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '" + role + "'",
			"DROP OWNED BY " + ident + " CASCADE",
			"DROP ROLE IF EXISTS " + ident,
		} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})

	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	createTable(t, pool, feedtest.Items)
	log := connLog{recs: make(chan slog.Record, 64)}
	f := migrated(t, pool, name, pgfeed.Options{Logger: slog.New(log), PollOnly: true}, feedtest.Items)

	// The role may hold the sessions its pool has open, no more.
	var open int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "ALTER ROLE "+ident+" CONNECTION LIMIT "+strconv.Itoa(open)); err != nil {
		t.Fatal(err)
	}
	f.StartSequencer()
	next := func(what string) slog.Record {
		t.Helper()
		select {
		case r := <-log.recs:
			return r
		case <-ctx.Done():
			t.Fatalf("the sequencer did not log that it %s", what)
			return slog.Record{}
		}
	}
	if r := next("cannot connect"); r.Level != slog.LevelWarn || !strings.Contains(r.Message, "53300") {
		t.Fatalf("first line: %v %q; want the warning that Postgres has no free connection", r.Level, r.Message)
	}

	// Committed while the sequencer cannot connect: captured, not yet
	// sequenced.
	if _, err := pool.Exec(ctx, `INSERT INTO feedtest_items (id, tenant, grp, title, n, done) VALUES ('a', 't1', 1, 'while full', 0, false)`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "ALTER ROLE "+ident+" CONNECTION LIMIT -1"); err != nil {
		t.Fatal(err)
	}
	for {
		r := next("connected once a connection was free")
		if r.Level == slog.LevelWarn {
			t.Fatalf("a second warning in one episode: %q", r.Message)
		}
		if r.Level == slog.LevelInfo && strings.Contains(r.Message, "connected") {
			break
		}
	}
	changes, err := f.Tail(ctx, 0, 10) // returns once the change has its position
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Key != "a" {
		t.Fatalf("changes after the wait: %+v; want the one committed while the server was full", changes)
	}
}
