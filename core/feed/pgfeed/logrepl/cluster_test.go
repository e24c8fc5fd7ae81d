package logrepl

import (
	"bytes"
	"context"
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

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidesync/tide/internal/testenv"
)

// The tests need a Postgres with wal_level = logical. The shared test
// server does not have it (and must not be reconfigured), so unless
// TIDE_TEST_LOGICAL_DATABASE_URL names one, the tests start a private
// cluster of their own, once per test binary, on a free loopback port:
//
//	initdb -D $DIR/data -U postgres -A trust --no-sync --no-locale -E UTF8
//	postgres -D $DIR/data -p $PORT -h 127.0.0.1 -k $DIR \
//	    -c wal_level=logical -c max_wal_senders=4 -c max_replication_slots=4 -c fsync=off
//
// run as the postgres OS user when the tests run as root (initdb refuses
// root), from the binaries of $TIDE_TEST_PG_BIN (default
// /usr/lib/postgresql/15/bin). TestMain stops it (SIGINT to its own PID:
// a fast shutdown) and removes $DIR; if the test binary dies first, the
// server gets SIGQUIT from the kernel (Pdeathsig).

// Environment variables of the logical-replication tests.
const (
	logicalURLEnv = "TIDE_TEST_LOGICAL_DATABASE_URL"
	pgBinEnv      = "TIDE_TEST_PG_BIN"
	defaultPGBin  = "/usr/lib/postgresql/15/bin"
)

var cluster struct {
	once sync.Once
	url  string
	err  error

	dir  string
	proc *os.Process
	done chan struct{} // closed when the server process has exited
	quit chan struct{} // ends the goroutine whose thread started it
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopCluster()
	os.Exit(code)
}

// logicalURL returns the connection string of a Postgres with wal_level
// logical, starting the private cluster on first use. When there is none,
// the test is skipped with the reason, or fails in CI.
func logicalURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(logicalURLEnv); u != "" {
		return u
	}
	cluster.once.Do(func() { cluster.url, cluster.err = startCluster() })
	if cluster.err != nil {
		testenv.Missing(t, fmt.Sprintf("no Postgres with wal_level=logical: %v", cluster.err),
			fmt.Sprintf("set %s, or install Postgres 15 at %s or set %s", logicalURLEnv, defaultPGBin, pgBinEnv))
	}
	return cluster.url
}

func startCluster() (string, error) {
	bin := os.Getenv(pgBinEnv)
	if bin == "" {
		bin = defaultPGBin
	}
	for _, p := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			return "", fmt.Errorf("no %s: %w", p, err)
		}
	}
	base := "" // os.TempDir()
	if os.Geteuid() == 0 {
		base = "/tmp" // the postgres OS user must reach it: TMPDIR may be under /root
	}
	dir, err := os.MkdirTemp(base, "tide-logrepl-")
	if err != nil {
		return "", err
	}
	cluster.dir = dir
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root: run them as the
		// postgres OS user, in a directory it owns.
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", fmt.Errorf("running as root and no postgres OS user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return "", err
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	data := filepath.Join(dir, "data")
	var out bytes.Buffer
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "--no-locale", "-E", "UTF8")
	initdb.Dir, initdb.Stdout, initdb.Stderr = dir, &out, &out
	initdb.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := initdb.Run(); err != nil {
		return "", fmt.Errorf("initdb: %w: %s", err, lastLines(out.Bytes()))
	}

	var lastErr error
	for range 3 { // a free port may be taken before the server binds it
		port, err := freePort()
		if err != nil {
			return "", err
		}
		url, err := startPostgres(bin, dir, data, port, cred)
		if err == nil {
			return url, nil
		}
		lastErr = err
	}
	return "", lastErr
}

func startPostgres(bin, dir, data string, port int, cred *syscall.Credential) (string, error) {
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-h", "127.0.0.1", "-k", dir,
		"-c", "wal_level=logical", "-c", "max_wal_senders=4", "-c", "max_replication_slots=4", "-c", "fsync=off")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logFile, logFile
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	// Pdeathsig is sent when the thread that started the process exits:
	// the process is started from a goroutine locked to its thread, which
	// lives until stopCluster, so the server dies with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
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
		return "", fmt.Errorf("postgres: %w", err)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	// Wait until it accepts connections, or exits.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgconn.Connect(ctx, url)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			cluster.proc, cluster.done, cluster.quit = cmd.Process, done, quit
			return url, nil
		}
		select {
		case <-done:
			close(quit)
			log, _ := os.ReadFile(logPath)
			return "", fmt.Errorf("postgres exited: %s", lastLines(log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			close(quit)
			return "", fmt.Errorf("postgres did not accept connections in 60 s: %v", err)
		}
	}
}

// stopCluster stops the private cluster, if one was started, and removes
// its directory.
func stopCluster() {
	if cluster.proc != nil {
		_ = cluster.proc.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-cluster.done:
		case <-time.After(30 * time.Second):
			_ = cluster.proc.Signal(syscall.SIGQUIT)
			<-cluster.done
		}
		close(cluster.quit)
	}
	if cluster.dir != "" {
		_ = os.RemoveAll(cluster.dir)
	}
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
