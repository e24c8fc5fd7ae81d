package testenv

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestLogicalClusterRestart: a private cluster restarts by its PID on the
// same data directory and port, keeping its data and wal_level = logical,
// and Close stops it and removes its directory.
func TestLogicalClusterRestart(t *testing.T) {
	c, err := StartLogicalCluster()
	if err != nil {
		Missing(t, "no private Postgres cluster: "+err.Error(), LogicalMissingHint)
	}
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// query runs sql and returns its one text value.
	query := func(sql string) string {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL())
		if err != nil {
			t.Fatalf("connect to %s: %v", c.URL(), err)
		}
		defer conn.Close(context.Background())
		var s string
		if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return s
	}
	if got := query("SHOW wal_level"); got != "logical" {
		t.Fatalf("wal_level = %s, want logical", got)
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatalf("connect to %s: %v", c.URL(), err)
	}
	_, err = conn.Exec(ctx, "CREATE TABLE kept AS SELECT 'before the restart'::text AS v")
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pid, url := c.PID(), c.URL()
	if pid == 0 {
		t.Fatal("PID is 0 while the server runs")
	}
	if err := c.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if c.PID() == pid || c.PID() == 0 || c.URL() != url {
		t.Fatalf("after the restart: PID %d (was %d), URL %s (was %s)", c.PID(), pid, c.URL(), url)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("the first postmaster (%d) still runs", pid)
	}
	if got := query("SELECT v FROM kept"); got != "before the restart" {
		t.Fatalf("after the restart, kept = %q", got)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if c.PID() != 0 {
		t.Fatalf("PID %d after Stop", c.PID())
	}
	if err := c.Start(); err != nil {
		t.Fatalf("start after stop: %v", err)
	}
	last := c.PID()
	closed = true
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if syscall.Kill(last, 0) == nil {
		t.Fatalf("the postmaster (%d) runs after Close", last)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Fatalf("%s after Close: %v", c.Dir(), err)
	}
}
