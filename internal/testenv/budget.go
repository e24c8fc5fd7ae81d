package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPoolSize is the MaxConns of a test's pool (Postgres,
// PostgresSchema, PostgresConfig) unless its tune function sets another,
// whatever the number of CPUs: pgxpool's own default grows with them.
const DefaultPoolSize = 4

// The connection budget of the tests that ask PoolSize for a big pool.
const (
	// lightReserve is kept free for everything else the suite runs at the
	// same time: the other packages' tests, each with a pool of
	// DefaultPoolSize and its feed's own connections (listener, sequencer).
	lightReserve = 24
	// minPoolSize is the least PoolSize grants (or want, if smaller), so
	// a test that needs a few connections at once (concurrent migrations,
	// a transaction held open while others commit) always has them; a
	// test that gets fewer than it asked waits in pgxpool's Acquire.
	minPoolSize = 12
	// heavyLockKey is the advisory lock that lets one process at a time
	// hold big pools (any value; the suite's own).
	heavyLockKey = 0x7469646562756467 // "tidebudg"
)

// heavy is this process's share of the budget.
var heavy struct {
	mu      sync.Mutex
	lock    *pgx.Conn // holds heavyLockKey while holders > 0
	holders int       // tests between PoolSize and their end
	granted int       // connections granted to those tests
}

// PoolSize returns how many connections t's pool may hold: want, or fewer
// when the server has fewer free. Every test whose pool holds more than
// DefaultPoolSize connections sizes it with PoolSize:
//
//	pool, name := testenv.PostgresConfig(t, func(c *pgxpool.Config) {
//		c.MaxConns = testenv.PoolSize(t, 44)
//	})
//
// The budget is one for the whole suite and everything else on the
// server: such tests run one process (test binary) at a time, holding a
// session advisory lock from the first PoolSize call of a process to the
// end of its last such test, and share what is free when the process
// takes the lock. What is free is max_connections less the connections
// open (pg_stat_activity), less a reserve for the suite's other tests;
// of that a process's tests take at most half, leaving the rest to
// others, and never less than min(want, 12). A test must therefore work,
// if more slowly, with any pool of at least that size. The choice is
// logged.
func PoolSize(t testing.TB, want int) int32 {
	t.Helper()
	if want <= minPoolSize {
		return int32(max(want, 1))
	}
	heavy.mu.Lock()
	defer heavy.mu.Unlock()
	if heavy.holders == 0 {
		heavy.lock = lockBudget(t)
	}
	heavy.holders++
	total, open := serverConnections(t, heavy.lock)
	size := budgetSize(want, total, open, heavy.granted)
	heavy.granted += size
	t.Logf("testenv: a pool of %d connections (asked for %d; the server has %d of %d in use)", size, want, open, total)
	t.Cleanup(func() {
		heavy.mu.Lock()
		defer heavy.mu.Unlock()
		heavy.granted -= size
		heavy.holders--
		if heavy.holders == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			heavy.lock.Close(ctx) // ends the session: releases the lock
			heavy.lock = nil
		}
	})
	return int32(size)
}

// budgetSize is PoolSize's choice for want, with total connections on the
// server, open of them open and granted granted to this process's other
// big pools.
func budgetSize(want, total, open, granted int) int {
	free := total - open - lightReserve - granted
	return min(want, max(free/2, minPoolSize))
}

// lockBudget connects and waits for the budget's advisory lock, which the
// returned session holds until it closes.
func lockBudget(t testing.TB) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("testenv: %s: %v", DatabaseURLEnv, err)
	}
	cfg.RuntimeParams["application_name"] = "tide-test connection budget"
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		unavailable(t, "Postgres", DatabaseURLEnv, redact(DatabaseURL()), err)
		return nil // not reached
	}
	// Another test binary may hold the lock for a whole heavy test: wait
	// up to this one's deadline.
	wait := 10 * time.Minute
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			wait = time.Until(dl) - 30*time.Second
		}
	}
	lctx, lcancel := context.WithTimeout(context.Background(), max(wait, time.Second))
	defer lcancel()
	if _, err := conn.Exec(lctx, "SELECT pg_advisory_lock($1)", int64(heavyLockKey)); err != nil {
		conn.Close(context.Background())
		t.Fatalf("testenv: waiting for the connection budget (another test process holds it): %v", err)
	}
	return conn
}

// serverConnections returns how many connections the server takes from
// clients that are not superusers (max_connections less the reserved
// ones) and how many are open.
func serverConnections(t testing.TB, conn *pgx.Conn) (total, open int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	err := conn.QueryRow(ctx, `SELECT
		current_setting('max_connections')::int
			- current_setting('superuser_reserved_connections')::int
			- coalesce(current_setting('reserved_connections', true)::int, 0),
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('client backend', 'walsender'))::int`).Scan(&total, &open)
	if err != nil {
		t.Fatalf("testenv: reading the server's connections: %v", err)
	}
	return total, open
}
