package pgfeed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func items(conds ...feed.Cond) feed.Scope { return feed.NewScope(feedtest.Items, conds) }

// replayAll returns every change of scope in (after, until].
func replayAll(t testing.TB, f *pgfeed.Feed, sc feed.Scope, after, until feed.Position) []feed.Change {
	t.Helper()
	var out []feed.Change
	for {
		cs, err := f.Replay(context.Background(), feed.ReplayQuery{Scope: sc, After: after, Until: until, Limit: 500})
		if err != nil {
			t.Fatalf("Replay(%s, %d, %d): %v", sc.Key(), after, until, err)
		}
		out = append(out, cs...)
		if len(cs) < 500 {
			return out
		}
		after = cs[len(cs)-1].Pos
	}
}

func head(t testing.TB, f *pgfeed.Feed) feed.Position {
	t.Helper()
	h, err := f.Head(context.Background())
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	return h
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func insertItem(t testing.TB, q execer, id, tenant string, grp int) {
	t.Helper()
	if _, err := q.Exec(context.Background(), "INSERT INTO feedtest_items (id, tenant, grp, title, n, done) VALUES ($1, $2, $3, 'x', 0, false)", id, tenant, grp); err != nil {
		t.Fatalf("insert %s: %v", id, err)
	}
}

// checkPrefix verifies the property the capture guarantees: the positions a
// reader saw at or below an earlier head never change later (no position
// appears below a head once the head was read). It returns an error
// describing the first hole.
type prefixChecker struct {
	f     *pgfeed.Feed
	pool  *pgxpool.Pool
	last  feed.Position
	below []int64 // positions at or below last, as read then
}

func (c *prefixChecker) check(ctx context.Context) error {
	h, err := c.f.Head(ctx)
	if err != nil {
		return err
	}
	if h < c.last {
		return fmt.Errorf("Head went back from %d to %d", c.last, h)
	}
	rows, err := c.pool.Query(ctx, "SELECT pos FROM "+c.f.LogSQL()+" WHERE pos <= $1 ORDER BY pos", int64(h))
	if err != nil {
		return err
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	var prev []int64
	for _, p := range all {
		if feed.Position(p) <= c.last {
			prev = append(prev, p)
		}
	}
	if !slices.Equal(prev, c.below) {
		return fmt.Errorf("a change appeared at or below head %d after that head was read: positions %v, then %v", c.last, c.below, prev)
	}
	c.last, c.below = h, all
	return nil
}

// commitOutOfOrder runs: A writes, B writes, B commits, A commits; checking
// the prefix property after each commit. It returns the first violation.
func commitOutOfOrder(t *testing.T, opts pgfeed.Options) (a, b feed.Change, err error) {
	f, pool := newFeed(t, opts, feedtest.Items)
	ctx := testCtx(t)
	c := &prefixChecker{f: f, pool: pool}
	if err := c.check(ctx); err != nil {
		t.Fatal(err)
	}
	txA, _ := pool.Begin(ctx)
	defer txA.Rollback(ctx)
	txB, _ := pool.Begin(ctx)
	defer txB.Rollback(ctx)
	insertItem(t, txA, "a", "t1", 1)
	insertItem(t, txB, "b", "t1", 1)
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A is still open: B's change is readable without waiting for A.
	if err = c.check(ctx); err != nil {
		return a, b, err
	}
	h1 := c.last
	cs := replayAll(t, f, items(), 0, h1)
	if len(cs) != 1 || cs[0].Key != "b" {
		t.Fatalf("after B committed: %d changes, want only b", len(cs))
	}
	b = cs[0]
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = c.check(ctx)
	cs = replayAll(t, f, items(), 0, head(t, f))
	for _, ch := range cs {
		if ch.Key == "a" {
			a = ch
		}
	}
	return a, b, err
}

func TestCommitOrderPositions(t *testing.T) {
	t.Parallel()
	a, b, err := commitOutOfOrder(t, pgfeed.Options{})
	if err != nil {
		t.Fatalf("sound capture: %v", err)
	}
	if a.Pos <= b.Pos {
		t.Fatalf("A committed after B but has position %d, B %d", a.Pos, b.Pos)
	}

	// The same sequence with positions taken at write time exposes a hole,
	// and the check above sees it.
	a, b, err = commitOutOfOrder(t, pgfeed.Broken(pgfeed.Options{}))
	if err == nil {
		t.Fatalf("broken capture (a at %d, b at %d): the prefix check did not detect the hole", a.Pos, b.Pos)
	}
	t.Logf("broken capture detected as expected: %v", err)
}

// TestHeadNeverExposesHole runs writers whose transactions overlap and
// commit out of order while a reader checks, again and again, that nothing
// appears below a head it has read.
func TestHeadNeverExposesHole(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{}, feedtest.Items)
	ctx := testCtx(t)
	const writers, txs = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range txs {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				insertItem(t, tx, fmt.Sprintf("w%d-%d", w, i), "t1", w)
				// Commit while another writer's transaction is open: the
				// other writers' inserts interleave with this one's.
				if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.001 * (random() * 5))"); err != nil {
					t.Error(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	c := &prefixChecker{f: f, pool: pool}
	checks := 0
	for {
		if err := c.check(ctx); err != nil {
			t.Fatal(err)
		}
		checks++
		select {
		case <-done:
			if err := c.check(ctx); err != nil {
				t.Fatal(err)
			}
			if n := len(c.below); n != writers*txs {
				t.Fatalf("%d changes, want %d", n, writers*txs)
			}
			t.Logf("%d prefix checks while %d transactions committed", checks, writers*txs)
			return
		default:
		}
	}
}

func TestOrigin(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{}, feedtest.Items)
	ctx := testCtx(t)

	// With the helper.
	tx, _ := pool.Begin(ctx)
	if err := pgfeed.SetClientOrigin(ctx, tx, "dev-1"); err != nil {
		t.Fatal(err)
	}
	insertItem(t, tx, "a", "t1", 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// With SET LOCAL, the last value set wins for the whole transaction.
	tx, _ = pool.Begin(ctx)
	exec2(t, tx, "SET LOCAL tide.origin = 'first'")
	insertItem(t, tx, "b", "t1", 1)
	exec2(t, tx, "SET LOCAL tide.origin = 'dev-2'")
	exec2(t, tx, "UPDATE feedtest_items SET title = 'y' WHERE id = 'a'")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Without: no origin, even on a connection that had one before.
	insertItem(t, pool, "c", "t1", 1)
	// Outside a transaction block, SET LOCAL warns and tags nothing.
	exec2(t, pool, "SET LOCAL tide.origin = 'ignored'")
	insertItem(t, pool, "d", "t1", 1)

	got := map[string]string{}
	for _, c := range replayAll(t, f, items(), 0, head(t, f)) {
		got[c.Key+"/"+c.Op.String()] += c.Origin + ";"
	}
	want := map[string]string{"a/upsert": "dev-1;dev-2;", "b/upsert": "dev-2;", "c/upsert": ";", "d/upsert": ";"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("origins %v, want %v", got, want)
	}
}

func exec2(t testing.TB, q execer, sql string, args ...any) {
	t.Helper()
	if _, err := q.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestMovesInSQL(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{}, feedtest.Items)
	ctx := testCtx(t)
	insertItem(t, pool, "a", "t1", 1)
	h0 := head(t, f)

	// In one transaction: an update in place, a move to another tenant, a
	// change of primary key, and a delete; each in commit order.
	tx, _ := pool.Begin(ctx)
	exec2(t, tx, "UPDATE feedtest_items SET title = 'v2' WHERE id = 'a'")
	exec2(t, tx, "UPDATE feedtest_items SET tenant = 't2', title = 'v3' WHERE id = 'a'")
	exec2(t, tx, "UPDATE feedtest_items SET id = 'a2' WHERE id = 'a'")
	exec2(t, tx, "DELETE FROM feedtest_items WHERE id = 'a2'")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	cs := replayAll(t, f, items(), h0, head(t, f))
	type ch struct {
		op, key, tenant, title string
	}
	var got []ch
	for i, c := range cs {
		var row struct{ Tenant, Title string }
		if err := json.Unmarshal(c.Row, &row); err != nil {
			t.Fatal(err)
		}
		if row.Tenant != c.Scope[0] {
			t.Fatalf("change %d: scope %q but row tenant %q", i, c.Scope, row.Tenant)
		}
		if i > 0 && c.Pos != cs[i-1].Pos+1 {
			t.Fatalf("positions of one transaction are not consecutive: %d after %d", c.Pos, cs[i-1].Pos)
		}
		got = append(got, ch{c.Op.String(), c.Key, c.Scope[0], row.Title})
	}
	want := []ch{
		{"upsert", "a", "t1", "v2"},
		{"delete", "a", "t1", "v2"}, // the move: the old scope and old row first
		{"upsert", "a", "t2", "v3"},
		{"delete", "a", "t2", "v3"}, // the key change: a delete of the old key
		{"upsert", "a2", "t2", "v3"},
		{"delete", "a2", "t2", "v3"}, // the delete: a tombstone with the old row
	}
	if !slices.Equal(got, want) {
		t.Fatalf("changes\n got %v\nwant %v", got, want)
	}
	// Scoped replays see the move as a delete in t1 and an upsert in t2.
	t1 := replayAll(t, f, items(feed.Cond{Col: 0, Values: []string{"t1"}}), h0, head(t, f))
	if len(t1) != 2 || t1[1].Op != feed.OpDelete {
		t.Fatalf("t1 replay: %v", t1)
	}
}

func TestTruncateRefused(t *testing.T) {
	t.Parallel()
	_, pool := newFeed(t, pgfeed.Options{}, feedtest.Items)
	insertItem(t, pool, "a", "t1", 1)
	_, err := pool.Exec(context.Background(), "TRUNCATE feedtest_items")
	if err == nil || !strings.Contains(err.Error(), "not captured") {
		t.Fatalf("TRUNCATE of a synced table: %v, want a refusal", err)
	}
}

// TestReplayUsesIndex asserts that the replay queries of every scope shape
// read the change log in position order through an index, with custom and
// generic plans, on a log large enough that a sequential scan would be the
// planner's choice if the index were unusable: never with a bitmap scan,
// which reads every change of the scope in the range for each page. Also on
// a log whose statistics were taken while it was empty (the planner then
// expects a handful of changes in any range, and reads them with a bitmap
// scan and a sort unless told otherwise).
func TestReplayUsesIndex(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{false, true} {
		t.Run(map[bool]string{false: "analyzed", true: "analyzed-empty"}[stale], func(t *testing.T) {
			t.Parallel()
			f, pool := newFeed(t, pgfeed.Options{}, feedtest.Items, feedtest.Notes)
			if stale {
				exec2(t, pool, "ANALYZE "+f.ChangesTable())
			}
			exec2(t, pool, `INSERT INTO feedtest_items (id, tenant, grp, title, n, done)
SELECT 'k' || i, 't' || (i % 50), i % 7, 'title', i, false FROM generate_series(1, 40000) i`)
			exec2(t, pool, `INSERT INTO feedtest_notes (id, tenant, body) SELECT i, 't' || (i % 50), 'b' FROM generate_series(1, 20000) i`)
			h := head(t, f) // gives the captured changes their positions, so the log holds them
			if !stale {
				exec2(t, pool, "ANALYZE "+f.ChangesTable())
			}
			checkReplayPlans(t, f, pool, h)
		})
	}
}

func checkReplayPlans(t *testing.T, f *pgfeed.Feed, pool *pgxpool.Pool, h feed.Position) {
	notes := feed.NewScope(feedtest.Notes, []feed.Cond{{Col: 0, Values: []string{"t3"}}})
	cases := []struct {
		scope feed.Scope
		index string // the index the plan must use
	}{
		{items(feed.Cond{Col: 0, Values: []string{"t3"}}), "changes_tx"},
		{items(feed.Cond{Col: 0, Values: []string{"t3", "t4"}}), "changes_tx"},
		{items(feed.Cond{Col: 1, Values: []string{"3"}}), "changes_items_s2"},
		// Conditions on both columns: the first's (changes_tx) or the
		// second's index.
		{items(feed.Cond{Col: 0, Values: []string{"t3"}}, feed.Cond{Col: 1, Values: []string{"3"}}), "changes_"},
		{items(feed.Cond{Col: 0, Values: []string{"t3", "t4", "t5"}}, feed.Cond{Col: 1, Values: []string{"3", "4"}}), "changes_"},
		{items(), "changes_"},
		{notes, "changes_tx"},
	}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		for _, c := range cases {
			for _, after := range []feed.Position{0, h / 2} {
				sql, args := f.ReplaySQL(feed.ReplayQuery{Scope: c.scope, After: after, Until: h, Limit: 1000})
				plan := explain(t, pool, mode, pgfeed.OrderedRead, sql, args...)
				if strings.Contains(plan, "Seq Scan on changes") || strings.Contains(plan, "Bitmap") || !strings.Contains(plan, c.index) {
					t.Fatalf("%s, plan_cache_mode %s, after %d: plan does not read %s in order:\n%s", c.scope.Key(), mode, after, c.index, plan)
				}
			}
		}
	}
	// The replay returns what it should on this log, too.
	got := replayAll(t, f, notes, 0, h)
	if len(got) != 400 {
		t.Fatalf("replay of notes?tenant=t3: %d changes, want 400", len(got))
	}
	two := replayAll(t, f, items(feed.Cond{Col: 0, Values: []string{"t3", "t4"}}), 0, h)
	if len(two) != 1600 {
		t.Fatalf("replay of items?tenant=t3,t4: %d changes, want 1600", len(two))
	}
	for i := 1; i < len(two); i++ {
		if two[i].Pos <= two[i-1].Pos {
			t.Fatalf("replay of items?tenant=t3,t4: position %d after %d", two[i].Pos, two[i-1].Pos)
		}
	}
	// A condition without values matches nothing, alone or next to one of
	// several.
	for _, sc := range []feed.Scope{items(feed.Cond{Col: 0}), items(feed.Cond{Col: 0}, feed.Cond{Col: 1, Values: []string{"3", "4"}})} {
		if none := replayAll(t, f, sc, 0, h); len(none) != 0 {
			t.Fatalf("replay of %s: %d changes, want 0", sc.Key(), len(none))
		}
	}
}

// explain returns the text plan of sql with args under plan_cache_mode,
// after running setup in the same transaction (as the feed runs it).
func explain(t testing.TB, pool *pgxpool.Pool, mode, setup, sql string, args ...any) string {
	t.Helper()
	var plan []string
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), "SET LOCAL plan_cache_mode = "+mode); err != nil {
			return err
		}
		if setup != "" {
			if _, err := tx.Exec(context.Background(), setup); err != nil {
				return err
			}
		}
		rows, err := tx.Query(context.Background(), "EXPLAIN "+sql, args...)
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	return strings.Join(plan, "\n")
}

// things is a resource whose columns have the types apps use: a uuid key,
// bigint, boolean, text and uuid scope columns, and time, bytes and JSON
// columns.
var things = &feed.Schema{
	Name:  "things",
	Table: "things",
	Columns: []protocol.Column{
		{Name: "id", Kind: protocol.KindString},
		{Name: "org", Kind: protocol.KindInt},
		{Name: "active", Kind: protocol.KindBool},
		{Name: "kind", Kind: protocol.KindString},
		{Name: "owner", Kind: protocol.KindString},
		{Name: "at", Kind: protocol.KindTime},
		{Name: "naive", Kind: protocol.KindTime},
		{Name: "blob", Kind: protocol.KindBytes},
		{Name: "meta", Kind: protocol.KindJSON},
		{Name: "score", Kind: protocol.KindFloat, Nullable: true},
	},
	Keys:  []int{0},
	Scope: []int{1, 2, 3, 4},
}

type thing struct {
	ID     string          `json:"id"`
	Org    int64           `json:"org"`
	Active bool            `json:"active"`
	Kind   string          `json:"kind"`
	Owner  string          `json:"owner"`
	At     time.Time       `json:"at"`
	Naive  time.Time       `json:"naive"`
	Blob   []byte          `json:"blob"`
	Meta   json.RawMessage `json:"meta"`
	Score  *float64        `json:"score"`
}

func TestSnapshotColumnTypes(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx := testCtx(t)
	exec2(t, pool, `CREATE TABLE things (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org bigint NOT NULL, active boolean NOT NULL,
kind text NOT NULL, owner uuid NOT NULL, at timestamptz NOT NULL, naive timestamp NOT NULL, blob bytea, meta jsonb, score double precision,
extra text DEFAULT 'not declared')`)
	exec2(t, pool, "SET TIME ZONE 'America/New_York'") // a writer in another time zone renders the same text
	f := migrated(t, pool, name, pgfeed.Options{}, things)
	owners := []string{"6f1c1f0e-8a51-4a5e-9a3e-6f5a3b2f1c00", "0b7f6d4e-2c3a-4b1d-8e9f-aa11bb22cc33"}
	blob := bytes.Repeat([]byte{0, 1, 2, 250, 255}, 40) // base64 longer than a 76-column line
	at := time.Date(2026, 11, 30, 15, 4, 5, 123456000, time.FixedZone("X", 2*3600))
	for i := range 30 {
		_, err := pool.Exec(ctx, `INSERT INTO things (org, active, kind, owner, at, naive, blob, meta, score) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			i%3, i%2 == 0, []string{"a", "b", "c"}[i%3], owners[i%2], at.Add(time.Duration(i)*time.Hour), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			blob, fmt.Sprintf(`{"i": %d, "tags": ["x"]}`, i), map[bool]any{true: 1.5, false: nil}[i%5 == 0])
		if err != nil {
			t.Fatal(err)
		}
	}
	h := head(t, f)
	// Rendered in the snapshot exactly as the capture rendered them.
	latest := map[string]feed.Change{}
	for _, c := range replayAll(t, f, feed.NewScope(things, nil), 0, h) {
		latest[c.Key] = c
	}
	snap := snapshotAll(t, f, feed.NewScope(things, nil), 7)
	if len(snap) != 30 || len(latest) != 30 {
		t.Fatalf("snapshot %d rows, log %d rows; want 30", len(snap), len(latest))
	}
	for _, r := range snap {
		c := latest[r.Key]
		if !bytes.Equal(r.Row, c.Row) || !slices.Equal(r.Scope, c.Scope) {
			t.Fatalf("row %s: snapshot %s %q, capture %s %q", r.Key, r.Row, r.Scope, c.Row, c.Scope)
		}
		var th thing
		if err := json.Unmarshal(r.Row, &th); err != nil {
			t.Fatalf("decode %s: %v", r.Row, err)
		}
		var idx int
		if err := json.Unmarshal(th.Meta, &struct{ I *int }{&idx}); err != nil {
			t.Fatal(err)
		}
		if th.ID != r.Key || !bytes.Equal(th.Blob, blob) || !th.At.Equal(at.Add(time.Duration(idx)*time.Hour)) ||
			!th.Naive.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || (idx%5 == 0) != (th.Score != nil) {
			t.Fatalf("row %s decodes to %+v", r.Row, th)
		}
		if strings.Contains(string(r.Row), "not declared") {
			t.Fatalf("row %s has an undeclared column", r.Row)
		}
	}

	// Conditions on bigint, boolean, text and uuid columns, paged by a uuid key.
	count := func(where string) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM things WHERE "+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cond := func(col int, vals ...string) feed.Cond { return feed.Cond{Col: col, Values: vals} }
	cases := []struct {
		conds []feed.Cond
		where string
	}{
		{[]feed.Cond{cond(0, "1")}, "org = 1"},
		{[]feed.Cond{cond(0, "0", "2")}, "org IN (0, 2)"},
		{[]feed.Cond{cond(1, "true")}, "active"},
		{[]feed.Cond{cond(1, "false"), cond(2, "a", "c")}, "NOT active AND kind IN ('a', 'c')"},
		{[]feed.Cond{cond(3, owners[1])}, "owner = '" + owners[1] + "'"},
		{[]feed.Cond{cond(3, owners...), cond(0, "2")}, "org = 2"},
		// Values the column cannot hold, or not in canonical text, match
		// nothing (as they match nothing in replay and fan-out).
		{[]feed.Cond{cond(3, "not-a-uuid")}, "false"},
		{[]feed.Cond{cond(3, "not-a-uuid", owners[0])}, "owner = '" + owners[0] + "'"},
		{[]feed.Cond{cond(3, strings.ToUpper(owners[0]))}, "false"},
		{[]feed.Cond{cond(0, "99999999999999999999")}, "false"},
		{[]feed.Cond{cond(0, "01")}, "false"},
		{[]feed.Cond{cond(2, "a\x00b")}, "false"},
		{[]feed.Cond{cond(2, "a", "\xff")}, "kind = 'a'"},
	}
	for _, c := range cases {
		sc := feed.NewScope(things, c.conds)
		rows := snapshotAll(t, f, sc, 4)
		if len(rows) != count(c.where) {
			t.Fatalf("Snapshot(%s): %d rows, want %d (%s)", sc.Key(), len(rows), count(c.where), c.where)
		}
		for _, r := range rows {
			if !sc.Match(r.Scope) {
				t.Fatalf("Snapshot(%s) returned %s with scope %q", sc.Key(), r.Key, r.Scope)
			}
		}
		replayed := map[string]bool{}
		for _, c := range replayAll(t, f, sc, 0, h) {
			replayed[c.Key] = true
		}
		if len(replayed) != len(rows) {
			t.Fatalf("Snapshot(%s) has %d rows, replay %d keys", sc.Key(), len(rows), len(replayed))
		}
	}
}

func snapshotAll(t testing.TB, f *pgfeed.Feed, sc feed.Scope, limit int) []feed.Change {
	t.Helper()
	var out []feed.Change
	q := feed.SnapshotQuery{Scope: sc, Limit: limit}
	for {
		page, err := f.Snapshot(context.Background(), q)
		if err != nil {
			t.Fatalf("Snapshot(%s): %v", sc.Key(), err)
		}
		out = append(out, page.Rows...)
		if len(page.Rows) < limit {
			return out
		}
		q.After, q.HasAfter = page.Rows[len(page.Rows)-1].Key, true
	}
}

func TestMigrateIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresConfig(t, func(c *pgxpool.Config) { c.MaxConns = testenv.PoolSize(t, 12) })
	ctx := testCtx(t)
	createTable(t, pool, feedtest.Items)
	createTable(t, pool, feedtest.Notes)
	opts := pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)}
	const nodes = 6
	feeds := make([]*pgfeed.Feed, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range feeds {
		f, err := pgfeed.New(pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if f.Epoch() != "" {
			t.Fatal("Epoch before Migrate is not empty")
		}
		feeds[i] = f
		wg.Go(func() { errs[i] = f.Migrate(ctx, feedtest.Items, feedtest.Notes) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: Migrate: %v", i, err)
		}
		if feeds[i].Epoch() != feeds[0].Epoch() || !protocol.ValidEpoch(feeds[0].Epoch()) {
			t.Fatalf("epochs %q and %q", feeds[i].Epoch(), feeds[0].Epoch())
		}
	}
	var versions, triggers int
	var installed time.Time
	q := func(sql string, dst ...any) {
		t.Helper()
		if err := pool.QueryRow(ctx, sql).Scan(dst...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q("SELECT count(*) FROM "+opts.Schema+".schema_migrations", &versions)
	q("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'feedtest_items'::regclass AND NOT tgisinternal", &triggers)
	q("SELECT max(updated_at) FROM "+opts.Schema+".resources", &installed)
	if versions != pgfeed.SchemaVersion() || triggers != 2 { // capture + truncate guard
		t.Fatalf("%d migrations recorded, %d triggers on items; want %d and 2", versions, triggers, pgfeed.SchemaVersion())
	}

	// Again: nothing to do, and nothing done.
	f := feeds[0]
	insertItem(t, pool, "a", "t1", 1)
	if err := f.Migrate(ctx, feedtest.Items, feedtest.Notes); err != nil {
		t.Fatal(err)
	}
	var again time.Time
	q("SELECT max(updated_at) FROM "+opts.Schema+".resources", &again)
	if !again.Equal(installed) {
		t.Fatal("a second Migrate reinstalled the captures")
	}
	h := head(t, f)
	if cs := replayAll(t, f, items(), 0, h); len(cs) != 1 {
		t.Fatalf("%d changes, want 1", len(cs))
	}

	// A new layout (another scope column) moves the resource's floor: old
	// cursors of items get ErrCursorExpired, notes are unaffected.
	items2 := *feedtest.Items
	items2.Scope = []int{1, 2, 5}
	if err := f.Migrate(ctx, &items2, feedtest.Notes); err != nil {
		t.Fatal(err)
	}
	_, err := f.Replay(ctx, feed.ReplayQuery{Scope: feed.NewScope(&items2, nil), After: 0, Until: h, Limit: 10})
	if !errors.Is(err, feed.ErrCursorExpired) {
		t.Fatalf("Replay from before a layout change: %v, want ErrCursorExpired", err)
	}
	if _, err := f.Replay(ctx, feed.ReplayQuery{Scope: feed.NewScope(feedtest.Notes, nil), After: 0, Until: h, Limit: 10}); err != nil {
		t.Fatalf("Replay of another resource: %v", err)
	}
	insertItem(t, pool, "b", "t1", 1)
	cs := replayAll(t, f, feed.NewScope(&items2, nil), h, head(t, f))
	if len(cs) != 1 || len(cs[0].Scope) != 3 || cs[0].Scope[2] != "false" {
		t.Fatalf("change after the layout change: %v", cs)
	}

	// A resource without a capture cannot be replayed: an empty replay
	// would be a silent gap.
	other := *feedtest.Notes
	other.Name = "uncaptured"
	if _, err := f.Replay(ctx, feed.ReplayQuery{Scope: feed.NewScope(&other, nil), Until: h, Limit: 10}); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Replay of a resource without capture: %v", err)
	}

	// A declared column the table lacks is an error naming it.
	bad := *feedtest.Notes
	bad.Columns = append(slices.Clone(bad.Columns), protocol.Column{Name: "nope", Kind: protocol.KindString})
	if err := f.Migrate(ctx, &bad); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("Migrate with a missing column: %v", err)
	}
}

func TestListenerReconnect(t *testing.T) {
	t.Parallel()
	// A poll interval longer than the test: only the doorbell (and the read
	// after a reconnect) can wake Tail.
	f, pool := newFeed(t, pgfeed.Options{PollInterval: time.Hour}, feedtest.Items)
	ctx := testCtx(t)
	connected := make(chan struct{}, 10)
	f.OnListen(func() { connected <- struct{}{} })

	tail := func(after feed.Position) []feed.Change {
		t.Helper()
		cs, err := f.Tail(ctx, after, 100)
		if err != nil {
			t.Fatalf("Tail: %v", err)
		}
		return cs
	}
	// The first Tail starts the listener.
	type result struct{ cs []feed.Change }
	done := make(chan result, 1)
	go func() { done <- result{tail(0)} }()
	<-connected
	insertItem(t, pool, "a", "t1", 1)
	r := <-done
	if len(r.cs) != 1 {
		t.Fatalf("Tail woke with %d changes", len(r.cs))
	}
	last := r.cs[0].Pos

	for round := range 3 {
		pid := f.ListenerPID()
		go func() { done <- result{tail(last)} }()
		exec2(t, pool, "SELECT pg_terminate_backend($1)", int32(pid))
		// Written while the listener is down or reconnecting: the read after
		// the reconnect finds it, or a notification after it does.
		insertItem(t, pool, fmt.Sprintf("r%d", round), "t1", 1)
		r := <-done
		if len(r.cs) != 1 || r.cs[0].Key != fmt.Sprintf("r%d", round) {
			t.Fatalf("round %d: Tail returned %v", round, r.cs)
		}
		last = r.cs[0].Pos
		<-connected // the listener is back
		if f.ListenerPID() == pid {
			t.Fatalf("round %d: the listener did not reconnect", round)
		}
	}
	if s := f.Stats(); s.ListenerConnects != 4 || s.Polls != 0 {
		t.Fatalf("stats %+v, want 4 connects and no polls", s)
	}
	// Close stops the listener; Tail then fails fast.
	f.Close()
	if _, err := f.Tail(ctx, last, 10); !errors.Is(err, pgfeed.ErrClosed) {
		t.Fatalf("Tail after Close: %v", err)
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{MaxChanges: 5, MaxAge: 24 * time.Hour}, feedtest.Items)
	ctx := testCtx(t)
	// One transaction a change, each given its position (its tick) before
	// the next: retention by age goes by when a change got its position.
	for i := range 12 {
		insertItem(t, pool, fmt.Sprint("k", i), "t1", i)
		head(t, f)
	}
	h := head(t, f)
	floor, err := f.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if floor != h-5 {
		t.Fatalf("floor %d after keeping 5 of %d, want %d", floor, h, h-5)
	}
	if _, err := f.Replay(ctx, feed.ReplayQuery{Scope: items(), After: floor - 1, Until: h, Limit: 10}); !errors.Is(err, feed.ErrCursorExpired) {
		t.Fatalf("Replay below the floor: %v", err)
	}
	if cs := replayAll(t, f, items(), floor, h); len(cs) != 5 {
		t.Fatalf("%d changes above the floor, want 5", len(cs))
	}
	// By age: age the two oldest retained changes.
	exec2(t, pool, "UPDATE "+f.TicksTable()+" SET made_at = made_at - interval '2 days' WHERE next - 1 <= $1", int64(floor+2))
	if floor, err = f.Prune(ctx); err != nil || floor != h-3 {
		t.Fatalf("Prune by age: floor %d, err %v; want %d", floor, err, h-3)
	}
	// Everything pruned: Head stays put, and the feed keeps working.
	if floor, err = f.PruneThrough(ctx, h); err != nil || floor != h {
		t.Fatalf("PruneThrough(head): %d, %v", floor, err)
	}
	if got := head(t, f); got != h {
		t.Fatalf("Head %d after pruning everything, want %d", got, h)
	}
	if floor, err = f.PruneThrough(ctx, 1); err != nil || floor != h {
		t.Fatalf("the floor moved down: %d, %v", floor, err)
	}
	insertItem(t, pool, "late", "t1", 1)
	if cs := replayAll(t, f, items(), h, head(t, f)); len(cs) != 1 {
		t.Fatalf("%d changes after the floor", len(cs))
	}
	// The background pruner runs and stops with Close.
	f.StartPruner()
	f.StartPruner()
	f.Close()
}
