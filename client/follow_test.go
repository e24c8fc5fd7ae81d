package client

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

type note struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Body      string `tide:"body"`
}

// TestRestartResumesFollowedScopes: a client with a FileStore follows a
// project's todos and notes with one scope, and another project's todos
// with Sync; a new client on the same file, declaring nothing, resumes
// both from their stored cursors: the scope of two resources receives only
// what changed while no client ran (no reset, no snapshot), and the synced
// one its rows. Forget drops a scope from the store for good.
func TestRestartResumesFollowedScopes(t *testing.T) {
	ctx := testCtx(t)
	srv, notes := newNotesServer(t)
	var err error
	path := filepath.Join(t.TempDir(), "store.json")
	project := Scope{Resources: []string{"todos", "notes"}, Conditions: map[string]any{"project_id": "p7"}}
	other := Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p8"}}
	kept := Scope{Resources: []string{"todos", "notes"}, Conditions: map[string]any{"project_id": "p9"}}

	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p7", Title: "one"}, todo{ID: "t8", ProjectID: "p8"}, todo{ID: "k", ProjectID: "p9"})
	if err := notes.Upsert(ctx, note{ID: "n1", ProjectID: "p7", Body: "first"}, note{ID: "k", ProjectID: "p9"}); err != nil {
		t.Fatal(err)
	}

	store, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := newTestClient(t, Config{URL: srv.url, Store: store})
	rec1 := newRecorder()
	sub, err := c1.Subscribe(project, rec1)
	if err != nil {
		t.Fatal(err)
	}
	synced, err := c1.Sync(other)
	if err != nil {
		t.Fatal(err)
	}
	syncedMulti, err := c1.Sync(kept)
	if err != nil {
		t.Fatal(err)
	}
	run := start(t, c1)
	for _, s := range []*Subscription{sub, synced, syncedMulti} {
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := entryKeys(rec1.all()); !slices.Equal(got, []string{"notes/n1", "todos/t1"}) {
		t.Fatalf("first run: %v", got)
	}
	if err := run.stop(t); err != context.Canceled {
		t.Fatalf("Run: %v", err)
	}

	// While no client runs.
	srv.upsert(t, ctx, todo{ID: "t2", ProjectID: "p7"}, todo{ID: "t1", ProjectID: "p7", Title: "one, edited"}, todo{ID: "t9", ProjectID: "p8"})
	if err := notes.Upsert(ctx, note{ID: "n2", ProjectID: "p7"}); err != nil {
		t.Fatal(err)
	}

	store2, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	rec2 := newRecorder()
	var handed []Scope
	c2, events := newTestClient(t, Config{URL: srv.url, Store: store2, Handler: func(s Scope) Handler {
		handed = append(handed, s)
		return rec2
	}})
	followed, err := c2.Followed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(followed) != 3 {
		t.Fatalf("followed %v, want the three scopes", followed)
	}
	start(t, c2)
	events.waitKind(ctx, t, EventCaughtUp, 3)
	subs := c2.Subscriptions()
	if len(subs) != 3 {
		t.Fatalf("%d subscriptions resumed, want 3", len(subs))
	}
	for _, s := range subs {
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(handed) != 1 || handed[0].String() != project.String() {
		t.Fatalf("Config.Handler was asked for %v, want only %s", handed, project)
	}
	bs := rec2.all()
	for _, b := range bs {
		if b.Reset {
			t.Fatalf("the resumed scope was reset: %s", describeBatches(bs))
		}
	}
	if got := entryKeys(bs); !slices.Equal(got, []string{"notes/n2", "todos/t1", "todos/t2"}) {
		t.Fatalf("resumed scope got %v, want only the missed changes", got)
	}
	var rows map[string]todo
	for _, s := range subs {
		if s.Scope().String() == other.String() {
			rows = decodeRows(t, s.Rows())
		}
	}
	if _, ok := rows["t9"]; !ok || len(rows) != 2 {
		t.Fatalf("resumed synced scope holds %v, want t8 and t9", rows)
	}
	// A synced scope of two resources keeps a row of each under one key.
	for _, s := range subs {
		if s.Scope().String() != kept.String() {
			continue
		}
		if len(s.Rows()) != 2 || len(s.RowsOf("todos")) != 1 || len(s.RowsOf("notes")) != 1 || s.RowsOf("nope") != nil {
			t.Fatalf("resumed synced scope of two resources holds %v", s.Rows())
		}
	}

	if err := c2.Forget(ctx, project); err != nil {
		t.Fatal(err)
	}
	if followed, _ := c2.Followed(ctx); len(followed) != 2 || slices.ContainsFunc(followed, func(s Scope) bool { return s.String() == project.String() }) {
		t.Fatalf("after Forget: followed %v", followed)
	}
	d, _ := project.Digest()
	if _, ok, _ := store2.Load(ctx, d); ok {
		t.Fatal("Forget left the record in the store")
	}
}

// entryKeys returns the entries' resource/key, sorted, each once.
func entryKeys(bs []Batch) []string {
	var out []string
	for _, b := range bs {
		for _, e := range b.Entries {
			out = append(out, e.Resource+"/"+e.Key)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TestMultiResourceWire: a scope of several resources subscribes with
// resources and without resource (a server that knows only one resource per
// subscription refuses it rather than serve one), its batches keep each
// entry's resource, and an entry of another resource or without one is a
// protocol error.
func TestMultiResourceWire(t *testing.T) {
	ctx := testCtx(t)
	fs := newFakeServer(t)
	c, events := newTestClient(t, Config{URL: fs.url})
	scope := Scope{Resources: []string{"todos", "comments", "todos"}, Conditions: map[string]any{"project_id": "p7"}}
	rec := newRecorder()
	if _, err := c.Subscribe(scope, rec); err != nil {
		t.Fatal(err)
	}
	start(t, c)
	fc := fs.accept(ctx, t)
	fc.handshake(ctx, t)
	sub := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if sub.Resource != "" || !slices.Equal(sub.Resources, []string{"comments", "todos"}) {
		t.Fatalf("subscribe names resource %q, resources %q", sub.Resource, sub.Resources)
	}
	fc.send(t, changes(sub.ID, cur(2), with(up("t1"), "resource", "todos"), with(up("c1"), "resource", "comments")))
	got := rec.wait(ctx, t, "a batch", func(bs []Batch) bool { return len(bs) == 1 })
	if keys := entryKeys(got); !slices.Equal(keys, []string{"comments/c1", "todos/t1"}) {
		t.Fatalf("batch %v", keys)
	}
	fc.send(t, changes(sub.ID, cur(3), up("t2")))
	events.waitKind(ctx, t, EventProtocolError, 1)
}

// TestMultiResourceTransactionOneBatch: a mutation that writes a todo and a
// note of one project in one transaction reaches a scope following both as
// one batch; the synced copy of the same scope changes once, showing both
// the optimistic rows and then the server's, never one without the other.
func TestMultiResourceTransactionOneBatch(t *testing.T) {
	ctx := testCtx(t)
	srv, notes := newNotesServer(t)
	type args struct{ ID string }
	err := core.AddMutator(srv.todos, "pair", core.Mutator[args]{
		Authorize: func(context.Context, authz.Principal, args) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a args) error {
			if err := srv.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p7"}); err != nil {
				return err
			}
			return notes.UpsertTx(ctx, tx, note{ID: a.ID, ProjectID: "p7", Body: "about " + a.ID})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	scope := Scope{Resources: []string{"todos", "notes"}, Conditions: map[string]any{"project_id": "p7"}}
	rec := newRecorder()
	c1, _ := newTestClient(t, Config{URL: srv.url})
	sub, err := c1.Subscribe(scope, rec)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c1)
	c2, _ := newTestClient(t, Config{URL: srv.url})
	synced, err := c2.Sync(scope)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c2)
	for _, s := range []*Subscription{sub, synced} {
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		id := "x" + itoa(i)
		pm, err := c2.Mutate(ctx, Mutation{Resource: "todos", Name: "pair", Args: args{ID: id}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pm.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		// The synced copy: both rows, whenever it shows either.
		if rows := synced.Rows(); (rows["todos\x00"+id] == nil) != (rows["notes\x00"+id] == nil) {
			t.Fatalf("the synced copy holds one half of %s: %v", id, rows)
		}
	}
	bs := rec.wait(ctx, t, "the five transactions", func(bs []Batch) bool { return len(entryKeys(bs)) == 10 })
	for _, b := range bs {
		halves := map[string]int{}
		for _, e := range b.Entries {
			halves[e.Key]++
		}
		for id, n := range halves {
			if n != 2 {
				t.Fatalf("a batch holds part of transaction %s: %s", id, describeBatches(bs))
			}
		}
	}
}

// newNotesServer is newRealServer with a second resource, notes, scoped by
// project_id like the todos.
func newNotesServer(t *testing.T) (*realServer, *core.Table[note]) {
	t.Helper()
	srv := newRealServer(t, core.Config{})
	notes, err := core.Register(srv.engine, core.Resource[note]{Table: "notes", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	return srv, notes
}

// TestMultiSnapshotAppliedAtOnce: the first snapshot of a synced scope of
// several resources sends each resource's rows in turn (comments before
// todos); the copy takes them all at the caught-up, in one change, so it
// never shows a comment before its todo. A reconnect in the middle of the
// snapshot leaves the copy as it was.
func TestMultiSnapshotAppliedAtOnce(t *testing.T) {
	ctx := testCtx(t)
	fs := newFakeServer(t)
	c, _ := newTestClient(t, Config{URL: fs.url})
	scope := Scope{Resources: []string{"todos", "comments"}, Conditions: map[string]any{"project_id": "p7"}}
	sub, err := c.Sync(scope)
	if err != nil {
		t.Fatal(err)
	}
	// Every view the app can see: rows of comments only with their todo.
	seen := make(chan []string, 16)
	go func() {
		for {
			ch := sub.Changed()
			seen <- append(slices.Sorted(maps.Keys(sub.RowsOf("comments"))), slices.Sorted(maps.Keys(sub.RowsOf("todos")))...)
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	start(t, c)
	snap := func(seq uint64) string {
		return protocol.Cursor{Epoch: testEpoch, Pos: 5, Snapshot: true, Seq: seq, Sealed: "x"}.String()
	}
	fc := fs.accept(ctx, t)
	fc.handshake(ctx, t)
	s := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	fc.send(t, changes(s.ID, snap(1), with(up("c1"), "resource", "comments"), with(up("c2"), "resource", "comments")))
	fc.send(t, changes(s.ID, snap(2), with(up("t1"), "resource", "todos")))
	// Cut the connection before the caught-up: the held pages are dropped
	// and the snapshot starts again, from no cursor.
	fc.close(t, 1001, "going away")
	fc = fs.accept(ctx, t)
	fc.handshake(ctx, t)
	s = fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if s.Cursor != "" {
		t.Fatalf("resubscribed with cursor %q, want none (the snapshot was not applied)", s.Cursor)
	}
	fc.send(t, changes(s.ID, snap(1), with(up("c1"), "resource", "comments"), with(up("c2"), "resource", "comments")))
	fc.send(t, changes(s.ID, snap(2), with(up("t1"), "resource", "todos")))
	fc.send(t, caughtUp(s.ID, cur(5)))
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sub.Version(); got != 1 {
		t.Errorf("the copy changed %d times during the snapshot, want once", got)
	}
	if n, m := len(sub.RowsOf("comments")), len(sub.RowsOf("todos")); n != 2 || m != 1 {
		t.Fatalf("copy has %d comments and %d todos, want 2 and 1", n, m)
	}
	if got := sub.Cursor(); got != cur(5) {
		t.Fatalf("cursor %q, want %q", got, cur(5))
	}
	for {
		select {
		case keys := <-seen:
			if slices.Contains(keys, "c1") && !slices.Contains(keys, "t1") {
				t.Fatalf("the copy showed %v: comments without their todo", keys)
			}
			continue
		default:
		}
		break
	}
}
