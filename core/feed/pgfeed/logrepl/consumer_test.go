package logrepl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Inserts, updates and deletes across two tables, in several
// transactions, arrive whole and in commit order.
func TestTransactionsArriveWholeInOrder(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY, v text)", "CREATE TABLE b (id int PRIMARY KEY, n int)")
	e.setup("a", "b")
	r := e.start(e.consumer(nil), nil)

	ctx := context.Background()
	tx := func(stmts ...string) {
		t.Helper()
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			for _, s := range stmts {
				if _, err := tx.Exec(ctx, s); err != nil {
					return fmt.Errorf("%s: %w", s, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	tx("INSERT INTO a VALUES (1, 'x'), (2, NULL)", "INSERT INTO b VALUES (1, 10)")
	tx("UPDATE a SET v = 'y' WHERE id = 1", "DELETE FROM b WHERE id = 1", "INSERT INTO b VALUES (2, 20)")
	tx("DELETE FROM a WHERE id = 2")
	tx("UPDATE a SET id = 3 WHERE id = 1") // a key change sends the old key
	tx("TRUNCATE b")

	first := r.expect("insert a id=1 v=x", "insert a id=2 v=NULL", "insert b id=1 n=10")
	second := r.expect("update a id=1 v=y", "delete b key: id=1", "insert b id=2 n=20")
	r.expect("delete a key: id=2")
	r.expect("update a id=3 v=y key: id=1")
	last := r.expect("truncate b")
	if !(first.EndLSN <= second.CommitLSN && second.CommitLSN < last.CommitLSN) {
		t.Fatalf("positions out of order: %s, %s, %s", FormatLSN(first.EndLSN), FormatLSN(second.CommitLSN), FormatLSN(last.CommitLSN))
	}
	if c := first.Changes[0]; c.Table != e.schema+".a" || c.New[0].Type != 23 || c.New[1].Type != 25 || !c.New[0].Key || c.New[1].Key {
		t.Fatalf("first change: table %q, columns %+v", c.Table, c.New)
	}
}

// Two transactions that commit in the opposite order of their start
// arrive in commit order, each whole.
func TestOppositeCommitOrder(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY, v text)", "CREATE TABLE b (id int PRIMARY KEY, n int)")
	e.setup("a", "b")
	r := e.start(e.consumer(nil), nil)
	ctx := context.Background()
	first, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		tx  pgx.Tx
		sql string
	}{
		{first, "INSERT INTO a VALUES (1, 'first')"},
		{second, "INSERT INTO a VALUES (2, 'second')"},
		{first, "INSERT INTO b VALUES (1, 1)"},
		{second, "INSERT INTO b VALUES (2, 2)"},
		{first, "UPDATE a SET v = 'first again' WHERE id = 1"},
	} {
		if _, err := w.tx.Exec(ctx, w.sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := second.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s := r.expect("insert a id=2 v=second", "insert b id=2 n=2")
	f := r.expect("insert a id=1 v=first", "insert b id=1 n=1", "update a id=1 v=first again")
	if f.XID >= s.XID {
		t.Fatalf("the first transaction has xid %d, the second %d: they did not start in that order", f.XID, s.XID)
	}
}

// Concurrent transactions interleave their writes and commit in an order
// unrelated to the order they started in, some roll back: the committed
// ones arrive whole, each once, in commit order; the rolled-back ones
// never. Seeded: the seed is in the test's name.
func TestConcurrentTransactionsArriveInCommitOrder(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			testConcurrent(t, seed)
		})
	}
}

func testConcurrent(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY, v text)", "CREATE TABLE b (id int PRIMARY KEY, n int)")
	e.setup("a", "b")
	r := e.start(e.consumer(nil), nil)
	ctx := context.Background()

	type open struct {
		tx     pgx.Tx
		writes []string
	}
	const total = 12
	var opened []*open
	var committed [][]string
	started, id := 0, 0
	for started < total || len(opened) > 0 {
		switch k := rng.IntN(4); {
		case started < total && (len(opened) == 0 || k == 0):
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			opened = append(opened, &open{tx: tx})
			started++
		case k <= 2: // a write in a random open transaction
			o := opened[rng.IntN(len(opened))]
			id++
			var sql, want string
			if rng.IntN(2) == 0 {
				sql, want = fmt.Sprintf("INSERT INTO a VALUES (%d, 'v%d')", id, id), fmt.Sprintf("insert a id=%d v=v%d", id, id)
			} else {
				sql, want = fmt.Sprintf("INSERT INTO b VALUES (%d, %d)", id, id*10), fmt.Sprintf("insert b id=%d n=%d", id, id*10)
			}
			if _, err := o.tx.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
			o.writes = append(o.writes, want)
		default: // end a random open transaction
			i := rng.IntN(len(opened))
			o := opened[i]
			opened = append(opened[:i], opened[i+1:]...)
			if rng.IntN(4) == 0 {
				if err := o.tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := o.tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if len(o.writes) > 0 {
				committed = append(committed, o.writes)
			}
		}
	}
	// A last transaction marks the end: nothing may come between.
	e.exec("INSERT INTO a VALUES (0, 'end')")
	committed = append(committed, []string{"insert a id=0 v=end"})
	var prev uint64
	for i, want := range committed {
		tx := r.expect(want...)
		if tx.CommitLSN <= prev {
			t.Fatalf("transaction %d at %s after one at %s", i, FormatLSN(tx.CommitLSN), FormatLSN(prev))
		}
		prev = tx.CommitLSN
	}
	select {
	case tx := <-r.txs:
		t.Fatalf("unexpected transaction %q", showTx(tx))
	default:
	}
}

// A rolled-back transaction never arrives; the next committed one does.
func TestRollbackNeverArrives(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY, v text)")
	e.setup("a")
	r := e.start(e.consumer(nil), nil)
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO a VALUES (1, 'rolled back')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.exec("INSERT INTO a VALUES (2, 'kept')", "INSERT INTO a VALUES (3, 'kept')")
	r.expect("insert a id=2 v=kept")
	r.expect("insert a id=3 v=kept")
}

// A consumer whose handler fails mid-stream stops; the next Run starts
// with the transaction that failed: nothing accepted comes again, nothing
// is lost.
func TestResumeAfterHandlerError(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY)")
	e.setup("a")
	for i := 1; i <= 10; i++ {
		e.exec(fmt.Sprintf("INSERT INTO a VALUES (%d)", i))
	}
	boom := errors.New("boom")
	var accepted []string
	c := e.consumer(nil)
	r := e.start(c, func(_ context.Context, tx *Tx) error {
		s := showTx(tx)[0]
		if s == "insert a id=5" {
			return boom
		}
		accepted = append(accepted, s)
		return nil
	})
	if err := r.wait(); !errors.Is(err, boom) {
		t.Fatalf("Run: %v; want the handler's error", err)
	}
	if want := []string{"insert a id=1", "insert a id=2", "insert a id=3", "insert a id=4"}; !equal(accepted, want) {
		t.Fatalf("accepted %q, want %q", accepted, want)
	}
	f, err := c.Figures(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.Flushed != f.Confirmed || f.Slot.ConfirmedFlushLSN != f.Confirmed || f.Transactions != 4 || f.Changes != 4 {
		t.Fatalf("figures after the stop: %+v", f)
	}

	r2 := e.start(e.consumer(nil), nil)
	for i := 5; i <= 10; i++ {
		r2.expect(fmt.Sprintf("insert a id=%d", i))
	}
}

// A consumer that dies (no last status report, no orderly end) loses
// nothing: the next Run delivers every transaction after the last
// position the server was told, so the accepted but unreported ones come
// again (at least once), and nothing before them does.
func TestResumeAfterCrash(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY)")
	e.setup("a")
	ctx := context.Background()

	// The first consumer accepts ids 1..3 and reports them (its Run ends
	// in order), then the second accepts 4..7 and dies on 8.
	for i := 1; i <= 3; i++ {
		e.exec(fmt.Sprintf("INSERT INTO a VALUES (%d)", i))
	}
	stop := errors.New("stop")
	r := e.start(e.consumer(nil), func(_ context.Context, tx *Tx) error {
		if showTx(tx)[0] == "insert a id=3" {
			return stop
		}
		return nil
	})
	if err := r.wait(); !errors.Is(err, stop) {
		t.Fatal(err)
	}
	for i := 3; i <= 10; i++ {
		if i > 3 {
			e.exec(fmt.Sprintf("INSERT INTO a VALUES (%d)", i))
		}
	}
	c := e.consumer(func(c *Config) { c.StatusInterval = hang }) // no report before the crash
	c.crash, c.progress = true, hang
	var seen []string
	r = e.start(c, func(_ context.Context, tx *Tx) error {
		s := showTx(tx)[0]
		if s == "insert a id=8" {
			return stop
		}
		seen = append(seen, s)
		return nil
	})
	if err := r.wait(); !errors.Is(err, stop) {
		t.Fatal(err)
	}
	if want := []string{"insert a id=3", "insert a id=4", "insert a id=5", "insert a id=6", "insert a id=7"}; !equal(seen, want) {
		t.Fatalf("second consumer saw %q, want %q", seen, want)
	}
	f, err := c.Figures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Flushed >= f.Confirmed {
		t.Fatalf("the crashed consumer reported %s, confirmed %s: the test needs an unreported tail", FormatLSN(f.Flushed), FormatLSN(f.Confirmed))
	}

	r = e.start(e.consumer(nil), nil)
	for i := 3; i <= 10; i++ {
		r.expect(fmt.Sprintf("insert a id=%d", i))
	}
}

// With REPLICA IDENTITY FULL, updates and deletes carry the whole old row;
// without it, deletes carry the key and updates nothing old. An unchanged
// TOASTed value is marked as such, and the old row has it.
func TestOldRows(t *testing.T) {
	e := newEnv(t)
	e.exec(
		"CREATE TABLE full_t (id int PRIMARY KEY, project text, big text)",
		"CREATE TABLE key_t (id int PRIMARY KEY, project text, big text)",
	)
	ctx := context.Background()
	if err := SetReplicaIdentityFull(ctx, e.pool, "full_t"); err != nil {
		t.Fatal(err)
	}
	if err := SetReplicaIdentityFull(ctx, e.pool, e.schema+".full_t"); err != nil { // again: nothing to do
		t.Fatal(err)
	}
	e.setup("full_t", "key_t")
	r := e.start(e.consumer(nil), nil)
	// big is stored out of line (TOAST): 20 kB of incompressible text.
	big := "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 625) i)"
	for _, tb := range []string{"full_t", "key_t"} {
		e.exec(
			"INSERT INTO "+tb+" VALUES (1, 'p1', "+big+")",
			"UPDATE "+tb+" SET project = 'p2' WHERE id = 1", // moves the row to another scope
			"DELETE FROM "+tb+" WHERE id = 1",
		)
	}
	r.expect("insert full_t id=1 project=p1 big=<20000 bytes>")
	r.expect("update full_t id=1 project=p2 big=<unchanged> old: id=1 project=p1 big=<20000 bytes>")
	r.expect("delete full_t old: id=1 project=p2 big=<20000 bytes>")
	r.expect("insert key_t id=1 project=p1 big=<20000 bytes>")
	r.expect("update key_t id=1 project=p2 big=<unchanged>")
	r.expect("delete key_t key: id=1")
}

// A transaction larger than the piece limits arrives in pieces, in order,
// and counts as accepted only with its last piece: a failure on a middle
// piece brings the whole transaction again from its first.
func TestLargeTransactionInPieces(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY)")
	e.setup("a")
	e.exec("INSERT INTO a SELECT generate_series(1, 1050)", "INSERT INTO a VALUES (0)")
	small := func(c *Config) { c.MaxPieceChanges = 100 }

	check := func(tx *Tx, part int) {
		t.Helper()
		n := 100
		if part == 10 {
			n = 50
		}
		if tx.Part != part || tx.More != (part < 10) || len(tx.Changes) != n {
			t.Fatalf("piece %d: Part %d, More %v, %d changes", part, tx.Part, tx.More, len(tx.Changes))
		}
		if got, want := show(tx.Changes[0]), fmt.Sprintf("insert a id=%d", part*100+1); got != want {
			t.Fatalf("piece %d starts with %q, want %q", part, got, want)
		}
		if tx.More != (tx.EndLSN == 0) {
			t.Fatalf("piece %d: EndLSN %s", part, FormatLSN(tx.EndLSN))
		}
	}
	failed := errors.New("fail on piece 5")
	var parts []int
	r := e.start(e.consumer(small), func(_ context.Context, tx *Tx) error {
		if tx.Part == 5 {
			return failed
		}
		check(tx, tx.Part)
		parts = append(parts, tx.Part)
		return nil
	})
	if err := r.wait(); !errors.Is(err, failed) {
		t.Fatal(err)
	}
	if len(parts) != 5 {
		t.Fatalf("pieces before the failure: %v", parts)
	}
	r = e.start(e.consumer(small), nil)
	var xid uint32
	for part := range 11 {
		tx := r.next()
		check(tx, part)
		if part == 0 {
			xid = tx.XID
		} else if tx.XID != xid {
			t.Fatalf("piece %d of transaction %d, want %d", part, tx.XID, xid)
		}
	}
	r.expect("insert a id=0")
}

// The consumer's and the slot's figures.
func TestFigures(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY, v text)")
	e.setup("a")
	c := e.consumer(nil)
	ctx := context.Background()
	f, err := c.Figures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Slot.Active || f.Slot.CurrentLSN < f.Slot.ConfirmedFlushLSN || f.Slot.RetainedBytes < 0 || f.Transactions != 0 {
		t.Fatalf("figures of a new slot: %+v", f)
	}
	e.exec("INSERT INTO a SELECT i, repeat('x', 100) FROM generate_series(1, 1000) i")
	r := e.start(c, nil)
	tx := r.expect(func() []string {
		var s []string
		for i := 1; i <= 1000; i++ {
			s = append(s, fmt.Sprintf("insert a id=%d v=<100 bytes>", i))
		}
		return s
	}()...)
	f, err = c.Figures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Slot.Active || f.Confirmed < tx.EndLSN || f.ServerWALEnd < tx.EndLSN || f.Transactions != 1 || f.Changes != 1000 || !f.LastCommit.Equal(tx.CommitTime) {
		t.Fatalf("figures while running: %+v", f)
	}
	if err := r.stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	f, err = c.Figures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Slot.Active || f.Flushed != f.Confirmed || f.Slot.ConfirmedFlushLSN != f.Confirmed || f.Slot.LagBytes != int64(f.Slot.CurrentLSN-f.Confirmed) ||
		f.Slot.RetainedBytes != int64(f.Slot.CurrentLSN-f.Slot.RestartLSN) {
		t.Fatalf("figures after the stop: %+v", f)
	}
}

// Setup is idempotent, follows the table set, and refuses bad names.
func TestSetup(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)", `CREATE TABLE "C c" (id int PRIMARY KEY)`)
	ctx := context.Background()
	tables := func() string {
		t.Helper()
		got, err := PublicationTables(ctx, e.pool, e.pub)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, ",")
	}
	s := e.schema
	for _, step := range []struct {
		tables []string
		want   string
	}{
		{[]string{"a", "b"}, s + ".a," + s + ".b"},
		{[]string{"a", "b"}, s + ".a," + s + ".b"},
		{[]string{s + ".b", `"C c"`}, s + ".C c," + s + ".b"},
		{nil, ""},
		{[]string{"a"}, s + ".a"},
	} {
		if err := EnsurePublication(ctx, e.pool, e.pub, step.tables); err != nil {
			t.Fatalf("EnsurePublication(%q): %v", step.tables, err)
		}
		if got := tables(); got != step.want {
			t.Fatalf("EnsurePublication(%q): tables %q, want %q", step.tables, got, step.want)
		}
	}
	e.exec("ALTER PUBLICATION " + e.pub + " SET (publish = 'insert')")
	if err := EnsurePublication(ctx, e.pool, e.pub, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	var publishes string
	if err := e.pool.QueryRow(ctx, "SELECT concat_ws(',', pubinsert, pubupdate, pubdelete, pubtruncate) FROM pg_publication WHERE pubname = $1", e.pub).Scan(&publishes); err != nil || publishes != "t,t,t,t" {
		t.Fatalf("publication publishes %s (%v), want every kind of change", publishes, err)
	}
	if err := EnsurePublication(ctx, e.pool, e.pub, []string{"nope"}); !errors.Is(err, ErrNoTable) {
		t.Fatalf("missing table: %v", err)
	}
	if err := SetReplicaIdentityFull(ctx, e.pool, "nope"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("missing table: %v", err)
	}
	for _, name := range []string{"", "Upper", "has-dash", "a b", strings.Repeat("x", 64)} {
		if err := EnsurePublication(ctx, e.pool, name, nil); !errors.Is(err, ErrBadName) {
			t.Fatalf("publication %q: %v", name, err)
		}
		if _, err := EnsureSlot(ctx, e.pool, name); !errors.Is(err, ErrBadName) {
			t.Fatalf("slot %q: %v", name, err)
		}
		if _, err := NewConsumer(Config{ConnString: e.url, Slot: name, Publication: e.pub}); !errors.Is(err, ErrBadName) {
			t.Fatalf("consumer of slot %q: %v", name, err)
		}
	}
	if _, err := NewConsumer(Config{Slot: e.slot, Publication: e.pub}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no ConnString: %v", err)
	}

	// A consumer of a slot that does not exist yet.
	if err := e.consumer(nil).Run(ctx, nil); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("Run without a slot: %v", err)
	}
	created, err := EnsureSlot(ctx, e.pool, e.slot)
	if err != nil || !created {
		t.Fatalf("EnsureSlot: %v, %v", created, err)
	}
	created, err = EnsureSlot(ctx, e.pool, e.slot)
	if err != nil || created {
		t.Fatalf("EnsureSlot again: %v, %v", created, err)
	}

	// One Run at a time, per consumer and per slot; a slot in use is not
	// dropped.
	c := e.consumer(nil)
	r := e.start(c, nil)
	e.exec("INSERT INTO a VALUES (1)")
	r.expect("insert a id=1") // streaming
	if err := c.Run(ctx, nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Run: %v", err)
	}
	if err := e.consumer(nil).Run(ctx, nil); !errors.Is(err, ErrSlotInUse) {
		t.Fatalf("second consumer: %v", err)
	}
	if err := DropSlot(ctx, e.pool, e.slot); !errors.Is(err, ErrSlotInUse) {
		t.Fatalf("DropSlot in use: %v", err)
	}
	r.stop()
	e.waitSlotFree(nil)
	if err := DropSlot(ctx, e.pool, e.slot); err != nil {
		t.Fatal(err)
	}
	if err := DropSlot(ctx, e.pool, e.slot); err != nil {
		t.Fatalf("DropSlot again: %v", err)
	}
	if _, err := ReadSlot(ctx, e.pool, e.slot); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("ReadSlot after drop: %v", err)
	}
}

// While the published tables are quiet, the slot still follows the
// server's WAL: writes to other tables are not kept for the consumer.
func TestSlotFollowsQuietConsumer(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE other (id int PRIMARY KEY, v text)")
	e.setup("a")
	e.exec("INSERT INTO a VALUES (1)")
	c := e.consumer(nil)
	seen := make(chan uint64, 1024)
	c.onKeepalive = func(confirmed uint64) {
		select {
		case seen <- confirmed:
		default:
		}
	}
	r := e.start(c, nil)
	first := r.expect("insert a id=1")

	e.exec("INSERT INTO other SELECT i, repeat('x', 100) FROM generate_series(1, 10000) i")
	var target uint64
	var s string
	if err := e.pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	target = uint64(lsn)
	if target <= first.EndLSN+100*10000 {
		t.Fatalf("WAL end %s: the other table's rows are not past %s", s, FormatLSN(first.EndLSN))
	}
	deadline := time.After(hang)
	for confirmed := uint64(0); confirmed < target; {
		select {
		case confirmed = <-seen:
		case <-deadline:
			t.Fatalf("confirmed %s after %s, want at least %s", FormatLSN(confirmed), hang, s)
		}
	}
	if err := r.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	f, err := c.Figures(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.Slot.ConfirmedFlushLSN < target || f.Transactions != 1 {
		t.Fatalf("slot confirmed at %s, want at least %s: %+v", FormatLSN(f.Slot.ConfirmedFlushLSN), s, f)
	}
}

// A slot whose WAL the server removed (max_slot_wal_keep_size) has lost
// changes: setup and the consumer say so instead of streaming from it.
func TestSlotLost(t *testing.T) {
	if os.Getenv(logicalURLEnv) != "" {
		t.Skipf("changes the server's max_slot_wal_keep_size: only on the private cluster, not on %s", logicalURLEnv)
	}
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY, v text)")
	e.setup("a")
	ctx := context.Background()
	e.exec("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'", "SELECT pg_reload_conf()")
	t.Cleanup(func() {
		e.exec("ALTER SYSTEM RESET max_slot_wal_keep_size", "SELECT pg_reload_conf()")
	})
	// Past a few WAL segments, a checkpoint removes the slot's WAL.
	for i := range 4 {
		e.exec(fmt.Sprintf("INSERT INTO a VALUES (%d, 'x')", i), "SELECT pg_switch_wal()")
	}
	e.exec("CHECKPOINT")
	var status string
	if err := e.pool.QueryRow(ctx, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "lost" {
		t.Fatalf("wal_status %q after the checkpoint, want lost", status)
	}
	if _, err := EnsureSlot(ctx, e.pool, e.slot); !errors.Is(err, ErrSlotLost) {
		t.Fatalf("EnsureSlot: %v, want ErrSlotLost", err)
	}
	if err := e.consumer(nil).Run(ctx, nil); !errors.Is(err, ErrSlotLost) {
		t.Fatalf("Run: %v, want ErrSlotLost", err)
	}
	// The way out: drop it and make it anew.
	e.waitSlotFree(nil)
	if err := DropSlot(ctx, e.pool, e.slot); err != nil {
		t.Fatal(err)
	}
	if created, err := EnsureSlot(ctx, e.pool, e.slot); err != nil || !created {
		t.Fatalf("EnsureSlot after the drop: %v, %v", created, err)
	}
}

// RunBatches gathers whole transactions in commit order until a batch
// holds MaxBatchChanges changes (here with no time bound, so that only
// that cuts a batch), ends a batch with each piece of a split transaction
// but its last, and after a handler error delivers the whole failed batch
// again, the split transaction from its first piece.
func TestBatches(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY)")
	e.setup("a")
	id := 0
	insert := func(rows int) {
		e.exec(fmt.Sprintf("INSERT INTO a SELECT generate_series(%d, %d)", id+1, id+rows))
		id += rows
	}
	for range 7 {
		insert(1)
	}
	insert(4) // the batch reaches 11 changes
	for range 9 {
		insert(1)
	}
	insert(25) // pieces of 10, 10 and 5
	insert(5)

	tune := func(c *Config) {
		c.MaxBatchChanges, c.MaxPieceChanges, c.BatchWait = 10, 10, hang
	}
	// show writes a batch as its transactions' sizes, a piece as
	// "size/part+" ("+" when more follow).
	show := func(txs []*Tx) string {
		var out []string
		for _, tx := range txs {
			s := fmt.Sprint(len(tx.Changes))
			if tx.Part > 0 || tx.More {
				s += fmt.Sprintf("/%d", tx.Part)
			}
			if tx.More {
				s += "+"
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	batches := make(chan string, 100)
	var last []*Tx
	failed := errors.New("fail the batch after the split transaction")
	c := e.consumer(tune)
	c.grace = hang
	r := e.startBatches(c, func(_ context.Context, txs []*Tx) error {
		if len(txs) > 0 && txs[0].Part == 2 {
			return failed
		}
		last = txs
		batches <- show(txs)
		return nil
	})
	if err := r.wait(); !errors.Is(err, failed) {
		t.Fatalf("RunBatches: %v; want the handler's error", err)
	}
	close(batches)
	var got []string
	for b := range batches {
		got = append(got, b)
	}
	if want := []string{"1 1 1 1 1 1 1 4", "1 1 1 1 1 1 1 1 1 10/0+", "10/1+"}; !equal(got, want) {
		t.Fatalf("batches %q, want %q", got, want)
	}
	// 17 whole transactions taken (ids 1..20) and two pieces of the split
	// one, whose position is not confirmed.
	f, err := c.Figures(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.Transactions != 17 || f.Changes != 40 || f.Confirmed != f.Flushed || f.Confirmed >= last[0].CommitLSN {
		t.Fatalf("figures after the failure: %+v (the split transaction commits at %s)", f, FormatLSN(last[0].CommitLSN))
	}

	// Again, from the split transaction's first piece.
	batches = make(chan string, 100)
	c = e.consumer(tune)
	c.grace = hang
	var ids []string
	e.startBatches(c, func(_ context.Context, txs []*Tx) error {
		for _, tx := range txs {
			ids = append(ids, showTx(tx)[0])
		}
		batches <- show(txs)
		return nil
	})
	for _, want := range []string{"10/0+", "10/1+", "5/2 5"} {
		select {
		case got := <-batches:
			if got != want {
				t.Fatalf("batch %q after the restart, want %q (so far %q)", got, want, ids)
			}
		case <-time.After(hang):
			t.Fatalf("no batch %q in %s", want, hang)
		}
	}
	if want := []string{"insert a id=21", "insert a id=31", "insert a id=41", "insert a id=46"}; !equal(ids, want) {
		t.Fatalf("first changes %q, want %q", ids, want)
	}
}
