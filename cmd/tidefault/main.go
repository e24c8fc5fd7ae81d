// Command tidefault runs tide under faults with real processes and checks
// that no client lost, leaked or doubled anything.
//
//	go run ./cmd/tidefault run -size 1 -restart-postgres -restart-nats
//
// For each bus configuration (-bus pg,nats: nodes fanning out through the
// Postgres change log, then through NATS JetStream) it starts three app
// nodes as processes of its own (this binary re-executed as
// `tidefault node`) on a database of its own ("tidefault", next to the test
// database), and Go clients with file stores spread over them, each behind
// a loopback proxy of its own. Writers run all along: plain SQL (upserts
// that move rows between tenants and hide them from all but one user,
// visibility flips, deletes, multi-row transactions) and the clients'
// optimistic mutations, each with its idempotency key. Meanwhile, at
// random: kill -9 of a node (of the sequencer's or the replicator
// leader's node too), a client whose network stalls past the nodes' idle
// timeout, a client process restarting from its store file and, with
// -restart-postgres and -restart-nats, a restart of Postgres and of NATS.
//
// Then an independent checker compares every client's store file with the
// database and prints one final line: lost, leaked, ghost (deleted rows
// kept), applied twice, regressed cursors, pending and rejected
// mutations, unconverged clients. The exit status is 1 when any is not 0.
//
// Postgres and NATS are shared: the run restarts them only when asked, only
// with the commands CI starts them with, and leaves them up if they were
// up (CI runs it last, with both restarts). With
// CI=true a missing service is a failure; otherwise the run is skipped.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
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
	buses := fs.String("bus", "pg,nats", "bus configurations to run, in order: pg, nats")
	fs.IntVar(&rc.size, "size", 1, "scale: each bus configuration writes and injects faults for size×20 s")
	fs.IntVar(&rc.nodes, "nodes", 3, "app node processes")
	fs.IntVar(&rc.clients, "clients", 6, "Go clients, spread over the nodes")
	fs.IntVar(&rc.tenants, "tenants", 4, "tenants; each client syncs two it may see, writes those and a third, and is refused a fourth")
	fs.DurationVar(&rc.idle, "idle", 3*time.Second, "the nodes' idle timeout; a stall lasts 1.5 to 2.5 times it")
	fs.DurationVar(&rc.faultEvery, "fault-every", 2*time.Second, "mean pause between two faults")
	fs.DurationVar(&rc.serviceEvery, "service-every", 15*time.Second, "least time between two restarts of Postgres (or of NATS)")
	fs.BoolVar(&rc.restartPG, "restart-postgres", false, "also restart Postgres as a fault (it is shared: only where nothing else uses it, as the last step of CI)")
	fs.BoolVar(&rc.restartNATS, "restart-nats", false, "also restart NATS as a fault, with the bus nats (shared too)")
	fs.DurationVar(&rc.converge, "converge", 2*time.Minute, "bound on the wait for every client to converge")
	fs.Uint64Var(&rc.seed, "seed", 0, "random seed (0: from the clock; printed)")
	keep := fs.Bool("keep", false, "keep the run's directory (node logs, store files)")
	_ = fs.Parse(args)
	rc.dsn = envOr("TIDE_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	rc.natsURL = envOr("TIDE_TEST_NATS_URL", "nats://127.0.0.1:4222")
	rc.buses = strings.Split(*buses, ",")
	for _, b := range rc.buses {
		if b != "pg" && b != "nats" {
			return fmt.Errorf("-bus %q: want pg, nats or both", *buses)
		}
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
	rc.pgWasUp, rc.natsWasUp = serviceUp(rc.pgAddr), serviceUp(rc.natsAddr)
	needNATS := strings.Contains(*buses, "nats")
	if !rc.pgWasUp || (needNATS && !rc.natsWasUp) {
		msg := fmt.Sprintf("Postgres at %s up: %v, NATS at %s up: %v", rc.pgAddr, rc.pgWasUp, rc.natsAddr, rc.natsWasUp)
		if testenv.InCI() {
			return fmt.Errorf("a service is missing (%s); CI=true, so this fails", msg)
		}
		fmt.Printf("tidefault: skipped: a service is missing (%s)\n", msg)
		return nil
	}
	if rc.restartPG && rc.pgAddr != pgAddr {
		return fmt.Errorf("-restart-postgres restarts this machine's Postgres (%s); the run's is %s", pgAddr, rc.pgAddr)
	}
	if rc.restartNATS && rc.natsAddr != natsAddr {
		return fmt.Errorf("-restart-nats restarts this machine's NATS (%s); the run's is %s", natsAddr, rc.natsAddr)
	}
	if rc.dir, err = os.MkdirTemp("", "tidefault-"); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Whatever happens, the services that were up are up again.
	defer func() {
		if err := restoreServices(rc.pgWasUp, rc.natsWasUp); err != nil {
			fmt.Fprintln(os.Stderr, "tidefault: could not restore the services:", err)
		}
	}()

	fmt.Printf("tidefault: seed=%d size=%d buses=%s nodes=%d clients=%d tenants=%d phase=%s idle=%s restart_postgres=%v restart_nats=%v dir=%s\n",
		rc.seed, rc.size, *buses, rc.nodes, rc.clients, rc.tenants, rc.phase(), rc.idle, rc.restartPG, rc.restartNATS, rc.dir)
	start := time.Now()
	ectx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err = ensureDatabase(ectx, rc.dsn)
	cancel()
	if err != nil {
		return fmt.Errorf("create the tidefault database: %w", err)
	}
	var total counts
	faults := map[string]int{}
	failed := false
	var busNames []string
	sqlWrites, resets := 0, 0
	for _, bus := range rc.buses {
		res, err := runBus(ctx, rc, bus)
		if err != nil {
			return fmt.Errorf("bus %s: %w (logs in %s)", bus, err, rc.dir)
		}
		fmt.Println("tidefault:", res.line())
		total.add(res.c)
		for k, v := range res.faults {
			faults[k] += v
		}
		sqlWrites += res.sqlWrites
		resets += res.resets
		busNames = append(busNames, bus)
		if res.c.failed() || !strings.HasPrefix(res.roles, "ok") {
			failed = true
		}
	}
	if err := restoreServices(rc.pgWasUp, rc.natsWasUp); err != nil {
		return err
	}
	nFaults := 0
	for _, v := range faults {
		nFaults += v
	}
	line := fmt.Sprintf("tidefault: %s size=%d buses=%s faults=%d{%s} sql_writes=%d %s resets=%d seed=%d elapsed=%s",
		verdict(failed), rc.size, strings.Join(busNames, ","), nFaults, pairs(faults), sqlWrites, total, resets, rc.seed, time.Since(start).Round(time.Second))
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
