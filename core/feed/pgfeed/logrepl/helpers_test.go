package logrepl

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// hang bounds how long a test waits for something that should come: a
// guard against a test that would hang, not a timed assertion.
const hang = 60 * time.Second

// env is one test's corner of the logical server: a schema of its own for
// its tables, and a slot and a publication named after it.
type env struct {
	t      testing.TB
	url    string
	pool   *pgxpool.Pool // search_path: schema
	schema string
	slot   string
	pub    string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url := logicalURL(t)
	name := "lr_" + strings.ToLower(rand.Text()[:10])
	e := &env{t: t, url: url, schema: name, slot: name, pub: name}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		e.waitSlotFree(conn)
		if err := DropSlot(ctx, conn, e.slot); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := DropPublication(ctx, conn, e.pub); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	cfg.MaxConns = 16
	e.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	return e
}

// exec runs each statement in a transaction of its own.
func (e *env) exec(stmts ...string) {
	e.t.Helper()
	for _, s := range stmts {
		if _, err := e.pool.Exec(context.Background(), s); err != nil {
			e.t.Fatalf("%s: %v", s, err)
		}
	}
}

// setup publishes tables and makes the slot.
func (e *env) setup(tables ...string) {
	e.t.Helper()
	ctx := context.Background()
	if err := EnsurePublication(ctx, e.pool, e.pub, tables); err != nil {
		e.t.Fatal(err)
	}
	if _, err := EnsureSlot(ctx, e.pool, e.slot); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) consumer(tune func(*Config)) *Consumer {
	e.t.Helper()
	cfg := Config{ConnString: e.url, Slot: e.slot, Publication: e.pub}
	if tune != nil {
		tune(&cfg)
	}
	c, err := NewConsumer(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// waitSlotFree waits until no connection streams from the slot: a server
// releases it a moment after a consumer's connection ends without ending
// its stream, and the next consumer must wait for that (as a real one
// retries on ErrSlotInUse).
func (e *env) waitSlotFree(db DB) {
	e.t.Helper()
	if db == nil {
		db = e.pool
	}
	ctx := context.Background()
	deadline := time.Now().Add(hang)
	for {
		var pid *int32
		err := db.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && pid == nil {
			return
		}
		if err != nil {
			e.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("slot %s still active after %s", e.slot, hang)
		}
		// The consumer has returned, its end of stream acknowledged: the
		// WAL sender only waits for the session to go. End it and wait,
		// server-side, until it is gone.
		if _, err := db.Exec(ctx, "SELECT pg_terminate_backend($1, $2)", *pid, hang.Milliseconds()); err != nil {
			e.t.Fatal(err)
		}
	}
}

// runner runs a Consumer in the background.
type runner struct {
	t      testing.TB
	txs    chan *Tx
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
}

// start runs c with h, or, when h is nil, with a handler that accepts
// every Tx and hands it to next.
func (e *env) start(c *Consumer, h Handler) *runner {
	e.t.Helper()
	return e.run(func(ctx context.Context, r *runner) error {
		if h == nil {
			h = func(_ context.Context, tx *Tx) error { r.txs <- tx; return nil }
		}
		return c.Run(ctx, h)
	})
}

// startBatches runs c.RunBatches with h in the background.
func (e *env) startBatches(c *Consumer, h BatchHandler) *runner {
	e.t.Helper()
	return e.run(func(ctx context.Context, _ *runner) error { return c.RunBatches(ctx, h) })
}

// run runs run in the background, once the slot is free.
func (e *env) run(run func(context.Context, *runner) error) *runner {
	e.t.Helper()
	e.waitSlotFree(nil)
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{t: e.t, txs: make(chan *Tx, 1<<16), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx, r) }()
	e.t.Cleanup(func() { r.stop() })
	return r
}

// next returns the next Tx the default handler accepted.
func (r *runner) next() *Tx {
	r.t.Helper()
	select {
	case tx := <-r.txs:
		return tx
	case err := <-r.done:
		r.ended, r.err = true, err
		r.t.Fatalf("Run returned while a transaction was awaited: %v", err)
	case <-time.After(hang):
		r.t.Fatalf("no transaction in %s", hang)
	}
	return nil
}

// wait returns Run's error once it has returned by itself.
func (r *runner) wait() error {
	r.t.Helper()
	if r.ended {
		return r.err
	}
	select {
	case r.err = <-r.done:
	case <-time.After(hang):
		r.t.Fatalf("Run did not return in %s", hang)
	}
	r.ended = true
	return r.err
}

// stop ends Run and returns its error.
func (r *runner) stop() error {
	r.cancel()
	if !r.ended {
		r.err = <-r.done
		r.ended = true
	}
	return r.err
}

// show writes a change as text for comparisons: "insert s.a id=1 v=x",
// with " old: ..." for the old row.
func show(c Change) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", c.Op, c.Table[strings.IndexByte(c.Table, '.')+1:])
	row := func(cols []Column, keyOnly bool) {
		for _, col := range cols {
			switch {
			case keyOnly && !col.Key:
			case col.Unchanged:
				fmt.Fprintf(&b, " %s=<unchanged>", col.Name)
			case col.Value == nil:
				fmt.Fprintf(&b, " %s=NULL", col.Name)
			default:
				v := *col.Value
				if len(v) > 20 {
					v = fmt.Sprintf("<%d bytes>", len(v))
				}
				fmt.Fprintf(&b, " %s=%s", col.Name, v)
			}
		}
	}
	row(c.New, false)
	if c.Old != nil {
		if c.OldKeyOnly {
			b.WriteString(" key:")
		} else {
			b.WriteString(" old:")
		}
		row(c.Old, c.OldKeyOnly)
	}
	return b.String()
}

func showTx(tx *Tx) []string {
	out := make([]string, len(tx.Changes))
	for i, c := range tx.Changes {
		out[i] = show(c)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// expect checks that the next transaction is changes, whole.
func (r *runner) expect(changes ...string) *Tx {
	r.t.Helper()
	tx := r.next()
	if got := showTx(tx); !equal(got, changes) {
		r.t.Fatalf("transaction %d:\n got  %q\n want %q", tx.XID, got, changes)
	}
	if tx.More || tx.Part != 0 {
		r.t.Fatalf("transaction %d: Part %d, More %v; want a whole transaction", tx.XID, tx.Part, tx.More)
	}
	if tx.EndLSN <= tx.CommitLSN || tx.CommitTime.IsZero() {
		r.t.Fatalf("transaction %d: CommitLSN %s, EndLSN %s, CommitTime %v", tx.XID, FormatLSN(tx.CommitLSN), FormatLSN(tx.EndLSN), tx.CommitTime)
	}
	return tx
}
