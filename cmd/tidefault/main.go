// Command tidefault runs tide under faults with real processes and checks
// that no client lost, leaked or doubled anything.
//
//	go run ./cmd/tidefault run -size 1 -restart-postgres -restart-nats
//
// It runs each configuration in turn: each capture of -capture
// trigger,logical with each bus of -bus pg,nats (nodes fanning out through
// the Postgres change log, then through NATS JetStream). The trigger
// capture runs on the test database's server; the logical capture
// (pgfeed.CaptureLogical, whose slot consumer runs on the sequencer's
// node) needs wal_level = logical, so it runs on a private Postgres
// cluster the tool starts (initdb into a temporary directory, as the
// internal/testenv package does for the tests) and stops by its PID at
// the end, or on TIDE_TEST_LOGICAL_DATABASE_URL's server when that is set.
//
// For each configuration it starts three app nodes as processes of its
// own (this binary re-executed as `tidefault node`) on a database of its
// own ("tidefault", next to the test database), and Go clients with file
// stores spread over them, each behind a loopback proxy of its own.
// Writers run all along: plain SQL (upserts that move rows between
// tenants and hide them from all but one user, visibility flips, deletes,
// multi-row transactions) and the clients' optimistic mutations, each
// with its idempotency key. Meanwhile, at random: kill -9 of a node (of
// the sequencer's or the replicator leader's node too), a client whose
// network stalls past the nodes' idle timeout, a client process
// restarting from its store file and, with -restart-postgres and
// -restart-nats, a restart of Postgres (the shared server under the
// trigger capture, the private cluster under the logical one) and of
// NATS.
//
// Then an independent checker compares every client's store file with the
// database and prints one final line: lost, leaked, ghost (deleted rows
// kept), applied twice, regressed cursors, pending and rejected
// mutations, unconverged clients. The exit status is 1 when any is not 0.
// -sabotage uncaptured writes rows behind the capture's back after the
// faults, so that the checker must fail the run.
//
// Postgres and NATS are shared: the run restarts them only when asked, only
// with the commands CI starts them with, and leaves them up if they were
// up (CI runs it last, with both restarts). With CI=true a missing service
// or, for the logical capture, missing Postgres binaries fail the run;
// otherwise the run, or its logical capture, is skipped.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tidesync/tide/internal/testenv"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "node":
		err = node(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tidefault:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tidefault run [flags] (see tidefault run -h)")
	os.Exit(2)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// errFailed is a run that completed and found problems (the final line
// says which).
type errFailed struct{ line string }

func (e errFailed) Error() string { return "the checker found problems" }

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	rc := &runConfig{}
	captures := fs.String("capture", "trigger,logical", "captures to run, in order: trigger (on the test database's server), logical (on a private Postgres cluster with wal_level = logical, or TIDE_TEST_LOGICAL_DATABASE_URL's server)")
	buses := fs.String("bus", "pg,nats", "bus configurations to run with each capture, in order: pg, nats")
	fs.IntVar(&rc.size, "size", 1, "scale: each configuration (a capture with a bus) writes and injects faults for size×20 s")
	fs.IntVar(&rc.nodes, "nodes", 3, "app node processes")
	fs.IntVar(&rc.clients, "clients", 6, "Go clients, spread over the nodes")
	fs.IntVar(&rc.tenants, "tenants", 4, "tenants; each client syncs two it may see, writes those and a third, and is refused a fourth")
	fs.DurationVar(&rc.idle, "idle", 3*time.Second, "the nodes' idle timeout; a stall lasts 1.5 to 2.5 times it")
	fs.DurationVar(&rc.faultEvery, "fault-every", 2*time.Second, "mean pause between two faults")
	fs.DurationVar(&rc.serviceEvery, "service-every", 15*time.Second, "least time between two restarts of Postgres (or of NATS)")
	fs.BoolVar(&rc.restartPG, "restart-postgres", false, "also restart Postgres as a fault: the shared one under the trigger capture (only where nothing else uses it, as the last step of CI), the private cluster under the logical capture")
	fs.BoolVar(&rc.restartNATS, "restart-nats", false, "also restart NATS as a fault, with the bus nats (shared too)")
	fs.DurationVar(&rc.converge, "converge", 2*time.Minute, "bound on the wait for every client to converge")
	fs.Uint64Var(&rc.seed, "seed", 0, "random seed (0: from the clock; printed)")
	fs.StringVar(&rc.sabotage, "sabotage", "", "uncaptured: after the faults, write rows and delete one behind the capture's back, so the checker must fail the run (proves it fires)")
	keep := fs.Bool("keep", false, "keep the run's directory (node logs, store files)")
	_ = fs.Parse(args)
	rc.dsn = envOr("TIDE_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	rc.natsURL = envOr("TIDE_TEST_NATS_URL", "nats://127.0.0.1:4222")
	rc.captures = strings.Split(*captures, ",")
	for _, c := range rc.captures {
		if c != "trigger" && c != "logical" {
			return fmt.Errorf("-capture %q: want trigger, logical or both", *captures)
		}
	}
	rc.buses = strings.Split(*buses, ",")
	for _, b := range rc.buses {
		if b != "pg" && b != "nats" {
			return fmt.Errorf("-bus %q: want pg, nats or both", *buses)
		}
	}
	if rc.sabotage != "" && rc.sabotage != "uncaptured" {
		return fmt.Errorf("-sabotage %q: want uncaptured", rc.sabotage)
	}
	if rc.size < 1 || rc.nodes < 1 || rc.nodes > 9 || rc.clients < 1 || rc.clients > 64 || rc.tenants < 4 || rc.idle <= 0 || rc.faultEvery <= 0 {
		return fmt.Errorf("want -size ≥ 1, 1 ≤ -nodes ≤ 9, 1 ≤ -clients ≤ 64, -tenants ≥ 4, positive -idle and -fault-every")
	}
	if rc.seed == 0 {
		rc.seed = uint64(time.Now().UnixNano())
	}
	var err error
	if rc.pgAddr, err = dsnAddr(rc.dsn); err != nil {
		return err
	}
	if rc.natsAddr, err = urlAddr(rc.natsURL, "4222"); err != nil {
		return err
	}
	for _, a := range []string{rc.pgAddr, rc.natsAddr} {
		if err := loopbackOnly(a); err != nil {
			return err
		}
	}
	needPG, needLogical := slices.Contains(rc.captures, "trigger"), slices.Contains(rc.captures, "logical")
	rc.logicalURL = os.Getenv(testenv.LogicalURLEnv)
	if needLogical && rc.logicalURL != "" {
		a, err := dsnAddr(rc.logicalURL)
		if err != nil {
			return fmt.Errorf("%s: %w", testenv.LogicalURLEnv, err)
		}
		if err := loopbackOnly(a); err != nil {
			return err
		}
		if rc.restartPG {
			return fmt.Errorf("-restart-postgres restarts the private cluster of the logical capture; %s names a server of its own: unset it, or drop -restart-postgres", testenv.LogicalURLEnv)
		}
	}
	rc.pgWasUp, rc.natsWasUp = serviceUp(rc.pgAddr), serviceUp(rc.natsAddr)
	needNATS := slices.Contains(rc.buses, "nats")
	if (needPG && !rc.pgWasUp) || (needNATS && !rc.natsWasUp) {
		msg := fmt.Sprintf("Postgres at %s up: %v, NATS at %s up: %v", rc.pgAddr, rc.pgWasUp, rc.natsAddr, rc.natsWasUp)
		if testenv.InCI() {
			return fmt.Errorf("a service is missing (%s); CI=true, so this fails", msg)
		}
		fmt.Printf("tidefault: skipped: a service is missing (%s)\n", msg)
		return nil
	}
	if needPG && rc.restartPG && rc.pgAddr != pgAddr {
		return fmt.Errorf("-restart-postgres restarts this machine's Postgres (%s); the run's is %s", pgAddr, rc.pgAddr)
	}
	if rc.restartNATS && rc.natsAddr != natsAddr {
		return fmt.Errorf("-restart-nats restarts this machine's NATS (%s); the run's is %s", natsAddr, rc.natsAddr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Whatever happens, the services that were up are up again.
	defer func() {
		if err := restoreServices(rc.pgWasUp, rc.natsWasUp); err != nil {
			fmt.Fprintln(os.Stderr, "tidefault: could not restore the services:", err)
		}
	}()
	start := time.Now()
	if rc.dir, err = os.MkdirTemp("", "tidefault-"); err != nil {
		return err
	}
	if needLogical {
		if err := rc.startLogical(); err != nil {
			msg := fmt.Sprintf("no Postgres with wal_level = logical for the logical capture: %v", err)
			if testenv.InCI() {
				_ = os.RemoveAll(rc.dir)
				return fmt.Errorf("%s; CI=true, so this fails", msg)
			}
			fmt.Printf("tidefault: skipped the logical capture: %s (%s; with CI=true this fails)\n", msg, testenv.LogicalMissingHint)
			rc.captures = slices.DeleteFunc(rc.captures, func(c string) bool { return c == "logical" })
			if len(rc.captures) == 0 {
				_ = os.RemoveAll(rc.dir)
				return nil
			}
		}
		if rc.logical != nil {
			// Stopped by its PID whatever happens, and its directory
			// removed; its server log is kept with the run's.
			defer func() {
				if b, err := os.ReadFile(filepath.Join(rc.logical.Dir(), "postgres.log")); err == nil {
					_ = os.WriteFile(filepath.Join(rc.dir, "logical-postgres.log"), b, 0o644)
				}
				if err := rc.logical.Close(); err != nil {
					fmt.Fprintln(os.Stderr, "tidefault: stop the private cluster:", err)
				}
			}()
		}
	}
	cluster := "none"
	if rc.logical != nil {
		cluster = fmt.Sprintf("%s(pid %d, %s)", rc.logical.Addr(), rc.logical.PID(), rc.logical.Dir())
	} else if rc.logicalURL != "" && slices.Contains(rc.captures, "logical") {
		cluster = testenv.LogicalURLEnv
	}
	fmt.Printf("tidefault: seed=%d size=%d captures=%s buses=%s nodes=%d clients=%d tenants=%d phase=%s idle=%s restart_postgres=%v restart_nats=%v logical_server=%s dir=%s\n",
		rc.seed, rc.size, strings.Join(rc.captures, ","), *buses, rc.nodes, rc.clients, rc.tenants, rc.phase(), rc.idle, rc.restartPG, rc.restartNATS, cluster, rc.dir)
	for _, c := range rc.captures {
		ectx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = ensureDatabase(ectx, rc.serverURL(c))
		cancel()
		if err != nil {
			return fmt.Errorf("create the tidefault database (capture %s): %w", c, err)
		}
	}
	var total counts
	faults := map[string]int{}
	failed := false
	sqlWrites, resets := 0, 0
	for _, capture := range rc.captures {
		for _, bus := range rc.buses {
			cf := config{capture: capture, bus: bus}
			res, err := runBus(ctx, rc, cf)
			if err != nil {
				return fmt.Errorf("capture %s, bus %s: %w (logs in %s)", capture, bus, err, rc.dir)
			}
			fmt.Println("tidefault:", res.line())
			total.add(res.c)
			for k, v := range res.faults {
				faults[k] += v
			}
			sqlWrites += res.sqlWrites
			resets += res.resets
			if res.c.failed() || !strings.HasPrefix(res.roles, "ok") {
				failed = true
			}
		}
	}
	if err := rc.restore(); err != nil {
		return err
	}
	nFaults := 0
	for _, v := range faults {
		nFaults += v
	}
	line := fmt.Sprintf("tidefault: %s size=%d captures=%s buses=%s faults=%d{%s} sql_writes=%d %s resets=%d seed=%d elapsed=%s",
		verdict(failed), rc.size, strings.Join(rc.captures, ","), strings.Join(rc.buses, ","), nFaults, pairs(faults), sqlWrites, total, resets, rc.seed, time.Since(start).Round(time.Second))
	if failed {
		fmt.Println(line)
		fmt.Fprintf(os.Stderr, "tidefault: logs and store files kept in %s\n", rc.dir)
		return errFailed{line}
	}
	if !*keep {
		_ = os.RemoveAll(rc.dir)
	}
	fmt.Println(line)
	return nil
}

// dsnAddr returns the host:port of a Postgres URL.
func dsnAddr(dsn string) (string, error) { return urlAddr(dsn, "5432") }

func urlAddr(raw, defPort string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = defPort
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}
