package feedtest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/tidesync/tide/core/feed"
)

// world is a model of the rows a sequence of writes leaves behind.
type world struct {
	rng     *rand.Rand
	prefix  string // of item keys
	noteID  int64  // first note id
	keys    int    // item keys and note ids to choose from
	tenants []string
	groups  int
	items   map[string]item
	notes   map[int64]note
	seq     int
}

func newWorld(rng *rand.Rand, prefix string, keys int) *world {
	return &world{
		rng: rng, prefix: prefix, keys: keys,
		tenants: []string{"t0", "t1", "t2"}, groups: 3,
		items: map[string]item{}, notes: map[int64]note{},
	}
}

// next returns one random mutation, the changes it must produce, and updates
// the model.
func (w *world) next() (feed.Mutation, []feed.Change) {
	w.seq++
	r := w.rng
	if r.IntN(8) == 0 { // a note
		id := w.noteID + int64(r.IntN(w.keys))
		if n, ok := w.notes[id]; ok && r.IntN(3) == 0 {
			delete(w.notes, id)
			return delNote(id), []feed.Change{n.change(feed.OpDelete)}
		}
		n := note{ID: id, Tenant: w.tenants[r.IntN(len(w.tenants))], Body: fmt.Sprint("b", w.seq)}
		old, ok := w.notes[id]
		w.notes[id] = n
		if ok && old.Tenant != n.Tenant {
			return n.upsert(), []feed.Change{old.change(feed.OpDelete), n.change(feed.OpUpsert)}
		}
		return n.upsert(), []feed.Change{n.change(feed.OpUpsert)}
	}
	id := w.prefix + strconv.Itoa(r.IntN(w.keys))
	old, ok := w.items[id]
	if !ok {
		if r.IntN(6) == 0 {
			return delItem(id), nil // delete of a missing row: nothing
		}
		it := item{ID: id, Tenant: w.tenants[r.IntN(len(w.tenants))], Grp: int64(r.IntN(w.groups)), Title: fmt.Sprint("v", w.seq)}
		if r.IntN(2) == 0 {
			it.Note = strp(fmt.Sprint("note ", w.seq))
		}
		w.items[id] = it
		return it.upsert(), []feed.Change{it.change(feed.OpUpsert)}
	}
	switch r.IntN(10) {
	case 0, 1, 2: // delete
		delete(w.items, id)
		return delItem(id), []feed.Change{old.change(feed.OpDelete)}
	case 3, 4, 5: // move (possibly to the same scope, which is an update)
		it := old
		it.Tenant, it.Grp = w.tenants[r.IntN(len(w.tenants))], int64(r.IntN(w.groups))
		it.N++
		w.items[id] = it
		if it.Tenant != old.Tenant || it.Grp != old.Grp {
			return it.upsert(), []feed.Change{old.change(feed.OpDelete), it.change(feed.OpUpsert)}
		}
		return it.upsert(), []feed.Change{it.change(feed.OpUpsert)}
	default: // update in place
		it := old
		it.N++
		it.Done = !it.Done
		it.Title = fmt.Sprint("v", w.seq)
		if r.IntN(3) == 0 {
			it.Note = nil
		}
		w.items[id] = it
		return it.upsert(), []feed.Change{it.change(feed.OpUpsert)}
	}
}

// batch returns 1 to 4 mutations (mostly 1) and their changes.
func (w *world) batch() ([]feed.Mutation, []feed.Change) {
	n := 1
	if w.rng.IntN(4) == 0 {
		n = 2 + w.rng.IntN(3)
	}
	var muts []feed.Mutation
	var changes []feed.Change
	for range n {
		m, cs := w.next()
		muts, changes = append(muts, m), append(changes, cs...)
	}
	return muts, changes
}

// rows returns the model's current rows.
func (w *world) rows() Rows {
	out := make(Rows, len(w.items)+len(w.notes))
	for _, it := range w.items {
		out[RowID{Items.Name, it.ID}] = it.change(feed.OpUpsert)
	}
	for _, n := range w.notes {
		out[RowID{Notes.Name, n.key()}] = n.change(feed.OpUpsert)
	}
	return out
}

// scope returns a random scope of Items or Notes.
func (w *world) scope() feed.Scope {
	r := w.rng
	pick := func() []string {
		vals := []string{w.tenants[r.IntN(len(w.tenants))]}
		if r.IntN(2) == 0 {
			vals = append(vals, w.tenants[r.IntN(len(w.tenants))])
		}
		return vals
	}
	if r.IntN(6) == 0 {
		if r.IntN(2) == 0 {
			return feed.NewScope(Notes, nil)
		}
		return feed.NewScope(Notes, []feed.Cond{{Col: 0, Values: pick()}})
	}
	var conds []feed.Cond
	if r.IntN(3) > 0 {
		conds = append(conds, tenantIs(pick()...))
	}
	if r.IntN(2) == 0 {
		g := []int64{int64(r.IntN(w.groups))}
		if r.IntN(2) == 0 {
			g = append(g, int64(r.IntN(w.groups)))
		}
		conds = append(conds, grpIs(g...))
	}
	return itemScope(conds...)
}

// testRandom writes several hundred random mutations, checks them against a
// model, and checks that replay, snapshot and the snapshot-then-replay seam
// all converge to the model.
func (s *suite) testRandom(t *testing.T) {
	e := s.setup(t)
	w := newWorld(s.rng(3), "k", 40)
	var want []feed.Change
	for i := range 300 {
		muts, cs := w.batch()
		origin := fmt.Sprint("o", i%5)
		e.apply(origin, muts...)
		want = append(want, withOrigin(origin, cs...)...)
	}
	all := e.all()
	checkChanges(t, "random writes", all, want)
	if d := Diff(w.rows(), Fold(nil, all)); d != "" {
		t.Fatalf("fold of the whole log vs model: %s", d)
	}

	for range 12 {
		sc := w.scope()
		head := e.head()
		limit := 1 + w.rng.IntN(20)
		snap, first, _ := e.snapshot(sc, limit, nil)
		if d := Diff(onlyScope(w.rows(), sc), snap); d != "" {
			t.Fatalf("Snapshot(%s) by %d vs model: %s", sc.Key(), limit, d)
		}
		if first > head {
			t.Fatalf("Snapshot(%s) at %d, beyond Head %d", sc.Key(), first, head)
		}
		if d := Diff(snap, Fold(nil, e.replay(sc, 0, first, limit, nil))); d != "" {
			t.Fatalf("fold of Replay(%s) up to %d vs Snapshot at it: %s", sc.Key(), first, d)
		}

		// The seam: snapshot pages with writes landing between them, then a
		// replay from the FIRST page's position up to the head, converge to
		// the current rows.
		got, first, _ := e.snapshot(sc, limit, func() {
			for range 1 + w.rng.IntN(3) {
				muts, _ := w.batch()
				e.apply("between", muts...)
			}
		})
		end := e.head()
		Fold(got, e.replay(sc, first, end, limit, nil))
		if d := Diff(onlyScope(w.rows(), sc), got); d != "" {
			t.Fatalf("Snapshot(%s) by %d from %d with writes between pages, then Replay to %d, vs model: %s", sc.Key(), limit, first, end, d)
		}
	}
	if d := Diff(w.rows(), Fold(nil, e.all())); d != "" {
		t.Fatalf("fold of the whole log vs model at the end: %s", d)
	}
}

// testConcurrent runs writers in parallel while one goroutine tails: it must
// see every change exactly once, in strictly increasing positions, and the
// fold of what it saw must equal the snapshot.
func (s *suite) testConcurrent(t *testing.T) {
	e := s.setup(t)
	const writers, writes = 8, 100
	sentinel := note{ID: 1 << 40, Tenant: "done"}

	tailed := make(chan tailResult, 1)
	go func() {
		var got []feed.Change
		var after feed.Position
		for {
			cs, err := e.f.Tail(e.ctx, after, 64)
			if err != nil {
				tailed <- tailResult{got, err}
				return
			}
			got = append(got, cs...)
			after = cs[len(cs)-1].Pos
			for _, c := range cs {
				if c.Resource == Notes.Name && c.Key == sentinel.key() {
					tailed <- tailResult{got, nil}
					return
				}
			}
		}
	}()

	// A reader checks that Head never decreases while writes land.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		var last feed.Position
		for {
			select {
			case <-stop:
				return
			default:
			}
			h, err := e.f.Head(e.ctx)
			if err != nil {
				t.Errorf("Head: %v", err)
				return
			}
			if h < last {
				t.Errorf("Head went back from %d to %d", last, h)
				return
			}
			last = h
		}
	})

	expected := make([][]feed.Change, writers)
	models := make([]*world, writers)
	var wg sync.WaitGroup
	for i := range writers {
		models[i] = newWorld(s.rng(uint64(100+i)), fmt.Sprintf("w%d-", i), 8)
		models[i].tenants = []string{"t0", "t1"}
		models[i].noteID = int64(1000 * i) // writers never share a row
		wg.Go(func() {
			origin := fmt.Sprint("w", i)
			for range writes {
				muts, cs := models[i].batch()
				if err := e.w.Apply(e.ctx, origin, muts...); err != nil {
					t.Errorf("writer %d: Apply: %v", i, err)
					return
				}
				expected[i] = append(expected[i], withOrigin(origin, cs...)...)
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if t.Failed() {
		t.FailNow()
	}
	e.apply("", sentinel.upsert())
	r := <-tailed
	if r.err != nil {
		t.Fatalf("tailer: %v after %d changes", r.err, len(r.cs))
	}
	got := r.cs
	checkIncreasing(t, "concurrent Tail", 0, got)
	total := 1
	for i := range writers {
		total += len(expected[i])
		var mine []feed.Change
		for _, c := range got {
			if c.Origin == fmt.Sprint("w", i) {
				mine = append(mine, c)
			}
		}
		checkChanges(t, fmt.Sprintf("writer %d's changes as tailed", i), mine, expected[i])
	}
	if len(got) != total {
		t.Fatalf("tailed %d changes, want %d", len(got), total)
	}
	end := got[len(got)-1].Pos
	checkChanges(t, "Replay(items) vs Tail", e.replay(itemScope(), 0, end, 50, nil), filter(got, itemScope(), 0, end))

	folded := Fold(nil, got)
	for _, sc := range []feed.Scope{itemScope(), feed.NewScope(Notes, nil)} {
		rows, _, _ := e.snapshot(sc, 100, nil)
		if d := Diff(rows, onlyScope(folded, sc)); d != "" {
			t.Fatalf("fold of the tail vs Snapshot(%s): %s", sc.Key(), d)
		}
	}
}
