package pgfeed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/pgfeed/logrepl"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

// TestLogicalRowsMatchTrigger: the same writes, captured at once by a
// trigger feed and a logical feed over one table, give change log rows
// that are equal byte for byte (resource, op, key, scope, data, origin,
// prev, their order within a transaction, and the transactions' order):
// for random rows of every column type, updates in place and across
// scopes, deletes, several changes to a row in one transaction, an
// unchanged TOASTed value, origins set and changed mid-transaction, a
// rolled-back savepoint and a rolled-back transaction. Its commit groups
// may join whole transactions, never split one.
func TestLogicalRowsMatchTrigger(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(seedOf(t), 2))
	pool, name := testenv.LogicalSchema(t, nil)
	ctx := testCtx(t)
	schema := &feed.Schema{Name: "mixed", Table: "mixed", Keys: []int{0}}
	var defs []string
	scopeCol, prevCols := -1, []int{}
	for i, c := range mixedCols {
		schema.Columns = append(schema.Columns, protocol.Column{Name: c.name, Kind: c.kind, Nullable: c.gen != nil})
		defs = append(defs, c.name+" "+c.typ)
		switch c.name {
		case "i2":
			scopeCol = i
		case "t", "at", "doc":
			prevCols = append(prevCols, i)
		}
	}
	schema.Columns = append(schema.Columns, protocol.Column{Name: "big_blob", Kind: protocol.KindBytes, Nullable: true})
	defs = append(defs, "big_blob bytea")
	schema.Scope, schema.PrevColumns = []int{scopeCol}, prevCols
	exec2(t, pool, `CREATE TYPE mixed_mood AS ENUM ('happy', 'sad "quoted"')`)
	exec2(t, pool, "CREATE TABLE mixed ("+strings.Join(defs, ", ")+")")
	trig := migrated(t, pool, name, pgfeed.Options{Schema: name + "_trig"}, schema)
	logi := migrated(t, pool, name, pgfeed.Options{Capture: pgfeed.CaptureLogical}, schema)

	randRow := func(id string) (string, []any) {
		args := []any{id}
		ps := []string{"$1"}
		for _, c := range mixedCols[1:] {
			var v any
			if rng.IntN(6) > 0 || c.name == "i2" {
				v = c.gen(rng)
			}
			if c.name == "i2" {
				v = strconv.Itoa(rng.IntN(3))
			}
			args = append(args, v)
			ps = append(ps, "$"+strconv.Itoa(len(args))+"::text::"+c.typ)
		}
		return "INSERT INTO mixed VALUES (" + strings.Join(ps, ", ") + ")", args
	}
	// An incompressible value beyond the TOAST threshold: an update that
	// does not touch it leaves it out of the new row in the WAL.
	big := make([]byte, 8000)
	for i := range big {
		big[i] = byte(rng.IntN(256))
	}
	const rows = 60
	for i := range rows {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if i%4 == 1 {
				if err := pgfeed.SetClientOrigin(ctx, tx, "dev-"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
			id := fmt.Sprintf("r%03d", i)
			sql, args := randRow(id)
			exec2(t, tx, sql, args...)
			if i%5 == 0 {
				exec2(t, tx, "UPDATE mixed SET big_blob = $2 WHERE id = $1", id, big)
			}
			if i%3 == 0 { // in place: prev from the old row
				exec2(t, tx, "UPDATE mixed SET t = $2, at = now() WHERE id = $1", id, randText(rng))
			}
			if i%7 == 0 { // a move: delete in the old scope, upsert in the new
				exec2(t, tx, "UPDATE mixed SET i2 = i2 + 10 WHERE id = $1", id)
			}
			if i%4 == 1 && i%8 == 1 { // the origin named last is the transaction's
				if err := pgfeed.SetClientOrigin(ctx, tx, "last-"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
			if i%6 == 0 { // a savepoint rolled back: its changes are gone
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				exec2(t, sp, "UPDATE mixed SET t = 'rolled back' WHERE id = $1", id)
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
			}
			if i > 10 && i%9 == 0 { // an earlier row, updated and deleted
				exec2(t, tx, "UPDATE mixed SET vc = 'x' WHERE id = $1", fmt.Sprintf("r%03d", i-10))
				exec2(t, tx, "DELETE FROM mixed WHERE id = $1", fmt.Sprintf("r%03d", i-9))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 5 {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				sql, args := randRow(fmt.Sprintf("gone%03d", i))
				exec2(t, tx, sql, args...)
				return errors.New("roll back")
			})
			if err == nil {
				t.Fatal("rolled back transaction committed")
			}
		}
	}
	// Updates that leave the TOASTed value alone, in place and moving.
	exec2(t, pool, "UPDATE mixed SET t = 'toast kept' WHERE big_blob IS NOT NULL AND i2 < 10")
	exec2(t, pool, "UPDATE mixed SET i2 = i2 + 20 WHERE big_blob IS NOT NULL")

	// read returns the log's changes in position order, each with its
	// commit group's id and its position.
	type logged struct {
		change string
		group  string
		pos    int64
	}
	read := func(f *pgfeed.Feed) []logged {
		t.Helper()
		head(t, f)
		rs, err := pool.Query(ctx, `SELECT c.resource, c.op, c.key, c.scope::text, coalesce(c.data::text, '-'), coalesce(c.origin, '-'), coalesce(c.prev::text, '-'),
  c.xid::text, c.pos
FROM `+f.LogSQL()+` ORDER BY c.pos`)
		if err != nil {
			t.Fatal(err)
		}
		var out []logged
		for rs.Next() {
			var res, key, scope, data, origin, prev string
			var op int16
			var l logged
			if err := rs.Scan(&res, &op, &key, &scope, &data, &origin, &prev, &l.group, &l.pos); err != nil {
				t.Fatal(err)
			}
			l.change = strings.Join([]string{res, strconv.Itoa(int(op)), key, scope, data, origin, prev}, "|")
			out = append(out, l)
		}
		if rs.Err() != nil {
			t.Fatal(rs.Err())
		}
		return out
	}
	trigLog, logiLog := read(trig), read(logi)
	var want []string
	for _, l := range trigLog {
		want = append(want, l.change)
	}
	if len(want) < rows {
		t.Fatalf("the trigger logged %d changes, want at least %d", len(want), rows)
	}
	for i := range max(len(trigLog), len(logiLog)) {
		var w, g string
		if i < len(trigLog) {
			w = trigLog[i].change
		}
		if i < len(logiLog) {
			g = logiLog[i].change
		}
		if w != g {
			t.Fatalf("change %d of %d/%d differs:\ntrigger %s\nlogical %s", i, len(trigLog), len(logiLog), w, g)
		}
	}
	// The trigger's groups are its transactions. The logical capture may
	// put several whole transactions in one group (a batch), never part
	// of one: each of its group boundaries is a transaction's. A group's
	// positions are contiguous.
	for i := 1; i < len(logiLog); i++ {
		if logiLog[i].group != logiLog[i-1].group && trigLog[i].group == trigLog[i-1].group {
			t.Fatalf("the logical capture split a transaction between changes %d and %d:\n%s\n%s", i-1, i, logiLog[i-1].change, logiLog[i].change)
		}
		if logiLog[i].group == logiLog[i-1].group && logiLog[i].pos != logiLog[i-1].pos+1 {
			t.Fatalf("changes %d and %d of one group at positions %d and %d", i-1, i, logiLog[i-1].pos, logiLog[i].pos)
		}
	}
	var origins, prevs, moves int
	for _, r := range want {
		f := strings.Split(r, "|")
		if f[5] != "-" {
			origins++
		}
		if f[6] != "-" && f[6] != "null" {
			prevs++
		}
		if f[1] == strconv.Itoa(int(feed.OpDelete)) {
			moves++
		}
	}
	if origins == 0 || prevs == 0 || moves == 0 {
		t.Fatalf("the workload wrote %d changes with origins, %d with prev, %d deletes: it must write each", origins, prevs, moves)
	}
	t.Logf("%d changes equal in both modes", len(want))
}

// TestLogicalMigrateNeedsWALLevel: on a server whose wal_level is not
// logical, Migrate of the logical capture fails with the clear error.
func TestLogicalMigrateNeedsWALLevel(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	var level string
	if err := pool.QueryRow(context.Background(), "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level == "logical" {
		testenv.Missing(t, "a Postgres whose wal_level is not logical", "the server of "+testenv.DatabaseURLEnv+" has wal_level logical")
	}
	s := &feed.Schema{Name: "things", Table: "things", Keys: []int{0}, Columns: []protocol.Column{{Name: "id", Kind: protocol.KindString}}}
	createTable(t, pool, s)
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Capture: pgfeed.CaptureLogical, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = f.Migrate(testCtx(t), s)
	if !errors.Is(err, logrepl.ErrWALLevel) || !strings.Contains(err.Error(), "ALTER SYSTEM SET wal_level = logical") {
		t.Fatalf("Migrate = %v, want logrepl.ErrWALLevel", err)
	}
}

// TestSwitchToLogical: a schema captured by triggers is switched to the
// logical capture by Migrate while a writer commits: every transaction's
// change is logged exactly once, whether it committed before the slot
// existed (the trigger's), while Migrate switched (both saw it: the
// consumer skips the trigger's), or after (the consumer's).
func TestSwitchToLogical(t *testing.T) {
	t.Parallel()
	pool, name := testenv.LogicalSchema(t, nil)
	ctx := testCtx(t)
	f1 := newFeedOn(t, pool, name, pgfeed.Options{}, feedtest.Items)
	f1.StartSequencer()
	// The writer commits until Migrate has switched, and 20 more
	// (bounded).
	const maxWrites = 20000
	var switched atomic.Bool
	done := make(chan error, 1)
	wrote := make(chan struct{}, maxWrites)
	writes := 0
	go func() {
		after := 0
		for i := range maxWrites {
			if _, err := pool.Exec(ctx, "INSERT INTO feedtest_items (id, tenant, grp, title, n, done) VALUES ($1, 't1', 1, 'x', 0, false)", fmt.Sprintf("k%05d", i)); err != nil {
				done <- err
				return
			}
			writes = i + 1
			wrote <- struct{}{}
			if switched.Load() {
				if after++; after == 20 {
					break
				}
			}
		}
		done <- nil
	}()
	for range 50 {
		<-wrote
	}
	f2 := migrated(t, pool, name, pgfeed.Options{Capture: pgfeed.CaptureLogical}, feedtest.Items)
	switched.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f1.Close() // the trigger's node goes: the logical one takes the role
	// And one after the switch, which only the consumer sees.
	insertItem(t, pool, "last", "t1", 1)
	var n, keys int
	h := head(t, f2)
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT c.key) FROM "+f2.LogSQL()+" WHERE c.resource = 'items'").Scan(&n, &keys); err != nil {
		t.Fatal(err)
	}
	if n != writes+1 || keys != writes+1 {
		t.Fatalf("%d changes of %d keys logged up to %d, want each of the %d writes once", n, keys, h, writes+1)
	}
	// Head sees the consumer's commit before the consumer, back from it,
	// counts it: wait for the count.
	for {
		wake, err := f2.Doorbell()
		if err != nil {
			t.Fatal(err)
		}
		if f2.Stats().Sequenced > 0 {
			break
		}
		select {
		case <-wake:
		case <-ctx.Done():
			t.Fatalf("the logical capture wrote nothing: %+v", f2.Stats())
		}
	}
}

// TestLogicalBatchesSurviveCrash: the logical capture's consumer fails a
// batch of concurrent writers' transactions before its local commit, and
// a later one after it, before the slot has confirmed it, as a crash
// would; the next term receives each batch again and logs every write
// exactly once. Sabotaged to write again what it wrote before, the capture
// logs duplicates, and the check finds them.
func TestLogicalBatchesSurviveCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rewrite bool
	}{{"sound", false}, {"sabotaged", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var failed [2]atomic.Bool // before the commit, after it
			afterCommit := make(chan struct{})
			fault := func(stage string, changes int) error {
				switch {
				case changes == 0:
				case stage == "commit" && failed[0].CompareAndSwap(false, true):
					return errors.New("fault before the batch's commit")
				case stage == "committed" && failed[0].Load() && failed[1].CompareAndSwap(false, true):
					close(afterCommit)
					return errors.New("fault after the batch's commit")
				}
				return nil
			}
			pool, name := testenv.LogicalSchema(t, nil)
			ctx := testCtx(t)
			opts := pgfeed.LogicalFault(pgfeed.Options{Capture: pgfeed.CaptureLogical}, fault, tc.rewrite)
			f := newFeedOn(t, pool, name, opts, feedtest.Items)
			f.StartSequencer()
			const writers, each = 8, 25
			insertConcurrently(ctx, t, pool, writers, each, "INSERT INTO feedtest_items (id, tenant, grp, title, n, done) VALUES ($1, 't1', 1, 'x', 0, false)",
				func(w, i int) string { return fmt.Sprintf("w%d-%02d", w, i) })
			head(t, f)
			// Head passes once the retried batch's commit is visible, which
			// can be before the sequencer, back from its commit, calls the
			// fault: wait for it.
			select {
			case <-afterCommit:
			case <-ctx.Done():
				t.Fatalf("the faults did not both fire (before the commit %v, after it %v)", failed[0].Load(), failed[1].Load())
			}
			// The batch failed after its commit is logged: head may pass
			// before the next term receives it again. A write after it is
			// logged only after that.
			insertItem(t, pool, "last", "t1", 1)
			h := head(t, f)
			var n, keys int
			if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT c.key) FROM "+f.LogSQL()+" WHERE c.resource = 'items'").Scan(&n, &keys); err != nil {
				t.Fatal(err)
			}
			lost := n != writers*each+1 || keys != writers*each+1
			if lost != tc.rewrite {
				t.Fatalf("%d changes of %d keys logged up to %d for %d writes (rewrite sabotage %v)", n, keys, h, writers*each+1, tc.rewrite)
			}
			if st := f.Stats(); !tc.rewrite && st.LogicalSkipped == 0 {
				t.Fatalf("no transaction was received again and skipped: %+v", st)
			}
			t.Logf("%d changes of %d keys for %d writes; %d received again and skipped", n, keys, writers*each+1, f.Stats().LogicalSkipped)
		})
	}
}
