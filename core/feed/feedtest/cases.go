package feedtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/tidesync/tide/core/feed"
)

func (s *suite) testFresh(t *testing.T) {
	e := s.setup(t)
	epoch := e.f.Epoch()
	if epoch == "" {
		t.Fatal("Epoch is empty")
	}
	if again := e.f.Epoch(); again != epoch {
		t.Fatalf("Epoch changed from %q to %q", epoch, again)
	}
	if h := e.head(); h != 0 {
		t.Fatalf("Head of a fresh feed = %d, want 0", h)
	}
	for _, sc := range []feed.Scope{itemScope(), itemScope(tenantIs("t1")), feed.NewScope(Notes, nil)} {
		if cs := e.replay(sc, 0, 0, 10, nil); len(cs) != 0 {
			t.Fatalf("Replay(%s) of a fresh feed returned %d changes", sc.Key(), len(cs))
		}
		page, err := e.f.Snapshot(e.ctx, feed.SnapshotQuery{Scope: sc, Limit: 10})
		if err != nil {
			t.Fatalf("Snapshot(%s): %v", sc.Key(), err)
		}
		if len(page.Rows) != 0 || page.Pos != 0 {
			t.Fatalf("Snapshot(%s) of a fresh feed = %d rows at %d, want none at 0", sc.Key(), len(page.Rows), page.Pos)
		}
	}
	if e.f.Epoch() != epoch {
		t.Fatal("Epoch changed after reads")
	}
}

func (s *suite) testInsertUpdateDelete(t *testing.T) {
	e := s.setup(t)
	a := item{ID: "a", Tenant: "t1", Grp: 1, Title: "first", N: 1, Note: strp("hello")}
	e.apply("dev-1", a.upsert())
	h1 := e.head()
	checkChanges(t, "after insert", e.tail(0, h1), withOrigin("dev-1", a.change(feed.OpUpsert)))

	a2 := a
	a2.Title, a2.N, a2.Done, a2.Note = "second", -42, true, nil
	e.apply("", a2.upsert())
	h2 := e.head()
	if h2 <= h1 {
		t.Fatalf("Head %d after an update, was %d", h2, h1)
	}
	checkChanges(t, "after update", e.tail(h1, h2), withOrigin("", a2.change(feed.OpUpsert)))

	e.apply("dev-2", delItem("a"))
	h3 := e.head()
	// The tombstone carries the old scope and the old row.
	checkChanges(t, "after delete", e.tail(h2, h3), withOrigin("dev-2", a2.change(feed.OpDelete)))

	// Deleting missing rows is not an error and produces nothing.
	e.apply("dev-3", delItem("a"), delItem("never-existed"), delNote(404))
	e.noChangesAfter(h3, "deleting missing rows")

	// A resource with an integer key, sharing scope values with items.
	n := note{ID: 7, Tenant: "t1", Body: "text"}
	e.apply("dev-4", n.upsert())
	e.apply("dev-5", delNote(7))
	h5 := e.head()
	checkChanges(t, "notes", e.tail(h3, h5), append(
		withOrigin("dev-4", n.change(feed.OpUpsert)),
		withOrigin("dev-5", n.change(feed.OpDelete))...))

	checkChanges(t, "Replay(items)", e.replay(itemScope(), 0, h5, 100, nil), append(append(
		withOrigin("dev-1", a.change(feed.OpUpsert)),
		withOrigin("", a2.change(feed.OpUpsert))...),
		withOrigin("dev-2", a2.change(feed.OpDelete))...))
	if rows, _, _ := e.snapshot(itemScope(), 10, nil); len(rows) != 0 {
		t.Fatalf("Snapshot after delete has %d rows", len(rows))
	}

	// Keys that look alike stay distinct; the empty string is a valid key.
	empty := item{ID: "", Tenant: "t1", Grp: 1, Title: "empty key"}
	e.apply("", empty.upsert())
	rows, _, _ := e.snapshot(itemScope(), 10, nil)
	want := Fold(nil, []feed.Change{empty.change(feed.OpUpsert)})
	if d := Diff(want, rows); d != "" {
		t.Fatalf("Snapshot with an empty key: %s", d)
	}
}

func (s *suite) testMove(t *testing.T) {
	e := s.setup(t)
	a := item{ID: "a", Tenant: "t1", Grp: 1, Title: "a"}
	b := item{ID: "b", Tenant: "t1", Grp: 2, Title: "b"}
	e.apply("", a.upsert())
	e.apply("", b.upsert())
	h0 := e.head()

	// Tenant changes: delete in the old scope, then upsert in the new one.
	a2 := a
	a2.Tenant, a2.Title = "t2", "a moved"
	e.apply("mover", a2.upsert())
	h1 := e.head()
	moved := e.tail(h0, h1)
	checkChanges(t, "move between tenants", moved, withOrigin("mover",
		a.change(feed.OpDelete), a2.change(feed.OpUpsert)))

	// Only the group changes: still a move.
	b2 := b
	b2.Grp = 3
	e.apply("mover", b2.upsert())
	h2 := e.head()
	checkChanges(t, "move between groups", e.tail(h1, h2), withOrigin("mover",
		b.change(feed.OpDelete), b2.change(feed.OpUpsert)))

	all := e.all()
	upA, upB := a.change(feed.OpUpsert), b.change(feed.OpUpsert)
	cases := []struct {
		scope feed.Scope
		want  []feed.Change
	}{
		{itemScope(tenantIs("t1")), []feed.Change{upA, upB, a.change(feed.OpDelete), b.change(feed.OpDelete), b2.change(feed.OpUpsert)}},
		{itemScope(tenantIs("t2")), []feed.Change{a2.change(feed.OpUpsert)}},
		{itemScope(tenantIs("t1", "t2")), []feed.Change{upA, upB, a.change(feed.OpDelete), a2.change(feed.OpUpsert), b.change(feed.OpDelete), b2.change(feed.OpUpsert)}},
		{itemScope(grpIs(2)), []feed.Change{upB, b.change(feed.OpDelete)}},
		{itemScope(grpIs(3)), []feed.Change{b2.change(feed.OpUpsert)}},
		{itemScope(tenantIs("t1"), grpIs(1)), []feed.Change{upA, a.change(feed.OpDelete)}},
	}
	for _, c := range cases {
		got := e.replay(c.scope, 0, h2, 100, nil)
		for i := range got {
			got[i].Origin = "" // compared below through all
		}
		checkChanges(t, "Replay("+c.scope.Key()+")", got, c.want)
		checkChanges(t, "Replay("+c.scope.Key()+") vs Tail", e.replay(c.scope, 0, h2, 100, nil), filter(all, c.scope, 0, h2))
	}
	// Both halves of a move come after every earlier change.
	for _, c := range moved {
		if c.Pos <= h0 {
			t.Fatalf("move change at %d, not after earlier head %d", c.Pos, h0)
		}
	}

	rows, _, _ := e.snapshot(itemScope(tenantIs("t1")), 10, nil)
	if d := Diff(Fold(nil, []feed.Change{b2.change(feed.OpUpsert)}), rows); d != "" {
		t.Fatalf("Snapshot(t1) after moves: %s", d)
	}
	rows, _, _ = e.snapshot(itemScope(tenantIs("t2")), 10, nil)
	if d := Diff(Fold(nil, []feed.Change{a2.change(feed.OpUpsert)}), rows); d != "" {
		t.Fatalf("Snapshot(t2) after moves: %s", d)
	}
}

func (s *suite) testApplyAtomic(t *testing.T) {
	e := s.setup(t)
	z := item{ID: "z", Tenant: "t9", Grp: 9}
	e.apply("", z.upsert())
	h0 := e.head()

	x := item{ID: "x", Tenant: "t1", Grp: 1, Title: "x"}
	y := item{ID: "y", Tenant: "t1", Grp: 1, Title: "y"}
	x2 := x
	x2.N = 2
	n := note{ID: 1, Tenant: "t1", Body: "n"}
	e.apply("batch", x.upsert(), y.upsert(), n.upsert(), x2.upsert(), delItem("y"), delItem("nope"))
	h1 := e.head()
	batch := e.tail(h0, h1)
	checkChanges(t, "batch", batch, withOrigin("batch",
		x.change(feed.OpUpsert), y.change(feed.OpUpsert), n.change(feed.OpUpsert),
		x2.change(feed.OpUpsert), y.change(feed.OpDelete)))
	// A commit's changes are one commit group (Change.Tx), if the feed
	// records groups, whichever read returns them.
	for _, c := range batch {
		if c.Tx != batch[0].Tx {
			t.Fatalf("the changes of one Apply are in commit groups %d and %d", batch[0].Tx, c.Tx)
		}
	}
	for _, c := range e.replay(itemScope(tenantIs("t1")), h0, h1, 100, nil) {
		if c.Tx != batch[0].Tx {
			t.Fatalf("Replay gives commit group %d, Tail %d", c.Tx, batch[0].Tx)
		}
	}

	// A move and an update of the moved row in one batch, and a re-insert
	// of a row deleted earlier in the same batch.
	x3 := x2
	x3.Tenant = "t2"
	x4 := x3
	x4.Title = "x4"
	z2 := z
	z2.Title = "z again"
	e.apply("batch2", x3.upsert(), x4.upsert(), delItem("z"), z2.upsert())
	h2 := e.head()
	checkChanges(t, "batch with a move", e.tail(h1, h2), withOrigin("batch2",
		x2.change(feed.OpDelete), x3.change(feed.OpUpsert), x4.change(feed.OpUpsert),
		z.change(feed.OpDelete), z2.change(feed.OpUpsert)))

	// An empty Apply writes nothing.
	if err := e.w.Apply(e.ctx, "empty"); err != nil {
		t.Fatalf("Apply with no mutations: %v", err)
	}
	e.noChangesAfter(h2, "an empty Apply")
}

func (s *suite) testApplyInvalid(t *testing.T) {
	e := s.setup(t)
	base := item{ID: "base", Tenant: "t1", Grp: 1}
	e.apply("", base.upsert())
	h0 := e.head()
	before, _, _ := e.snapshot(itemScope(), 100, nil)

	good := item{ID: "good", Tenant: "t1", Grp: 1}
	moved := base
	moved.Tenant = "t2"
	mut := func(f func(m *feed.Mutation)) feed.Mutation {
		m := item{ID: "bad", Tenant: "t1", Grp: 1}.upsert()
		f(&m)
		return m
	}
	bad := map[string]feed.Mutation{
		"nil schema":          mut(func(m *feed.Mutation) { m.Schema = nil }),
		"zero op":             mut(func(m *feed.Mutation) { m.Op = 0 }),
		"unknown op":          mut(func(m *feed.Mutation) { m.Op = 9 }),
		"upsert without row":  mut(func(m *feed.Mutation) { m.Row = nil }),
		"too few scope":       mut(func(m *feed.Mutation) { m.Scope = m.Scope[:1] }),
		"too many scope":      mut(func(m *feed.Mutation) { m.Scope = append(m.Scope, "x") }),
		"no scope":            mut(func(m *feed.Mutation) { m.Scope = nil }),
		"row is not JSON":     mut(func(m *feed.Mutation) { m.Row = json.RawMessage(`{"id":"bad",`) }),
		"nil schema (delete)": {Op: feed.OpDelete, Key: "base"},
	}
	for name, m := range bad {
		for _, muts := range [][]feed.Mutation{
			{m},
			{good.upsert(), moved.upsert(), m},
			{m, good.upsert()},
			{delItem("base"), m},
		} {
			if err := e.w.Apply(e.ctx, "bad", muts...); err == nil {
				t.Fatalf("%s: Apply of %d mutations returned nil, want an error", name, len(muts))
			}
		}
		e.noChangesAfter(h0, name+": a failed Apply")
	}
	after, _, _ := e.snapshot(itemScope(), 100, nil)
	if d := Diff(before, after); d != "" {
		t.Fatalf("failed Applies changed the rows: %s", d)
	}
	if cs := e.all(); len(cs) != 1 {
		t.Fatalf("failed Applies left changes: %d in the log, want 1", len(cs))
	}
}

func (s *suite) testPositions(t *testing.T) {
	e := s.setup(t)
	rng := s.rng(1)
	var last feed.Position
	var want []feed.Change
	for i := range 40 {
		var muts []feed.Mutation
		var exp []feed.Change
		for j := range 1 + rng.IntN(3) {
			if rng.IntN(3) == 0 {
				n := note{ID: int64(i*10 + j), Tenant: "t1", Body: "b"}
				muts, exp = append(muts, n.upsert()), append(exp, n.change(feed.OpUpsert))
			} else {
				it := item{ID: fmt.Sprintf("p%03d-%d", i, j), Tenant: "t1", Grp: int64(j)}
				muts, exp = append(muts, it.upsert()), append(exp, it.change(feed.OpUpsert))
			}
		}
		origin := fmt.Sprintf("o%d", i)
		e.apply(origin, muts...)
		want = append(want, withOrigin(origin, exp...)...)
		h := e.head()
		if h <= last {
			t.Fatalf("Head %d after write %d, was %d before it", h, i, last)
		}
		last = h
	}
	all := e.all() // checks strictly increasing positions
	checkChanges(t, "every change", all, want)
	if all[len(all)-1].Pos > last {
		t.Fatalf("last change at %d, beyond Head %d", all[len(all)-1].Pos, last)
	}
	// Replays of both resources interleave into the full log.
	merged := append(e.replay(itemScope(), 0, last, 7, nil), e.replay(feed.NewScope(Notes, nil), 0, last, 5, nil)...)
	if len(merged) != len(all) {
		t.Fatalf("Replays of both resources hold %d changes, the log %d", len(merged), len(all))
	}
	if h := e.head(); h < last {
		t.Fatalf("Head went back from %d to %d", last, h)
	}
}

type tailResult struct {
	cs  []feed.Change
	err error
}

func (s *suite) testTail(t *testing.T) {
	e := s.setup(t)
	var want []feed.Change
	for i := range 5 {
		it := item{ID: fmt.Sprintf("k%d", i), Tenant: "t1", Grp: 1, N: int64(i)}
		e.apply("o", it.upsert())
		want = append(want, it.change(feed.OpUpsert))
	}
	all := e.all()
	checkChanges(t, "Tail from 0", all, withOrigin("o", want...))

	// Limit is respected, and the result is a prefix of what follows.
	for _, limit := range []int{1, 2, 4} {
		cs, err := e.f.Tail(e.ctx, 0, limit)
		if err != nil {
			t.Fatalf("Tail(0, %d): %v", limit, err)
		}
		if len(cs) == 0 || len(cs) > limit {
			t.Fatalf("Tail(0, %d) returned %d changes", limit, len(cs))
		}
		checkChanges(t, fmt.Sprintf("Tail(0, %d)", limit), cs, all[:len(cs)])
	}
	cs, err := e.f.Tail(e.ctx, all[2].Pos, 100)
	if err != nil {
		t.Fatalf("Tail(after %d): %v", all[2].Pos, err)
	}
	if len(cs) == 0 || cs[0].Pos != all[3].Pos {
		t.Fatalf("Tail(after %d) does not start with %d: %d changes", all[2].Pos, all[3].Pos, len(cs))
	}

	// Tail blocks until a write arrives; every blocked tailer wakes.
	h := e.head()
	const tailers = 3
	done := make(chan tailResult, tailers)
	for range tailers {
		go func() {
			cs, err := e.f.Tail(e.ctx, h, 10)
			done <- tailResult{cs, err}
		}()
	}
	select {
	case r := <-done:
		t.Fatalf("Tail at the head returned before any write: %d changes, err %v", len(r.cs), r.err)
	default:
	}
	late := item{ID: "late", Tenant: "t2", Grp: 5}
	e.apply("waker", late.upsert())
	for range tailers {
		r := <-done
		if r.err != nil {
			t.Fatalf("blocked Tail: %v", r.err)
		}
		checkChanges(t, "blocked Tail", r.cs, withOrigin("waker", late.change(feed.OpUpsert)))
		if r.cs[0].Pos <= h {
			t.Fatalf("blocked Tail returned position %d, not after %d", r.cs[0].Pos, h)
		}
	}

	// Cancelling the context ends a blocked Tail with the context's error.
	h = e.head()
	cctx, cancel := context.WithCancel(e.ctx)
	go func() {
		cs, err := e.f.Tail(cctx, h, 10)
		done <- tailResult{cs, err}
	}()
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) || len(r.cs) != 0 {
		t.Fatalf("cancelled Tail = %d changes, err %v; want context.Canceled", len(r.cs), r.err)
	}
	// So does an expired deadline.
	dctx, dcancel := context.WithTimeout(e.ctx, 0)
	defer dcancel()
	if cs, err := e.f.Tail(dctx, h, 10); !errors.Is(err, context.DeadlineExceeded) || len(cs) != 0 {
		t.Fatalf("Tail with an expired deadline = %d changes, err %v; want context.DeadlineExceeded", len(cs), err)
	}
	// The feed still works after cancelled tails.
	last := item{ID: "last", Tenant: "t1", Grp: 1}
	e.apply("", last.upsert())
	checkChanges(t, "Tail after cancel", e.tail(h, e.head()), []feed.Change{last.change(feed.OpUpsert)})
}

func (s *suite) testReplay(t *testing.T) {
	e := s.setup(t)
	rng := s.rng(2)
	tenants := []string{"t1", "t2", "t3"}
	model := map[string]item{}
	for i := range 120 {
		id := fmt.Sprintf("r%02d", rng.IntN(30))
		it, ok := model[id]
		switch {
		case ok && rng.IntN(5) == 0:
			delete(model, id)
			e.apply("", delItem(id))
			continue
		case ok && rng.IntN(3) == 0:
			it.Tenant, it.Grp = tenants[rng.IntN(3)], int64(rng.IntN(4)) // maybe a move
		case !ok:
			it = item{ID: id, Tenant: tenants[rng.IntN(3)], Grp: int64(rng.IntN(4))}
		}
		it.N = int64(i)
		model[id] = it
		muts := []feed.Mutation{it.upsert()}
		if rng.IntN(4) == 0 {
			muts = append(muts, note{ID: int64(i), Tenant: tenants[rng.IntN(3)], Body: "x"}.upsert())
		}
		e.apply(fmt.Sprint("o", i%4), muts...)
	}
	head := e.head()
	all := e.all()

	scopes := []feed.Scope{
		itemScope(),
		itemScope(tenantIs("t1")),
		itemScope(tenantIs("t1", "t3")),
		itemScope(tenantIs("t2"), grpIs(1)),
		itemScope(tenantIs("t2", "t3"), grpIs(0, 2)),
		itemScope(grpIs(0, 2)),
		itemScope(tenantIs("nobody")),
		feed.NewScope(Notes, []feed.Cond{{Col: 0, Values: []string{"t1"}}}),
	}
	for _, sc := range scopes {
		want := filter(all, sc, 0, head)
		checkChanges(t, "Replay("+sc.Key()+")", e.replay(sc, 0, head, 100000, nil), want)
		for _, limit := range []int{1, 3, 7} {
			checkChanges(t, fmt.Sprintf("Replay(%s) by %d", sc.Key(), limit), e.replay(sc, 0, head, limit, nil), want)
		}
	}

	// Bounds: After is exclusive, Until inclusive.
	items := filter(all, itemScope(), 0, head)
	if len(items) < 20 {
		t.Fatalf("only %d item changes", len(items))
	}
	checkChanges(t, "Replay(items, after 3rd, until 10th)",
		e.replay(itemScope(), items[2].Pos, items[9].Pos, 100, nil), items[3:10])
	for i, j := range map[int]int{0: 0, 5: 5, 9: 4} {
		cs, err := e.f.Replay(e.ctx, feed.ReplayQuery{Scope: itemScope(), After: items[i].Pos, Until: items[j].Pos, Limit: 10})
		if err != nil || len(cs) != 0 {
			t.Fatalf("Replay with Until <= After = %d changes, err %v; want none", len(cs), err)
		}
	}
	for _, sc := range scopes {
		after, until := all[len(all)/4].Pos, all[3*len(all)/4].Pos
		checkChanges(t, "Replay("+sc.Key()+") in bounds", e.replay(sc, after, until, 4, nil), filter(all, sc, after, until))
	}

	// Limit must be positive.
	for _, limit := range []int{0, -1} {
		if _, err := e.f.Replay(e.ctx, feed.ReplayQuery{Scope: itemScope(), Until: head, Limit: limit}); err == nil {
			t.Fatalf("Replay with Limit %d returned no error", limit)
		}
	}

	// Paging with a pinned Until while writes land in the scope: the pages
	// reproduce exactly the changes up to Until, and end with a short page.
	for _, limit := range []int{1, 3, 7} {
		sc := itemScope(tenantIs("t1", "t2"))
		until := e.head()
		want := filter(e.tail(0, until), sc, 0, until)
		i := 0
		got := e.replay(sc, 0, until, limit, func() {
			i++
			it := item{ID: fmt.Sprintf("late-%d-%d", limit, i), Tenant: "t1", Grp: 1}
			e.apply("", it.upsert())
		})
		checkChanges(t, fmt.Sprintf("Replay by %d with a pinned Until", limit), got, want)
		if e.head() == until {
			t.Fatal("no writes happened between pages")
		}
	}
}

func (s *suite) testSnapshot(t *testing.T) {
	e := s.setup(t)
	model := map[string]item{}
	put := func(it item) {
		model[it.ID] = it
		e.apply("", it.upsert())
	}
	tenants := []string{"t1", "t2", "t3"}
	for i := range 25 {
		put(item{ID: fmt.Sprintf("s%02d", i), Tenant: tenants[i%3], Grp: int64(i % 2), Title: "v1", Note: strp(fmt.Sprint(i))})
	}
	e.apply("", note{ID: 1, Tenant: "t1"}.upsert(), note{ID: 2, Tenant: "t2"}.upsert(), note{ID: 10, Tenant: "t1"}.upsert())
	for _, id := range []string{"s00", "s07", "s24"} {
		delete(model, id)
		e.apply("", delItem(id))
	}
	for _, id := range []string{"s03", "s05", "s10"} { // moves
		it := model[id]
		it.Tenant, it.Title = "t2", "moved"
		put(it)
	}
	for _, id := range []string{"s01", "s02"} { // in-place updates
		it := model[id]
		it.Title, it.Done = "v2", true
		put(it)
	}
	head := e.head()
	all := e.all()
	lastWrite := all[len(all)-1].Pos
	current := Rows{}
	for _, it := range model {
		current[RowID{Items.Name, it.ID}] = it.change(feed.OpUpsert)
	}

	scopes := []feed.Scope{
		itemScope(),
		itemScope(tenantIs("t1")),
		itemScope(tenantIs("t2")),
		itemScope(tenantIs("t1", "t3"), grpIs(1)),
		itemScope(grpIs(0)),
		itemScope(tenantIs("nobody")),
	}
	for _, sc := range scopes {
		want := onlyScope(current, sc)
		for _, limit := range []int{1, 4, 1000} {
			rows, first, last := e.snapshot(sc, limit, nil)
			if d := Diff(want, rows); d != "" {
				t.Fatalf("Snapshot(%s) by %d: %s", sc.Key(), limit, d)
			}
			if first < lastWrite || last > head {
				t.Fatalf("Snapshot(%s) pages at %d..%d, want within [%d, %d] (last write, Head)", sc.Key(), first, last, lastWrite, head)
			}
			// A snapshot at Pos equals the fold of the scope's replay up to Pos.
			folded := Fold(nil, e.replay(sc, 0, first, 1000, nil))
			if d := Diff(rows, folded); d != "" {
				t.Fatalf("fold of Replay(%s) up to %d vs Snapshot at it: %s", sc.Key(), first, d)
			}
		}
	}

	// Notes, keyed by integers.
	rows, _, _ := e.snapshot(feed.NewScope(Notes, []feed.Cond{{Col: 0, Values: []string{"t1"}}}), 1, nil)
	want := Fold(nil, []feed.Change{note{ID: 1, Tenant: "t1"}.change(feed.OpUpsert), note{ID: 10, Tenant: "t1"}.change(feed.OpUpsert)})
	if d := Diff(want, rows); d != "" {
		t.Fatalf("Snapshot(notes?tenant=t1): %s", d)
	}

	// After is ignored without HasAfter.
	page, err := e.f.Snapshot(e.ctx, feed.SnapshotQuery{Scope: itemScope(), After: "\xff", Limit: 1000})
	if err != nil || len(page.Rows) != len(current) {
		t.Fatalf("Snapshot with After but not HasAfter = %d rows, err %v; want %d", len(page.Rows), err, len(current))
	}
	// Limit must be positive.
	if _, err := e.f.Snapshot(e.ctx, feed.SnapshotQuery{Scope: itemScope()}); err == nil {
		t.Fatal("Snapshot with Limit 0 returned no error")
	}
}

func (s *suite) testRetention(t *testing.T) {
	e := s.setup(t)
	for i := range 10 {
		e.apply("", item{ID: fmt.Sprintf("k%d", i), Tenant: "t1", Grp: 1}.upsert())
	}
	head := e.head()
	all := e.all()
	p := all[4].Pos
	s.h.Prune(t, e.f, p)
	if h := e.head(); h < head {
		t.Fatalf("Prune moved Head back from %d to %d", head, h)
	}

	sc := itemScope(tenantIs("t1"))
	for _, after := range []feed.Position{0, all[0].Pos, all[3].Pos, p - 1} {
		_, err := e.f.Replay(e.ctx, feed.ReplayQuery{Scope: sc, After: after, Until: head, Limit: 100})
		expectExpired(t, fmt.Sprintf("Replay(after %d) with %d pruned", after, p), err)
		_, err = e.f.Tail(e.ctx, after, 100)
		expectExpired(t, fmt.Sprintf("Tail(after %d) with %d pruned", after, p), err)
	}
	checkChanges(t, "Replay at the floor", e.replay(sc, p, head, 3, nil), all[5:])
	checkChanges(t, "Replay above the floor", e.replay(sc, all[7].Pos, head, 100, nil), all[8:])
	checkChanges(t, "Tail at the floor", e.tail(p, head), all[5:])

	// Current rows survive pruning, and the feed keeps working.
	rows, _, _ := e.snapshot(sc, 3, nil)
	if len(rows) != 10 {
		t.Fatalf("Snapshot after Prune has %d rows, want 10", len(rows))
	}
	more := item{ID: "more", Tenant: "t1", Grp: 1}
	e.apply("", more.upsert())
	got := e.replay(sc, p, e.head(), 100, nil)
	checkChanges(t, "Replay after a write past Prune", got, append(all[5:len(all):len(all)], more.change(feed.OpUpsert)))
}

// testPruneBeyondHead: pruning through a position beyond the head moves the
// floor no further than the head, so the changes committed afterwards are
// read like any others.
func (s *suite) testPruneBeyondHead(t *testing.T) {
	e := s.setup(t)
	for i := range 3 {
		e.apply("", item{ID: fmt.Sprintf("k%d", i), Tenant: "t1", Grp: 1}.upsert())
	}
	head := e.head()
	s.h.Prune(t, e.f, head+1_000_000)
	if h := e.head(); h != head {
		t.Fatalf("Prune beyond the head moved Head from %d to %d", head, h)
	}
	later := item{ID: "later", Tenant: "t1", Grp: 1}
	e.apply("", later.upsert())
	checkChanges(t, "Tail after pruning beyond the head", e.tail(head, e.head()), []feed.Change{later.change(feed.OpUpsert)})
	checkChanges(t, "Replay after pruning beyond the head", e.replay(itemScope(tenantIs("t1")), head, e.head(), 100, nil), []feed.Change{later.change(feed.OpUpsert)})
}

// testCount checks feed.Counter, for feeds that implement it: the counts
// are those of Replay and Snapshot, capped, and an expired cursor is
// refused.
func (s *suite) testCount(t *testing.T) {
	e := s.setup(t)
	counter, ok := e.f.(feed.Counter)
	if !ok {
		t.Skip("the feed does not implement feed.Counter")
	}
	rng := s.rng(7)
	tenants := []string{"t1", "t2", "t3"}
	model := map[string]item{}
	for i := range 150 {
		id := fmt.Sprintf("c%02d", rng.IntN(40))
		it, ok := model[id]
		switch {
		case ok && rng.IntN(5) == 0:
			delete(model, id)
			e.apply("", delItem(id))
			continue
		case ok && rng.IntN(3) == 0:
			it.Tenant, it.Grp = tenants[rng.IntN(3)], int64(rng.IntN(3)) // maybe a move
		case !ok:
			it = item{ID: id, Tenant: tenants[rng.IntN(3)], Grp: int64(rng.IntN(3))}
		}
		it.N = int64(i)
		model[id] = it
		e.apply("", it.upsert(), note{ID: int64(i % 7), Tenant: tenants[i%3], Body: "x"}.upsert())
	}
	head := e.head()
	all := e.all()
	current := Rows{}
	for _, it := range model {
		current[RowID{Items.Name, it.ID}] = it.change(feed.OpUpsert)
	}
	scopes := []feed.Scope{
		itemScope(),
		itemScope(tenantIs("t1")),
		itemScope(tenantIs("t1", "t3"), grpIs(1)),
		itemScope(grpIs(0, 2)),
		itemScope(tenantIs("nobody")),
	}
	for _, sc := range scopes {
		rows := len(onlyScope(current, sc))
		for _, after := range []feed.Position{0, all[len(all)/3].Pos, all[len(all)-2].Pos, head} {
			changes := len(filter(all, sc, after, head))
			for _, limit := range []int{1, 5, 1 << 20} {
				got, err := counter.Count(e.ctx, feed.CountQuery{Scope: sc, After: after, Until: head, MaxChanges: limit, MaxRows: limit})
				want := feed.Counts{Changes: min(changes, limit), Rows: min(rows, limit)}
				if err != nil || got != want {
					t.Fatalf("Count(%s, after %d, caps %d) = %+v, %v; want %+v", sc.Key(), after, limit, got, err, want)
				}
			}
		}
		// Until bounds the changes; zero caps skip a count.
		mid := all[len(all)/2].Pos
		got, err := counter.Count(e.ctx, feed.CountQuery{Scope: sc, After: 0, Until: mid, MaxChanges: 1 << 20})
		if want := (feed.Counts{Changes: len(filter(all, sc, 0, mid))}); err != nil || got != want {
			t.Fatalf("Count(%s, until %d, changes only) = %+v, %v; want %+v", sc.Key(), mid, got, err, want)
		}
		got, err = counter.Count(e.ctx, feed.CountQuery{Scope: sc, MaxRows: 1 << 20})
		if want := (feed.Counts{Rows: rows}); err != nil || got != want {
			t.Fatalf("Count(%s, rows only) = %+v, %v; want %+v", sc.Key(), got, err, want)
		}
	}

	// Below the retained floor the changes cannot be counted; rows still can.
	p := all[len(all)/2].Pos
	s.h.Prune(t, e.f, p)
	_, err := counter.Count(e.ctx, feed.CountQuery{Scope: itemScope(), After: p - 1, Until: head, MaxChanges: 10})
	expectExpired(t, fmt.Sprintf("Count(after %d) with %d pruned", p-1, p), err)
	got, err := counter.Count(e.ctx, feed.CountQuery{Scope: itemScope(), After: p - 1, Until: head, MaxRows: 1 << 20})
	if want := (feed.Counts{Rows: len(current)}); err != nil || got != want {
		t.Fatalf("Count(rows only) after Prune = %+v, %v; want %+v", got, err, want)
	}
}

// testSample checks feed.Sampler, for feeds that implement it: the number
// of the given positions holding a change Replay returns for the scope
// (positions listed twice counted once, positions without a change of it
// not at all), errors for positions not after After and for too many, and
// an expired cursor refused.
func (s *suite) testSample(t *testing.T) {
	e := s.setup(t)
	sampler, ok := e.f.(feed.Sampler)
	if !ok {
		t.Skip("the feed does not implement feed.Sampler")
	}
	rng := s.rng(11)
	tenants := []string{"t1", "t2", "t3"}
	for i := range 120 {
		it := item{ID: fmt.Sprintf("s%02d", rng.IntN(30)), Tenant: tenants[rng.IntN(3)], Grp: int64(rng.IntN(3)), N: int64(i)}
		switch rng.IntN(6) {
		case 0:
			e.apply("", delItem(it.ID))
		case 1:
			e.apply("", note{ID: int64(i % 5), Tenant: it.Tenant, Body: "x"}.upsert())
		default:
			e.apply("", it.upsert())
		}
	}
	head := e.head()
	all := e.all()
	scopes := []feed.Scope{
		itemScope(),
		itemScope(tenantIs("t1")),
		itemScope(tenantIs("t1", "t3"), grpIs(1)),
		itemScope(tenantIs("nobody")),
	}
	for _, sc := range scopes {
		for _, after := range []feed.Position{0, all[len(all)/3].Pos, all[len(all)-2].Pos} {
			in := map[feed.Position]bool{}
			for _, c := range filter(all, sc, after, head) {
				in[c.Pos] = true
			}
			for range 5 {
				// Positions of the log, some twice, and some past the head.
				var at []feed.Position
				want := map[feed.Position]bool{}
				for range 1 + rng.IntN(40) {
					p := after + 1 + feed.Position(rng.IntN(int(head-after)+3))
					at = append(at, p)
					if in[p] {
						want[p] = true
					}
				}
				got, err := sampler.SampleChanges(e.ctx, feed.SampleQuery{Scope: sc, After: after, At: at})
				if err != nil || got != len(want) {
					t.Fatalf("SampleChanges(%s, after %d, at %v) = %d, %v; want %d", sc.Key(), after, at, got, err, len(want))
				}
			}
		}
	}
	for _, bad := range []feed.SampleQuery{
		{Scope: itemScope(), After: 5, At: []feed.Position{6, 5}},
		{Scope: itemScope(), At: make([]feed.Position, feed.MaxSample+1)},
		{At: []feed.Position{1}},
	} {
		if _, err := sampler.SampleChanges(e.ctx, bad); err == nil || errors.Is(err, feed.ErrCursorExpired) {
			t.Fatalf("SampleChanges(%d positions after %d, schema %v): error %v, want one for the query", len(bad.At), bad.After, bad.Scope.Schema != nil, err)
		}
	}

	// Below the retained floor the changes cannot be sampled.
	p := all[len(all)/2].Pos
	s.h.Prune(t, e.f, p)
	_, err := sampler.SampleChanges(e.ctx, feed.SampleQuery{Scope: itemScope(), After: p - 1, At: []feed.Position{p, head}})
	expectExpired(t, fmt.Sprintf("SampleChanges(after %d) with %d pruned", p-1, p), err)
}
