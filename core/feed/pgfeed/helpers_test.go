package pgfeed_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

// sqlType is the column type the tests create for a kind.
func sqlType(k protocol.Kind) string {
	switch k {
	case protocol.KindString:
		return "text"
	case protocol.KindInt:
		return "bigint"
	case protocol.KindUint:
		return "numeric(20)"
	case protocol.KindFloat:
		return "double precision"
	case protocol.KindBool:
		return "boolean"
	case protocol.KindTime:
		return "timestamptz"
	case protocol.KindBytes:
		return "bytea"
	case protocol.KindJSON:
		return "jsonb"
	}
	panic("unknown kind")
}

// createTable creates the table of s in the pool's schema.
func createTable(t testing.TB, pool *pgxpool.Pool, s *feed.Schema) {
	t.Helper()
	if s == feedtest.Values {
		for _, ddl := range feedtest.ValuesSQL {
			if _, err := pool.Exec(context.Background(), ddl); err != nil {
				t.Fatalf("create table %s: %v", s.Table, err)
			}
		}
		return
	}
	var cols, keys []string
	for i, c := range s.Columns {
		def := pgx.Identifier{c.Name}.Sanitize() + " " + sqlType(c.Kind)
		if !c.Nullable || slices.Contains(s.Keys, i) {
			def += " NOT NULL"
		}
		cols = append(cols, def)
	}
	for _, k := range s.Keys {
		keys = append(keys, pgx.Identifier{s.Columns[k].Name}.Sanitize())
	}
	cols = append(cols, "PRIMARY KEY ("+strings.Join(keys, ", ")+")")
	ddl := "CREATE TABLE " + pgx.Identifier(strings.Split(s.Table, ".")).Sanitize() + " (" + strings.Join(cols, ", ") + ")"
	if _, err := pool.Exec(context.Background(), ddl); err != nil {
		t.Fatalf("create table %s: %v", s.Table, err)
	}
}

// newFeed makes a migrated feed over a fresh schema holding the tables of
// schemas, with its own tide schema. It returns the feed and the pool.
func newFeed(t testing.TB, opts pgfeed.Options, schemas ...*feed.Schema) (*pgfeed.Feed, *pgxpool.Pool) {
	t.Helper()
	pool, name := testenv.PostgresSchema(t)
	return newFeedOn(t, pool, name, opts, schemas...), pool
}

// newLogicalFeed is newFeed on the server with wal_level logical, with
// the logical capture.
func newLogicalFeed(t testing.TB, opts pgfeed.Options, schemas ...*feed.Schema) (*pgfeed.Feed, *pgxpool.Pool) {
	t.Helper()
	pool, name := testenv.LogicalSchema(t, nil)
	opts.Capture = pgfeed.CaptureLogical
	return newFeedOn(t, pool, name, opts, schemas...), pool
}

func newFeedOn(t testing.TB, pool *pgxpool.Pool, name string, opts pgfeed.Options, schemas ...*feed.Schema) *pgfeed.Feed {
	t.Helper()
	for _, s := range schemas {
		createTable(t, pool, s)
	}
	return migrated(t, pool, name, opts, schemas...)
}

// migrated makes a migrated feed over existing tables.
func migrated(t testing.TB, pool *pgxpool.Pool, name string, opts pgfeed.Options, schemas ...*feed.Schema) *pgfeed.Feed {
	t.Helper()
	if opts.Schema == "" {
		opts.Schema = name + "_tide"
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	f, err := pgfeed.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Migrate(ctx, schemas...); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return f
}

// testLogger logs warnings and errors through t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// insertConcurrently runs writers goroutines, each committing each
// single-row statements insert (whose one argument is id(writer, i)), and
// waits for them all.
func insertConcurrently(ctx context.Context, t testing.TB, pool *pgxpool.Pool, writers, each int, insert string, id func(w, i int) string) {
	t.Helper()
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				if _, err := pool.Exec(ctx, insert, id(w, i)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
