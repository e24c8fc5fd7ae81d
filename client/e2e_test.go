package client

// End-to-end tests: a real engine (in-memory feed) behind the real
// middleware on a loopback server, and a real Client over WebSockets.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

var (
	p1 = Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p1"}}
	p2 = Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p2"}}
)

// storeWatch wraps a CursorStore and lets a test wait for a saved record.
type storeWatch struct {
	CursorStore
	mu      sync.Mutex
	changed chan struct{}
}

func newStoreWatch(s CursorStore) *storeWatch {
	return &storeWatch{CursorStore: s, changed: make(chan struct{})}
}

func (w *storeWatch) Save(ctx context.Context, r Record) error {
	err := w.CursorStore.Save(ctx, r)
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	return err
}

func (w *storeWatch) wait(ctx context.Context, t *testing.T, s Scope, what string, ok func(Record) bool) Record {
	t.Helper()
	d, _ := s.Digest()
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		r, found, err := w.Load(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if found && ok(r) {
			return r
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for the record of %s: %s; last %+v", s, what, r)
		}
	}
}

// expectRows waits until m holds exactly want.
func expectRows(ctx context.Context, t *testing.T, m *testRows, want map[string]todo) {
	t.Helper()
	err := m.Wait(ctx, func(rows map[string]json.RawMessage) bool {
		if len(rows) != len(want) {
			return false
		}
		for k, raw := range rows {
			w, ok := want[k]
			if !ok {
				return false
			}
			got, err := protocol.DecodeRow[todo](raw)
			if err != nil || got != w {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("mirror did not converge: have %v\nwant %v", decodeRows(t, m.Rows()), want)
	}
}

func TestE2ESnapshotCatchUpLiveAndOwnOrigin(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{PageSize: 2})
	for i := 1; i <= 5; i++ {
		srv.upsert(t, ctx, todo{ID: fmt.Sprintf("t%d", i), ProjectID: "p1", Title: "seed"})
	}
	srv.upsert(t, ctx, todo{ID: "t9", ProjectID: "p2", Title: "other project"})

	store := newStoreWatch(NewMemoryStore())
	c, _ := newTestClient(t, Config{URL: srv.url, Store: store})
	rec := newRecorder()
	if _, err := c.Subscribe(p1, rec); err != nil {
		t.Fatal(err)
	}
	start(t, c)

	// Snapshot in pages of 2, the first with Reset, then caught-up.
	got := rec.wait(ctx, t, "caught-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })
	if len(got) != 4 {
		t.Fatalf("want 3 snapshot pages and caught-up:\n%s", describeBatches(got))
	}
	var keys []string
	for i, b := range got[:3] {
		if b.Reset != (i == 0) || b.CaughtUp {
			t.Errorf("page %d: reset=%v caughtUp=%v; only the first page resets", i, b.Reset, b.CaughtUp)
		}
		keys = append(keys, batchKeys(b)...)
	}
	if want := []string{"u:t1", "u:t2", "u:t3", "u:t4", "u:t5"}; !slices.Equal(keys, want) {
		t.Errorf("snapshot entries %v, want %v", keys, want)
	}
	if last := got[3]; !last.CaughtUp || last.Reset || len(last.Entries) != 0 {
		t.Errorf("last batch %+v, want a bare caught-up", last)
	}
	want := map[string]todo{}
	for i := 1; i <= 5; i++ {
		want[fmt.Sprintf("t%d", i)] = todo{ID: fmt.Sprintf("t%d", i), ProjectID: "p1", Title: "seed"}
	}
	expectRows(ctx, t, &rec.mirror, want)

	// Live: insert, update, delete, a write elsewhere, a move out.
	srv.upsert(t, ctx, todo{ID: "t6", ProjectID: "p1", Title: "new"})
	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1", Title: "edited", Done: true})
	srv.delete(t, ctx, todo{ID: "t2"})
	srv.upsert(t, ctx, todo{ID: "t7", ProjectID: "p2", Title: "elsewhere"})
	srv.upsert(t, ctx, todo{ID: "t3", ProjectID: "p2", Title: "moved"})
	want["t6"] = todo{ID: "t6", ProjectID: "p1", Title: "new"}
	want["t1"] = todo{ID: "t1", ProjectID: "p1", Title: "edited", Done: true}
	delete(want, "t2")
	delete(want, "t3")
	expectRows(ctx, t, &rec.mirror, want)
	if hasKey(rec.all(), "t7") || hasKey(rec.all(), "t9") {
		t.Error("rows of another project reached the scope")
	}

	// Own origin: a write made for this client that no ack of its own
	// delivered (the app's own handler, tagged with the client's origin)
	// reaches the handler like any other.
	own := core.WithOrigin(ctx, c.Origin())
	srv.upsert(t, own, todo{ID: "t8", ProjectID: "p1", Title: "mine"})
	head := srv.head(t)
	store.wait(ctx, t, p1, "the cursor past the own-origin write", func(r Record) bool {
		c, err := protocol.ParseCursor(r.Cursor)
		return err == nil && !c.Snapshot && c.Pos >= head.Pos
	})
	srv.upsert(t, ctx, todo{ID: "t10", ProjectID: "p1", Title: "theirs"})
	want["t8"] = todo{ID: "t8", ProjectID: "p1", Title: "mine"}
	want["t10"] = todo{ID: "t10", ProjectID: "p1", Title: "theirs"}
	expectRows(ctx, t, &rec.mirror, want)
}

func TestE2EReconnectResumesWithExactlyTheMissedChanges(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{})
	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1"}, todo{ID: "t2", ProjectID: "p1"}, todo{ID: "t3", ProjectID: "p1"})

	var g gate
	c, events := newTestClient(t, Config{URL: srv.url, Dialer: g.dialer()})
	rec := newRecorder()
	if _, err := c.Subscribe(p1, rec); err != nil {
		t.Fatal(err)
	}
	start(t, c)
	rec.wait(ctx, t, "the first catch-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })
	before := len(rec.all())

	// Drop the connection and keep the client away while writes happen.
	g.hold()
	c.Reconnect()
	events.waitKind(ctx, t, EventDisconnected, 1)
	srv.upsert(t, ctx, todo{ID: "t4", ProjectID: "p1", Title: "added"})
	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1", Title: "edited"})
	srv.delete(t, ctx, todo{ID: "t2"})
	srv.upsert(t, ctx, todo{ID: "t5", ProjectID: "p2", Title: "not in scope"})
	srv.upsert(t, ctx, todo{ID: "t6", ProjectID: "p1", Title: "added too"})
	g.release()

	got := rec.wait(ctx, t, "the second catch-up", func(bs []Batch) bool { return countCaughtUp(bs) == 2 })[before:]
	// One replay page (one callback) with exactly the four missed changes
	// of the scope, then caught-up; no reset, nothing replayed twice.
	if len(got) != 2 || got[0].Reset || got[1].Reset || !got[1].CaughtUp {
		t.Fatalf("after reconnect:\n%s", describeBatches(got))
	}
	if keys, want := batchKeys(got[0]), []string{"u:t4", "u:t1", "d:t2", "u:t6"}; !slices.Equal(keys, want) {
		t.Errorf("replayed %v, want exactly the missed %v", keys, want)
	}
	expectRows(ctx, t, &rec.mirror, map[string]todo{
		"t1": {ID: "t1", ProjectID: "p1", Title: "edited"},
		"t3": {ID: "t3", ProjectID: "p1"},
		"t4": {ID: "t4", ProjectID: "p1", Title: "added"},
		"t6": {ID: "t6", ProjectID: "p1", Title: "added too"},
	})
	if n := events.count(EventConnected); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// streamWithDisruption writes n rows one change at a time while hook
// disrupts the client (it runs in the handler before each batch is
// applied, with the number of connections made so far), waits until the
// client has made conns connections, and checks that every change was
// applied exactly once.
//
// Before writing row i, with i a key of pauses, it waits until the client
// has made pauses[i] connections, so a later disruption is sure to find
// rows still to deliver on a later connection.
func streamWithDisruption(t *testing.T, n, conns int, pauses map[int]int, hook func(c *Client, connected int, b Batch) error) (*recorder, *eventLog) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{})
	c, events := newTestClient(t, Config{URL: srv.url})
	rec := newRecorder()
	// EventConnected is reported before any batch of its connection is
	// applied, so the count tells the hook which connection it is on.
	rec.hook = func(b Batch) error { return hook(c, events.count(EventConnected), b) }
	if _, err := c.Subscribe(p1, rec); err != nil {
		t.Fatal(err)
	}
	start(t, c)
	rec.wait(ctx, t, "the first catch-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })

	for i := range n {
		if k, ok := pauses[i]; ok {
			events.waitKind(ctx, t, EventConnected, k)
		}
		srv.upsert(t, ctx, todo{ID: fmt.Sprintf("k%03d", i), ProjectID: "p1", Title: "v1"})
	}
	events.waitKind(ctx, t, EventConnected, conns)
	// A sentinel written once the last connection is up: when it is
	// applied, every earlier change has been, and any duplicate from a
	// replay would have come before it.
	srv.upsert(t, ctx, todo{ID: "zz-end", ProjectID: "p1"})
	rec.wait(ctx, t, "the sentinel", func(bs []Batch) bool { return hasKey(bs, "zz-end") })

	seen := map[string]int{}
	for _, b := range rec.all() {
		if b.Reset && !b.CaughtUp {
			t.Errorf("unexpected reset batch %+v", b)
		}
		for _, e := range b.Entries {
			seen[e.Key]++
		}
	}
	for i := range n {
		k := fmt.Sprintf("k%03d", i)
		if seen[k] != 1 {
			t.Errorf("%s applied %d times, want exactly once", k, seen[k])
		}
	}
	if t.Failed() {
		t.Logf("batches, in apply order:\n%s", describeBatches(rec.all()))
	}
	if rec.mirror.Len() != n+1 {
		t.Errorf("mirror has %d rows, want %d", rec.mirror.Len(), n+1)
	}
	if got := events.count(EventConnected); got != conns {
		t.Errorf("%d connections, want %d", got, conns)
	}
	return rec, events
}

// hasKeyFrom reports whether b has an entry k<i> with i >= from.
func hasKeyFrom(b Batch, from int) bool {
	return slices.ContainsFunc(b.Entries, func(e protocol.Entry) bool {
		var i int
		_, err := fmt.Sscanf(e.Key, "k%03d", &i)
		return err == nil && i >= from
	})
}

func TestE2EReconnectMidStreamDeliversEachChangeOnce(t *testing.T) {
	streamWithDisruption(t, 200, 3, map[int]int{100: 2}, func(c *Client, connected int, b Batch) error {
		// Drop the first connection once k050 or later arrives, the second
		// once k120 or later does; from inside an apply, so the batch
		// being applied still counts.
		if connected == 1 && hasKeyFrom(b, 50) || connected == 2 && hasKeyFrom(b, 120) {
			c.Reconnect()
		}
		return nil
	})
}

func TestE2EApplyErrorLosesNothing(t *testing.T) {
	rec, events := streamWithDisruption(t, 100, 2, nil, func(_ *Client, connected int, b Batch) error {
		if connected == 1 && hasKeyFrom(b, 30) {
			return fmt.Errorf("handler failed on purpose")
		}
		return nil
	})
	if rec.failureCount() != 1 || events.count(EventApplyError) != 1 {
		t.Errorf("failures %d, apply-error events %d; want 1 each", rec.failureCount(), events.count(EventApplyError))
	}
}

func TestE2EFileStoreResumesAfterRestart(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{})
	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1"}, todo{ID: "t2", ProjectID: "p1"})
	path := filepath.Join(t.TempDir(), "cursors.json")

	// First run: catch up, take a live change, stop.
	store1, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := newTestClient(t, Config{URL: srv.url, Store: store1})
	rec1 := newRecorder()
	if _, err := c1.Subscribe(p1, rec1); err != nil {
		t.Fatal(err)
	}
	h1 := start(t, c1)
	rec1.wait(ctx, t, "caught-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })
	srv.upsert(t, ctx, todo{ID: "t3", ProjectID: "p1"})
	rec1.wait(ctx, t, "t3", func(bs []Batch) bool { return hasKey(bs, "t3") })
	h1.stop(t)
	applied := rec1.all()
	lastCursor := applied[len(applied)-1].Cursor

	// While stopped.
	srv.upsert(t, ctx, todo{ID: "t4", ProjectID: "p1"})
	srv.delete(t, ctx, todo{ID: "t1"})

	// A new process: a new store on the same file, a new client.
	store2, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := p1.Digest()
	r, ok, _ := store2.Load(ctx, d)
	if !ok || r.Cursor != lastCursor || r.State != StateLive {
		t.Fatalf("persisted record %+v, want cursor %s, live", r, lastCursor)
	}
	c2, _ := newTestClient(t, Config{URL: srv.url, Store: store2})
	rec2 := newRecorder()
	if _, err := c2.Subscribe(p1, rec2); err != nil {
		t.Fatal(err)
	}
	start(t, c2)
	got := rec2.wait(ctx, t, "caught-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })
	var keys []string
	for _, b := range got {
		if b.Reset {
			t.Errorf("a resume from a persisted cursor delivered Reset: %+v", b)
		}
		keys = append(keys, batchKeys(b)...)
	}
	if want := []string{"u:t4", "d:t1"}; !slices.Equal(keys, want) {
		t.Errorf("resumed with %v, want exactly the changes made while stopped %v", keys, want)
	}
}

func TestE2ESubscribeAndUnsubscribeWhileRunning(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{})
	srv.upsert(t, ctx, todo{ID: "a1", ProjectID: "p1"}, todo{ID: "b1", ProjectID: "p2"}, todo{ID: "b2", ProjectID: "p2"})
	c, _ := newTestClient(t, Config{URL: srv.url})
	rec1 := newRecorder()
	sub1, err := c.Subscribe(p1, rec1)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	rec1.wait(ctx, t, "p1 caught-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })

	rec2 := newRecorder()
	if _, err := c.Subscribe(p2, rec2); err != nil {
		t.Fatal(err)
	}
	got := rec2.wait(ctx, t, "p2 caught-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })
	if !got[0].Reset || !maps.Equal(map[string]bool{"b1": true, "b2": true}, keysOf(rec2.mirror.Rows())) {
		t.Errorf("p2 snapshot:\n%s", describeBatches(got))
	}

	if err := sub1.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	n1 := len(rec1.all())
	srv.upsert(t, ctx, todo{ID: "a2", ProjectID: "p1"}) // may still be pushed for the old id: ignored
	srv.upsert(t, ctx, todo{ID: "b3", ProjectID: "p2"})
	rec2.wait(ctx, t, "b3", func(bs []Batch) bool { return hasKey(bs, "b3") })
	// Frames of one connection arrive in order: a2's, if any, came first.
	if got := rec1.all(); len(got) != n1 {
		t.Errorf("p1 got batches after Unsubscribe:\n%s", describeBatches(got[n1:]))
	}
}

func keysOf(rows map[string]json.RawMessage) map[string]bool {
	out := map[string]bool{}
	for k := range rows {
		out[k] = true
	}
	return out
}

// More scopes than the server's frame burst: the client paces its
// subscribes so none is dropped by the server's rate limit.
func TestE2EManyScopesAllSubscribed(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{}) // default frame limits: 50/s, burst 100
	const n = 130
	for i := range n {
		srv.upsert(t, ctx, todo{ID: fmt.Sprintf("t%d", i), ProjectID: fmt.Sprintf("p%d", i)})
	}
	c, events := newTestClient(t, Config{URL: srv.url})
	mirrors := make([]*testRows, n)
	for i := range n {
		mirrors[i] = newTestRows()
		if _, err := c.Subscribe(Scope{Resource: "todos", Conditions: map[string]any{"project_id": fmt.Sprintf("p%d", i)}}, mirrors[i]); err != nil {
			t.Fatal(err)
		}
	}
	start(t, c)
	events.waitKind(ctx, t, EventCaughtUp, n)
	for i, m := range mirrors {
		if m.Len() != 1 {
			t.Errorf("scope p%d has %d rows, want 1", i, m.Len())
		}
	}
	if n := events.count(EventServerError); n != 0 {
		t.Errorf("%d server errors: %v", n, events.all())
	}
}
