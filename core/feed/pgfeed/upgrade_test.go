package pgfeed_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

// TestUpgrade starts from a database that an earlier version of the schema
// created (version 1: its change log and its commit-order-lock capture;
// versions 6 and 7: the outbox and a sequencer whose steps wait for their
// flush, or not; the version before this one), with changes in it,
// retention past some of them, and devices holding cursors and copies from
// before the upgrade. A node of this version then boots (Migrate upgrades
// in place: up to version 8 the change log of the new layout starts at the
// old head; from version 8 on the log and its floor are kept), the app
// writes through the new capture, and the devices come back: the one whose
// cursor was at the head resumes without a reset, those behind the new
// floor get exactly one reset each, the others resume, and every copy
// converges to the table.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	// 7 is the last version that wrote positions into the change log.
	for _, version := range []int{1, 6, 7, pgfeed.SchemaVersion() - 1} {
		t.Run(fmt.Sprintf("from version %d", version), func(t *testing.T) {
			t.Parallel()
			testUpgradeFrom(t, version)
		})
	}
}

func testUpgradeFrom(t *testing.T, version int) {
	pool, name := testenv.PostgresConfig(t, func(c *pgxpool.Config) { c.MaxConns = testenv.PoolSize(t, 12) })
	ctx := testCtx(t)
	exec2(t, pool, tItemsDDL)
	scratch, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(scratch, core.Resource[tItem]{Name: "items", Table: "e2e_items", Authorize: authz.Allow}); err != nil {
		t.Fatal(err)
	}
	opts := pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)}
	old, err := pgfeed.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.InstallVersion(ctx, version, scratch.Schemas()...); err != nil {
		t.Fatalf("install version %d: %v", version, err)
	}

	write := func(sqls ...string) {
		t.Helper()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, sql := range sqls {
				if _, err := tx.Exec(ctx, sql); err != nil {
					return fmt.Errorf("%s: %w", sql, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	logState := func() (positions []int64, last feed.Position) {
		t.Helper()
		if version > 1 {
			// The old version's sequencing step (nothing tails yet).
			if _, err := old.Head(ctx); err != nil {
				t.Fatal(err)
			}
		}
		log := old.ChangesTable()
		if version >= 8 {
			log = old.LogSQL() // positions are given by ticks
		}
		rows, err := pool.Query(ctx, "SELECT pos FROM "+log+" ORDER BY pos")
		if err != nil {
			t.Fatal(err)
		}
		positions, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		if len(positions) > 0 {
			last = feed.Position(positions[len(positions)-1])
		}
		return positions, last
	}
	snapshotRows := func() map[string]tItem {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT id, tenant, grp, title, n FROM e2e_items")
		if err != nil {
			t.Fatal(err)
		}
		all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tItem])
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]tItem{}
		for _, it := range all {
			out[it.ID] = it
		}
		return out
	}

	// The old version at work: changes, and two moments devices synced at.
	for i := range 20 {
		write(fmt.Sprintf("INSERT INTO e2e_items (id, tenant, grp, title) VALUES ('k%02d', 't%d', %d, 'v1')", i, 1+i%2, i%3))
	}
	_, p1 := logState()
	rows1 := snapshotRows()
	write("UPDATE e2e_items SET title = 'v2' WHERE id IN ('k00', 'k01')",
		"DELETE FROM e2e_items WHERE id = 'k02'",
		"UPDATE e2e_items SET tenant = 't2' WHERE id = 'k04'")
	_, p2 := logState()
	rows2 := snapshotRows()
	// Changes after the devices' cursors, still under the old version.
	write("UPDATE e2e_items SET title = 'v3' WHERE id = 'k06'",
		"DELETE FROM e2e_items WHERE id = 'k08'",
		"UPDATE e2e_items SET tenant = 't1' WHERE id = 'k05'",
		"INSERT INTO e2e_items (id, tenant, grp, title) VALUES ('pre', 't1', 1, 'before the upgrade')")
	// Retention passed p1 (the old version's pruning).
	if version >= 8 {
		if _, err := old.PruneThrough(ctx, p1+1); err != nil {
			t.Fatal(err)
		}
	} else {
		write(fmt.Sprintf("DELETE FROM %s WHERE pos <= %d", old.ChangesTable(), p1+1),
			fmt.Sprintf("UPDATE %s SET floor = %d", old.MetaTable(), p1+1))
	}
	_, pHead := logState()
	rowsHead := snapshotRows()
	var epoch string
	if err := pool.QueryRow(ctx, "SELECT epoch FROM "+old.MetaTable()).Scan(&epoch); err != nil {
		t.Fatal(err)
	}

	// A node of this version boots: Migrate upgrades the schema in place.
	srv := newE2ENode(t, pool, name, pgfeed.Options{}, core.Config{PageSize: 4, ReplayCache: 1})
	var migrated int
	if err := pool.QueryRow(ctx, "SELECT max(version) FROM "+opts.Schema+".schema_migrations").Scan(&migrated); err != nil {
		t.Fatal(err)
	}
	if migrated != pgfeed.SchemaVersion() || migrated <= version {
		t.Fatalf("schema at version %d after Migrate, want %d", migrated, pgfeed.SchemaVersion())
	}
	// The change log has one index for every change, changes_tx, and one
	// of the resource's second scope column; none of a first scope column
	// or of the transaction alone.
	var indexes []string
	if err := pool.QueryRow(ctx, "SELECT array_agg(pg_get_indexdef(indexrelid) ORDER BY indexrelid::regclass::text) FROM pg_index WHERE indrelid = $1::regclass", old.ChangesTable()).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if len(indexes) != 2 || !strings.Contains(indexes[0], "changes_items_s2") || !strings.Contains(indexes[0], "((scope[2]), xid, ord)") || !strings.Contains(indexes[1], "changes_tx") || !strings.Contains(indexes[1], "(xid, ord, resource, (scope[1]))") {
		t.Fatalf("change log indexes after Migrate:\n%s", strings.Join(indexes, "\n"))
	}
	var floor int64
	if err := pool.QueryRow(ctx, "SELECT floor FROM "+old.MetaTable()).Scan(&floor); err != nil {
		t.Fatal(err)
	}
	// Up to version 8 the change log's layout changed, and the upgrade
	// starts the new log at the old head; from version 8 on, the log is
	// kept with its floor.
	keepsLog := version >= 8
	wantFloor := int64(pHead)
	if keepsLog {
		wantFloor = int64(p1 + 1)
	}
	if floor != wantFloor {
		t.Fatalf("floor %d after the upgrade, want %d (old head %d)", floor, wantFloor, pHead)
	}
	if srv.feed.Epoch() != epoch {
		t.Fatalf("epoch %q after the upgrade, was %q", srv.feed.Epoch(), epoch)
	}
	// The app keeps writing, now through the new capture.
	write("UPDATE e2e_items SET title = 'v4' WHERE id IN ('k01', 'k03')",
		"UPDATE e2e_items SET tenant = 't2' WHERE id = 'k07'",
		"INSERT INTO e2e_items (id, tenant, grp, title) VALUES ('post', 't2', 2, 'after the upgrade')")
	write("DELETE FROM e2e_items WHERE id = 'k09'")

	// Devices come back with the cursors and copies they had.
	type device struct {
		sub    *subscriber
		resets []string
	}
	var mu sync.Mutex
	devices := []struct {
		name   string
		spec   scopeSpec
		cursor feed.Position
		copy   map[string]tItem
		reset  bool
	}{
		{"resumes at the head, all", scopeAll(), pHead, rowsHead, false},
		{"resumes at the head, t1", scopeTenant("t1"), pHead, rowsHead, false},
		{"behind at p2, t1", scopeTenant("t1"), p2, rows2, !keepsLog},
		{"pruned at p1, t2", scopeTenant("t2"), p1, rows1, true},
	}
	subs := make([]*device, len(devices))
	runCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		for _, d := range subs {
			<-d.sub.done
		}
	}()
	for i, d := range devices {
		digest, err := d.spec.scope.Digest()
		if err != nil {
			t.Fatal(err)
		}
		store := client.NewMemoryStore()
		cur := protocol.Cursor{Epoch: epoch, Pos: uint64(d.cursor)}.String()
		if err := store.Save(ctx, client.Record{Digest: digest, Resource: "items", State: client.StateLive, Cursor: cur}); err != nil {
			t.Fatal(err)
		}
		dev := &device{}
		dev.sub = newSubscriber(t, srv.url, d.name, d.spec, store, func(e client.Event) {
			if e.Kind == client.EventReset {
				mu.Lock()
				dev.resets = append(dev.resets, e.Reason)
				mu.Unlock()
			}
		})
		for k, it := range d.copy {
			if d.spec.match(it) {
				dev.sub.chk.rows[k] = it
			}
		}
		dev.sub.chk.last = d.cursor
		subs[i] = dev
		dev.sub.subscribe(t)
		dev.sub.run(runCtx)
	}
	h, err := srv.feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range subs {
		if err := d.sub.chk.waitCaughtUp(ctx, h); err != nil {
			t.Fatal(err)
		}
		if diff := d.sub.chk.diff(srv.rows(t, devices[i].spec.match)); diff != "" {
			t.Errorf("%s: copy differs from SELECT: %s", devices[i].name, diff)
		}
		d.sub.chk.mu.Lock()
		for _, v := range d.sub.chk.violations {
			t.Error(v)
		}
		d.sub.chk.mu.Unlock()
		mu.Lock()
		want := []string(nil)
		if devices[i].reset {
			want = []string{"cursor_expired"}
		}
		if !slices.Equal(d.resets, want) {
			t.Errorf("%s: resets %q, want %q", devices[i].name, d.resets, want)
		}
		mu.Unlock()
	}
}
