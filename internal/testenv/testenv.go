// Package testenv connects tide's tests to the real services on the machine:
// Postgres (TIDE_TEST_DATABASE_URL) and NATS (TIDE_TEST_NATS_URL).
//
// When a service cannot be reached, a test is skipped with a message naming
// the variable to set, except in CI (CI=true), where it fails: CI must never
// turn green by skipping what it was meant to test.
//
// Every Postgres test gets a fresh schema of its own, set as the search_path
// of its pool and dropped when the test ends, so packages and tests run in
// parallel against one database without seeing each other's tables.
//
// The suite shares the server's connections with whatever else runs on it.
// A test's pool holds at most DefaultPoolSize connections unless the test
// asks PoolSize for more, which sizes the pool from the connections the
// server has free (see PoolSize).
package testenv

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Environment variables read by the helpers, and their defaults.
const (
	DatabaseURLEnv     = "TIDE_TEST_DATABASE_URL"
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	NATSURLEnv         = "TIDE_TEST_NATS_URL"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
)

// SchemaPrefix starts the name of every schema Postgres makes. A schema left
// behind by a killed test run can be found (and dropped) by it.
const SchemaPrefix = "tidetest_"

// connectTimeout bounds how long a helper waits for a service before it
// skips or fails the test.
const connectTimeout = 5 * time.Second

// InCI reports whether the tests run in CI (CI=true), where an unreachable
// service fails the test instead of skipping it.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// Missing skips t because something it needs is missing (a service, a
// program such as chromium), or fails it in CI (CI=true): CI must never
// turn green by skipping what it was meant to test. what names the missing
// thing and why ("Postgres is not reachable at …: <err>"); hint says how to
// provide it ("start it, or set TIDE_TEST_DATABASE_URL").
func Missing(t testing.TB, what, hint string) {
	t.Helper()
	if InCI() {
		t.Fatalf("testenv: %s (CI=true, so this fails instead of skipping)", what)
	}
	t.Skipf("testenv: skipping: %s (%s; with CI=true this fails)", what, hint)
}

// unavailable skips t, or fails it in CI, for a service that cannot be
// reached.
func unavailable(t testing.TB, service, env, target string, err error) {
	t.Helper()
	Missing(t, fmt.Sprintf("%s is not reachable at %s: %v", service, target, err), "start it, or set "+env)
}

// DatabaseURL returns TIDE_TEST_DATABASE_URL, or DefaultDatabaseURL.
func DatabaseURL() string {
	if u := os.Getenv(DatabaseURLEnv); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// Postgres returns a pool connected to the test database whose search_path
// is a fresh, empty schema of this test's own (see PostgresSchema). The pool
// is closed and the schema dropped when the test ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := PostgresSchema(t)
	return pool
}

// PostgresSchema is Postgres, also returning the name of the test's schema.
// Tests that need more schemas (say, for a feed's own tables) name them with
// this name as a prefix: every schema whose name starts with it is dropped
// when the test ends.
func PostgresSchema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	return PostgresConfig(t, nil)
}

// PostgresConfig is PostgresSchema with a hook that may adjust the pool's
// configuration before the pool is made. The search_path is already set in
// cfg.ConnConfig.RuntimeParams, and MaxConns to DefaultPoolSize, when tune
// runs; a tune that sets a bigger MaxConns takes it from PoolSize.
func PostgresConfig(t testing.TB, tune func(cfg *pgxpool.Config)) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := DatabaseURL()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("testenv: %s=%q is not a valid Postgres URL: %v", DatabaseURLEnv, redact(dsn), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		unavailable(t, "Postgres", DatabaseURLEnv, redact(dsn), err)
		return nil, "" // not reached
	}
	defer admin.Close(context.Background())

	schema := SchemaPrefix + randomName(12)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() { dropSchemas(t, cfg.ConnConfig, schema) })

	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = "tide-test " + truncate(t.Name(), 40)
	cfg.MaxConns = DefaultPoolSize
	if tune != nil {
		tune(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before dropSchemas (cleanups run last-in first-out)
	if err := pool.Ping(ctx); err != nil {
		unavailable(t, "Postgres", DatabaseURLEnv, redact(dsn), err)
	}
	return pool, schema
}

// PostgresDatabase creates a fresh, empty database of this test's own on
// the test server and returns its URL; the database is dropped (its
// sessions ended) when the test ends. For tests of code that uses fixed
// schema names, such as tide's default "tide" schema.
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	dsn := DatabaseURL()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("testenv: %s=%q is not a valid Postgres URL: %v", DatabaseURLEnv, redact(dsn), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		unavailable(t, "Postgres", DatabaseURLEnv, redact(dsn), err)
		return "" // not reached
	}
	defer admin.Close(context.Background())
	name := SchemaPrefix + randomName(12)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			t.Errorf("testenv: drop database %s: connect: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testenv: %s=%q: %v", DatabaseURLEnv, redact(dsn), err)
	}
	u.Path = "/" + name
	return u.String()
}

// dropSchemas drops every schema whose name starts with prefix.
func dropSchemas(t testing.TB, cc *pgx.ConnConfig, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		t.Errorf("testenv: drop schema %s: connect: %v", prefix, err)
		return
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix)
	if err != nil {
		t.Errorf("testenv: drop schema %s: %v", prefix, err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Errorf("testenv: drop schema %s: %v", prefix, err)
		return
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("testenv: drop schema %s: %v", n, err)
		}
	}
}

// NATSURL returns TIDE_TEST_NATS_URL (default DefaultNATSURL) after checking
// that its host accepts TCP connections; otherwise it skips the test, or
// fails it in CI.
func NATSURL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(NATSURLEnv)
	if raw == "" {
		raw = DefaultNATSURL
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("testenv: %s=%q is not a nats://host:port URL", NATSURLEnv, raw)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "4222")
	}
	c, err := net.DialTimeout("tcp", host, connectTimeout)
	if err != nil {
		unavailable(t, "NATS", NATSURLEnv, host, err)
		return ""
	}
	c.Close()
	return raw
}

// randomName returns n random characters of [a-z0-9].
func randomName(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// redact hides a password in a connection URL.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Context returns a context for a test's whole run, cancelled when the
// test ends or shortly before the test binary's -timeout, whichever is
// first. Load tests bound their work by count, not time; this context only
// stops a run that hangs, with a failure that names what it was waiting
// for instead of the binary's panic. Without a -timeout it ends after an
// hour.
func Context(t testing.TB) context.Context {
	t.Helper()
	end := time.Now().Add(time.Hour)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			end = dl.Add(-30 * time.Second)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	t.Cleanup(cancel)
	return ctx
}
