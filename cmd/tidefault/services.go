package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidesync/tide/internal/testenv"
)

// The shared services this run restarts. Postgres is restarted with its
// cluster tool; NATS is stopped only if it runs with exactly natsArgs, and
// started again with them.
var natsArgs = []string{"/usr/sbin/nats-server", "-a", "127.0.0.1", "-p", "4222", "-js", "-sd", "/var/lib/nats-server", "-l", "/var/log/nats-server.log"}

// serviceUp reports whether something accepts TCP connections on addr.
func serviceUp(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// waitUp waits until addr accepts connections, at most d.
func waitUp(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !serviceUp(addr) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not up after %s", addr, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// pgCluster returns the version directory of the machine's one Postgres
// cluster (the name under /etc/postgresql).
func pgCluster() (string, error) {
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil {
		return "", err
	}
	if len(entries) != 1 {
		return "", fmt.Errorf("/etc/postgresql holds %d clusters; want one", len(entries))
	}
	return entries[0].Name(), nil
}

// pgctl runs pg_ctlcluster's action (restart, start) on the cluster.
func pgctl(ctx context.Context, action string) error {
	v, err := pgCluster()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, "pg_ctlcluster", "--skip-systemctl-redirect", v, "main", action).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctlcluster %s: %v: %s", action, err, bytes.TrimSpace(out))
	}
	return nil
}

// natsPID finds the nats-server started with exactly natsArgs, or 0.
func natsPID() (int, error) {
	out, err := exec.Command("pgrep", "-x", "nats-server").Output()
	if err != nil {
		return 0, nil // pgrep exits 1 when nothing matches
	}
	want := strings.Join(natsArgs, "\x00")
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if strings.TrimRight(string(cmdline), "\x00") == want {
			return pid, nil
		}
		return 0, fmt.Errorf("nats-server %d runs as %q, not as this tool would start it again; not restarting it", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
	}
	return 0, nil
}

// startNATS starts nats-server with natsArgs, unless it runs.
func startNATS(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := append([]string{"--start", "--oknodo", "--background", "--exec", natsArgs[0], "--"}, natsArgs[1:]...)
	out, err := exec.CommandContext(cctx, "start-stop-daemon", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("start-stop-daemon: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// restartNATS stops the nats-server running with natsArgs and starts it
// again with the same arguments. It refuses when the server runs with
// other arguments (it could not be started again as it was).
func restartNATS(ctx context.Context) error {
	pid, err := natsPID()
	if err != nil {
		return err
	}
	if pid == 0 {
		return errors.New("no nats-server runs with the expected command line")
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // it would not stop; it is started again below
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := startNATS(ctx); err != nil {
		return err
	}
	return waitUp(ctx, natsAddr, 30*time.Second)
}

const (
	pgAddr   = "127.0.0.1:5432"
	natsAddr = "127.0.0.1:4222"
)

// restoreServices starts again, with the commands CI starts them with,
// the services that were up when the run began and are down now.
func restoreServices(pgWasUp, natsWasUp bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	if pgWasUp && waitUp(ctx, pgAddr, 10*time.Second) != nil {
		fmt.Fprintln(os.Stderr, "tidefault: Postgres is down; starting it")
		if err := pgctl(ctx, "start"); err != nil {
			errs = append(errs, err)
		} else if err := waitUp(ctx, pgAddr, time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	if natsWasUp && waitUp(ctx, natsAddr, 10*time.Second) != nil {
		fmt.Fprintln(os.Stderr, "tidefault: NATS is down; starting it")
		if err := startNATS(ctx); err != nil {
			errs = append(errs, err)
		} else if err := waitUp(ctx, natsAddr, time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startLogical finds the server of the logical capture: the one
// TIDE_TEST_LOGICAL_DATABASE_URL names, which must be up, or a private
// cluster it starts (testenv.StartLogicalCluster), which the run restarts
// as its Postgres fault and stops at its end.
func (rc *runConfig) startLogical() error {
	if rc.logicalURL != "" {
		a, _ := dsnAddr(rc.logicalURL) // checked by run
		if !serviceUp(a) {
			return fmt.Errorf("%s: nothing listens on %s", testenv.LogicalURLEnv, a)
		}
		return nil
	}
	c, err := testenv.StartLogicalCluster()
	if err != nil {
		return err
	}
	rc.logical, rc.logicalURL = c, c.URL()
	return nil
}

// serverURL returns the URL of the server a capture runs on.
func (rc *runConfig) serverURL(capture string) string {
	if capture == "logical" {
		return rc.logicalURL
	}
	return rc.dsn
}

// restartPostgres restarts the Postgres of a capture: the shared one with
// its cluster tool, or the private cluster by its postmaster's PID (a fast
// shutdown, then a start on the same data directory and port).
func (rc *runConfig) restartPostgres(ctx context.Context, capture string) error {
	if capture == "logical" {
		return rc.logical.Restart()
	}
	if err := pgctl(ctx, "restart"); err != nil {
		return err
	}
	return waitUp(ctx, rc.pgAddr, time.Minute)
}

// restore starts again what a fault left down: the shared services that
// were up when the run began, and the private cluster.
func (rc *runConfig) restore() error {
	var errs []error
	if rc.logical != nil {
		errs = append(errs, rc.logical.Start())
	}
	errs = append(errs, restoreServices(rc.pgWasUp, rc.natsWasUp))
	return errors.Join(errs...)
}
