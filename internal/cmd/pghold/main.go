// Command pghold holds idle connections to a Postgres server until it is
// stopped (SIGINT, SIGTERM), so that CI runs tide's tests next to another
// client that takes a share of max_connections, as a production server
// shares its database:
//
//	go run ./internal/cmd/pghold -n 40 -ready /tmp/pghold.ready &
//
// It connects to TIDE_TEST_DATABASE_URL (default: the local test
// database), opens n connections one after the other, writes "ready" to
// the -ready file once they are all open, and then waits. It exits
// non-zero if a connection cannot be opened or one of them dies.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/internal/testenv"
)

func main() {
	n := flag.Int("n", 40, "connections to hold")
	ready := flag.String("ready", "", "file to write \"ready\" to once every connection is open")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *n, *ready); err != nil {
		fmt.Fprintln(os.Stderr, "pghold:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int, ready string) error {
	cfg, err := pgx.ParseConfig(testenv.DatabaseURL())
	if err != nil {
		return err
	}
	cfg.RuntimeParams["application_name"] = "tide pghold"
	conns := make([]*pgx.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.Close(cctx)
			cancel()
		}
	}()
	for i := range n {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := pgx.ConnectConfig(cctx, cfg)
		cancel()
		if err != nil {
			return fmt.Errorf("connection %d of %d: %w", i+1, n, err)
		}
		conns = append(conns, c)
	}
	if ready != "" {
		if err := os.WriteFile(ready, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("pghold: holding %d connections (pid %d)\n", n, os.Getpid())
	// Check the sessions now and then, so that one the server ended is
	// reported instead of silently holding fewer.
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for i, c := range conns {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := c.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("connection %d died: %w", i+1, err)
			}
		}
	}
}
