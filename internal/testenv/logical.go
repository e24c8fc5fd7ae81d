package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Logical replication needs a Postgres with wal_level = logical. The
// shared test server does not have it (and must not be reconfigured), so
// unless TIDE_TEST_LOGICAL_DATABASE_URL names one, LogicalURL starts a
// private cluster (StartLogicalCluster), once per test binary, on a free
// loopback port:
//
//	initdb -D $DIR/data -U postgres -A trust --no-sync --no-locale -E UTF8
//	postgres -D $DIR/data -p $PORT -h 127.0.0.1 -k $DIR \
//	    -c wal_level=logical -c max_wal_senders=64 -c max_replication_slots=64 \
//	    -c max_connections=300 -c fsync=off
//
// run as the postgres OS user when the tests run as root (initdb refuses
// root), from the binaries of $TIDE_TEST_PG_BIN (default
// /usr/lib/postgresql/15/bin). StopLogical stops it (SIGINT to its own
// PID: a fast shutdown) and removes $DIR; if the test binary dies first,
// the server gets SIGQUIT from the kernel (Pdeathsig).

// Environment variables of the logical-replication tests.
const (
	LogicalURLEnv = "TIDE_TEST_LOGICAL_DATABASE_URL"
	PGBinEnv      = "TIDE_TEST_PG_BIN"
	defaultPGBin  = "/usr/lib/postgresql/15/bin"
)

// LogicalMissingHint says how to provide a Postgres with wal_level =
// logical, for a message about one that is missing.
const LogicalMissingHint = "set " + LogicalURLEnv + ", or install Postgres 15 at " + defaultPGBin + " or set " + PGBinEnv

var cluster struct {
	once sync.Once
	c    *LogicalCluster
	err  error
}

// LogicalURL returns the connection string of a Postgres with wal_level
// logical: TIDE_TEST_LOGICAL_DATABASE_URL, or a private cluster started on
// first use (see the package's logical.go). When there is none, the test
// is skipped with the reason, or fails in CI (Missing). A package that
// calls it stops the cluster from its TestMain with StopLogical.
func LogicalURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(LogicalURLEnv); u != "" {
		return u
	}
	cluster.once.Do(func() { cluster.c, cluster.err = StartLogicalCluster() })
	if cluster.err != nil {
		Missing(t, fmt.Sprintf("no Postgres with wal_level=logical: %v", cluster.err), LogicalMissingHint)
	}
	return cluster.c.URL()
}

// LogicalPrivate reports whether LogicalURL's server is the private
// cluster, which a test may reconfigure.
func LogicalPrivate() bool { return os.Getenv(LogicalURLEnv) == "" }

// StopLogical stops the private cluster, if one was started, and removes
// its directory. Call it from TestMain after m.Run.
func StopLogical() {
	if cluster.c != nil {
		_ = cluster.c.Close()
	}
}

// LogicalCluster is a private Postgres cluster with wal_level = logical,
// of its own in a temporary directory, listening on a loopback port (see
// the package's logical.go for its commands). Tests reach one through
// LogicalURL; a command that needs one of its own (cmd/tidefault, which
// also restarts it as a fault) starts it with StartLogicalCluster and
// must Close it. Its methods are safe for concurrent use.
type LogicalCluster struct {
	bin, dir, data string
	cred           *syscall.Credential
	port           int

	mu   sync.Mutex
	proc *os.Process
	done chan struct{} // closed when the server process has exited
	quit chan struct{} // ends the goroutine whose thread started it
}

// StartLogicalCluster creates a cluster with initdb in a new temporary
// directory and starts its server on a free loopback port. The server
// gets SIGQUIT from the kernel if the calling program dies before Close
// (Pdeathsig). It fails when the Postgres binaries are missing
// (TIDE_TEST_PG_BIN, default /usr/lib/postgresql/15/bin), or, running as
// root, when there is no postgres OS user to run them as.
func StartLogicalCluster() (*LogicalCluster, error) {
	bin := os.Getenv(PGBinEnv)
	if bin == "" {
		bin = defaultPGBin
	}
	for _, p := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			return nil, fmt.Errorf("no %s: %w", p, err)
		}
	}
	base := "" // os.TempDir()
	if os.Geteuid() == 0 {
		base = "/tmp" // the postgres OS user must reach it: TMPDIR may be under /root
	}
	dir, err := os.MkdirTemp(base, "tide-logrepl-")
	if err != nil {
		return nil, err
	}
	c := &LogicalCluster{bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	if err := c.create(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port may be taken before the server binds it
		if c.port, err = freePort(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		if lastErr = c.Start(); lastErr == nil {
			return c, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// create runs initdb, as the postgres OS user when running as root.
func (c *LogicalCluster) create() error {
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root: run them as the
		// postgres OS user, in a directory it owns.
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root and no postgres OS user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(c.dir, uid, gid); err != nil {
			return err
		}
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	var out bytes.Buffer
	initdb := exec.Command(filepath.Join(c.bin, "initdb"), "-D", c.data, "-U", "postgres", "-A", "trust", "--no-sync", "--no-locale", "-E", "UTF8")
	initdb.Dir, initdb.Stdout, initdb.Stderr = c.dir, &out, &out
	initdb.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if err := initdb.Run(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, lastLines(out.Bytes()))
	}
	return nil
}

// URL returns the connection string of the cluster's postgres database,
// as the superuser postgres.
func (c *LogicalCluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Addr returns the server's host:port.
func (c *LogicalCluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// Dir returns the cluster's directory: the data directory "data" and the
// server's log, "postgres.log".
func (c *LogicalCluster) Dir() string { return c.dir }

// PID returns the postmaster's process id, or 0 while it is stopped.
func (c *LogicalCluster) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0
	}
	return c.proc.Pid
}

// Start starts the server on the cluster's data directory and port, and
// waits (at most a minute) until it accepts connections. It does nothing
// while the server runs.
func (c *LogicalCluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		select {
		case <-c.done: // it exited on its own
			close(c.quit)
			c.proc, c.done, c.quit = nil, nil, nil
		default:
			return nil
		}
	}
	logPath := filepath.Join(c.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the server has its own copy
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data, "-p", strconv.Itoa(c.port), "-h", "127.0.0.1", "-k", c.dir,
		"-c", "wal_level=logical", "-c", "max_wal_senders=64", "-c", "max_replication_slots=64", "-c", "max_connections=300", "-c", "fsync=off")
	cmd.Dir, cmd.Stdout, cmd.Stderr = c.dir, logFile, logFile
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	// Pdeathsig is sent when the thread that started the process exits:
	// the process is started from a goroutine locked to its thread, which
	// lives until Stop, so the server dies with the program.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT}
	started := make(chan error, 1)
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		go func() { _ = cmd.Wait(); close(done) }()
		<-quit
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	url := c.URL()
	// Wait until it accepts connections, or exits.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgconn.Connect(ctx, url)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			c.proc, c.done, c.quit = cmd.Process, done, quit
			return nil
		}
		select {
		case <-done:
			close(quit)
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited: %s", lastLines(log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			close(quit)
			return fmt.Errorf("postgres did not accept connections in 60 s: %v", err)
		}
	}
}

// Stop stops the server by its PID with SIGINT (a fast shutdown: open
// transactions roll back, sessions end, the data directory is left
// consistent), or SIGQUIT if it has not exited in 30 s, and waits for it
// to exit. It does nothing while the server is stopped.
func (c *LogicalCluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	var err error
	if e := c.proc.Signal(syscall.SIGINT); e != nil && !errors.Is(e, os.ErrProcessDone) {
		err = e
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.proc.Signal(syscall.SIGQUIT)
		<-c.done
		err = errors.New("postgres did not stop within 30 s of SIGINT; sent SIGQUIT")
	}
	close(c.quit)
	c.proc, c.done, c.quit = nil, nil, nil
	return err
}

// Restart stops the server (Stop) and starts it again on the same data
// directory and port (Start).
func (c *LogicalCluster) Restart() error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.Start()
}

// Close stops the server (Stop) and removes the cluster's directory.
func (c *LogicalCluster) Close() error {
	err := c.Stop()
	return errors.Join(err, os.RemoveAll(c.dir))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(b []byte) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

// LogicalSchema is PostgresSchema on LogicalURL's server: a pool whose
// search_path is a fresh schema of the test's own. When the test ends, the
// replication slots and publications whose names start with the schema's
// name go (their WAL senders ended first), then the schema.
func LogicalSchema(t testing.TB, tune func(cfg *pgxpool.Config)) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := LogicalURL(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("testenv: logical server URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		Missing(t, fmt.Sprintf("the Postgres with wal_level=logical is not reachable: %v", err), "set "+LogicalURLEnv)
		return nil, ""
	}
	defer admin.Close(context.Background())
	schema := SchemaPrefix + randomName(12)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() { dropLogical(t, cfg.ConnConfig, schema) })
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
	t.Cleanup(pool.Close)
	return pool, schema
}

// dropLogical drops the slots and publications named after schema, then
// the schema.
func dropLogical(t testing.TB, cc *pgx.ConnConfig, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Errorf("testenv: drop %s: %v", schema, err)
		return
	}
	defer conn.Close(context.Background())
	like := schema + "%"
	// A WAL sender lingers a moment after its client goes: end it, and
	// wait (server-side) until its slot is free.
	for attempt := 0; ; attempt++ {
		var busy bool
		err := conn.QueryRow(ctx, `SELECT count(pg_catalog.pg_terminate_backend(active_pid, 1000)) >= 0 AND coalesce(bool_or(active), false)
FROM pg_catalog.pg_replication_slots WHERE slot_name LIKE $1`, like).Scan(&busy)
		if err != nil {
			t.Errorf("testenv: drop slots of %s: %v", schema, err)
			return
		}
		if !busy {
			break
		}
		if attempt == 100 {
			t.Errorf("testenv: the slots of %s stay active", schema)
			return
		}
	}
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots WHERE slot_name LIKE $1`, like); err != nil {
		t.Errorf("testenv: drop slots of %s: %v", schema, err)
	}
	rows, err := conn.Query(ctx, `SELECT pubname FROM pg_catalog.pg_publication WHERE pubname LIKE $1`, like)
	if err != nil {
		t.Errorf("testenv: publications of %s: %v", schema, err)
		return
	}
	pubs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Errorf("testenv: publications of %s: %v", schema, err)
		return
	}
	for _, p := range pubs {
		if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{p}.Sanitize()); err != nil {
			t.Errorf("testenv: drop publication %s: %v", p, err)
		}
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("testenv: drop schema %s: %v", schema, err)
	}
}
