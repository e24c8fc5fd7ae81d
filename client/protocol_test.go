package client

// Protocol tests against a scripted server: each sends exact frame
// sequences and checks the client's frames and batches.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core/protocol"
)

var scopeA = Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p1"}}
var scopeB = Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p2"}}

type fakeRig struct {
	fs     *fakeServer
	c      *Client
	events *eventLog
	store  CursorStore
}

func newFakeRig(t *testing.T, cfg Config) *fakeRig {
	t.Helper()
	fs := newFakeServer(t)
	cfg.URL = fs.url
	if cfg.Store == nil {
		cfg.Store = NewMemoryStore()
	}
	c, events := newTestClient(t, cfg)
	return &fakeRig{fs: fs, c: c, events: events, store: cfg.Store}
}

func (r *fakeRig) subscribe(t *testing.T, s Scope, h Handler) *Subscription {
	t.Helper()
	sub, err := r.c.Subscribe(s, h)
	if err != nil {
		t.Fatalf("Subscribe %s: %v", s, err)
	}
	return sub
}

// record returns the stored record of s.
func (r *fakeRig) record(t *testing.T, s Scope) Record {
	t.Helper()
	d, _ := s.Digest()
	rec, ok, err := r.store.Load(context.Background(), d)
	if err != nil || !ok {
		t.Fatalf("no record for %s (%v)", s, err)
	}
	return rec
}

// seed stores a cursor for s before the client subscribes.
func (r *fakeRig) seed(t *testing.T, s Scope, cursor string) {
	t.Helper()
	n, err := s.normalize()
	if err != nil {
		t.Fatal(err)
	}
	err = r.store.Save(context.Background(), Record{Digest: n.digest, Resource: n.resource, Conditions: n.condJSON, State: StateLive, Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
}

// waitCaughtUp waits for the EventCaughtUp of s with cursor; the event
// comes after the cursor was persisted.
func (r *fakeRig) waitCaughtUp(ctx context.Context, t *testing.T, s Scope, cursor string) {
	t.Helper()
	r.events.wait(ctx, t, "caught-up at "+cursor, func(es []Event) bool {
		for _, e := range es {
			if e.Kind == EventCaughtUp && e.Cursor == cursor && e.Scope.String() == s.String() {
				return true
			}
		}
		return false
	})
}

func TestHelloAndSubscribeFrames(t *testing.T) {
	ctx := testCtx(t)
	var tokens atomic.Int32
	r := newFakeRig(t, Config{
		Build:  "web-1",
		Origin: "dev-a",
		Header: map[string][]string{"Cookie": {"session=s1"}},
		Token: func(context.Context) (string, error) {
			return fmt.Sprintf("tok-%d", tokens.Add(1)), nil
		},
	})
	a := Scope{Resource: "todos", Conditions: map[string]any{"project_id": map[string]any{"in": []string{"p8", "p7", "p7"}}}}
	r.subscribe(t, a, newTestRows())
	r.subscribe(t, Scope{Resource: "todos"}, newTestRows())
	start(t, r.c)

	fc := r.fs.accept(ctx, t)
	if got := fc.header.Get("Cookie"); got != "session=s1" {
		t.Errorf("upgrade Cookie = %q", got)
	}
	hello := fc.handshake(ctx, t)
	if hello.V != 1 || hello.Build != "web-1" || hello.Origin != "dev-a" || hello.Token != "tok-1" {
		t.Errorf("hello = %+v", hello)
	}
	s1 := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	s2 := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if s1.Resource != "todos" || string(s1.Conditions["project_id"]) != `{"in":["p7","p8"]}` || s1.Cursor != "" || s1.Limit != 0 {
		t.Errorf("first subscribe = %+v (conditions %s)", s1, s1.Conditions["project_id"])
	}
	if s2.Resource != "todos" || len(s2.Conditions) != 0 || s2.Cursor != "" {
		t.Errorf("second subscribe = %+v", s2)
	}
	r.events.waitKind(ctx, t, EventConnected, 1)

	// Subscribing while connected subscribes at once, with a fresh id.
	r.subscribe(t, scopeA, newTestRows())
	s3 := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if string(s3.Conditions["project_id"]) != `"p1"` {
		t.Errorf("third subscribe = %+v", s3)
	}

	// After a drop: hello again with a new token, every scope again, and
	// ids never used before.
	r.c.Reconnect()
	fc.waitClosed(ctx, t)
	fc2 := r.fs.accept(ctx, t)
	if hello := fc2.handshake(ctx, t); hello.Token != "tok-2" {
		t.Errorf("second hello token = %q, want a fresh one", hello.Token)
	}
	ids := []string{s1.ID, s2.ID, s3.ID}
	for range 3 {
		ids = append(ids, fc2.nextOf(ctx, t, protocol.FrameSubscribe).ID)
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != 6 {
		t.Errorf("subscription ids were reused: %v", ids)
	}
}

func TestOneBatchPerFrameAndMonotonicCursor(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	rec := newRecorder()
	r.subscribe(t, scopeA, rec)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	id := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID

	fc.send(t, changes(id, cur(5), up("a"), up("b"), del("z"))) // one frame, three entries
	fc.send(t, changes(id, cur(5), up("dup")))                  // duplicate: dropped
	fc.send(t, changes(id, cur(3), up("old")))                  // older: dropped
	fc.send(t, changes(id, cur(7), up("c")))
	fc.send(t, caughtUp(id, cur(7)))
	fc.send(t, changes(id, cur(6), up("late"))) // older live push: dropped
	fc.send(t, changes(id, cur(10), del("a")))  // 10 > 7 numerically though not as text
	fc.send(t, caughtUp(id, cur(10)))           // e.g. after a server-side resync
	r.waitCaughtUp(ctx, t, scopeA, cur(10))

	got := rec.all()
	want := []struct {
		reset, caughtUp bool
		cursor          string
		keys            []string
	}{
		{true, false, cur(5), []string{"u:a", "u:b", "d:z"}},
		{false, false, cur(7), []string{"u:c"}},
		{false, true, cur(7), []string{}},
		{false, false, cur(10), []string{"d:a"}},
		{false, true, cur(10), []string{}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d batches, want %d:\n%s", len(got), len(want), describeBatches(got))
	}
	for i, w := range want {
		b := got[i]
		if b.Reset != w.reset || b.CaughtUp != w.caughtUp || b.Cursor != w.cursor || !slices.Equal(batchKeys(b), w.keys) {
			t.Errorf("batch %d = %+v, want %+v", i, b, w)
		}
		if b.Scope.Resource != "todos" {
			t.Errorf("batch %d scope = %v", i, b.Scope)
		}
	}
	if rows := rec.mirror.Rows(); len(rows) != 2 || rows["b"] == nil || rows["c"] == nil {
		t.Errorf("mirror = %v, want b and c", rows)
	}
	if st := r.record(t, scopeA); st.Cursor != cur(10) || st.State != StateLive {
		t.Errorf("record = %+v, want cursor %s, live", st, cur(10))
	}
}

func TestSnapshotCursorsOrdering(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	rec := newRecorder()
	r.subscribe(t, scopeA, rec)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	id := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID

	fc.send(t, changes(id, snapCur(5, 1), up("a")))
	fc.send(t, changes(id, snapCur(5, 2), up("b")))
	fc.send(t, changes(id, snapCur(5, 1), up("a-again"))) // behind: dropped
	fc.send(t, changes(id, cur(5), up("a2")))             // replay after the snapshot at the same position
	fc.send(t, changes(id, snapCur(5, 3), up("c")))       // a snapshot page after the replay: behind, dropped
	fc.send(t, caughtUp(id, cur(5)))
	r.waitCaughtUp(ctx, t, scopeA, cur(5))

	got := rec.all()
	var keys [][]string
	for _, b := range got {
		keys = append(keys, batchKeys(b))
	}
	want := [][]string{{"u:a"}, {"u:b"}, {"u:a2"}, {}}
	if fmt.Sprint(keys) != fmt.Sprint(want) || !got[0].Reset || got[1].Reset || !got[3].CaughtUp {
		t.Errorf("batches:\n%s want keys %v, the first with Reset", describeBatches(got), want)
	}
	// Resuming now sends the stored cursor.
	r.c.Reconnect()
	fc2 := r.fs.accept(ctx, t)
	fc2.handshake(ctx, t)
	if s := fc2.nextOf(ctx, t, protocol.FrameSubscribe); s.Cursor != cur(5) {
		t.Errorf("resubscribe cursor = %q, want %q", s.Cursor, cur(5))
	}
}

// A Handler's scope skips a live entry of its own origin only when it is
// the echo of a row its mutation's ack delivered: the same op and the same
// row (as JSON, whatever its encoding), once. Every other entry is
// delivered: rows the ack did not carry, a later version, and anything
// after the echo; the cursor advances either way.
func TestOwnEchoSkippedOnlyWhenTheAckHeldIt(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{Origin: "me"})
	rec := newRecorder()
	r.subscribe(t, scopeA, rec)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	id := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID
	fc.send(t, caughtUp(id, cur(1))) // an empty scope; what follows is live

	m, err := r.c.Mutate(ctx, Mutation{Key: "k1", Resource: "todos", Name: "edit"})
	if err != nil {
		t.Fatal(err)
	}
	fc.nextOf(ctx, t, protocol.FrameMutate)
	fc.send(t, ack("k1", cur(2),
		upRow("a", map[string]any{"id": "a", "n": 1}),
		upRow("v", map[string]any{"id": "v", "n": 2}),
		map[string]any{"op": "delete", "key": "c", "resource": "todos"}))
	if _, err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	fc.sendRaw(t, websocket.TextMessage, []byte(`{"v":1,"type":"changes","id":"`+id+`","cursor":"`+cur(2)+`","entries":[`+
		`{"op":"upsert","key":"a","row":{"n":1, "id":"a"},"origin":"me"},`+ // the echo of a, encoded otherwise: skipped
		`{"op":"upsert","key":"v","row":{"id":"v","n":3},"origin":"me"},`+ // another version than the ack's: delivered
		`{"op":"delete","key":"c","origin":"me"},`+ // the echo of the delete: skipped
		`{"op":"upsert","key":"b","row":{"id":"b"},"origin":"me"},`+ // written with SQL, not in the ack: delivered
		`{"op":"upsert","key":"d","row":{"id":"d"},"origin":"other"}]}`))
	fc.send(t, changes(id, cur(3), with(upRow("a", map[string]any{"id": "a", "n": 1}), "origin", "me"))) // a again, after its echo: delivered
	fc.send(t, changes(id, cur(4), with(del("c"), "origin", "me")))                                      // delivered
	fc.send(t, caughtUp(id, cur(4)))
	r.waitCaughtUp(ctx, t, scopeA, cur(4))

	got := rec.all()
	if len(got) != 5 {
		t.Fatalf("batches:\n%s", describeBatches(got))
	}
	for i, want := range [][]string{{"u:v", "u:b", "u:d"}, {"u:a"}, {"d:c"}} {
		if k := batchKeys(got[i+1]); !slices.Equal(k, want) {
			t.Errorf("live batch %d keys %v, want %v", i, k, want)
		}
	}
	for _, e := range got[1].Entries {
		if e.Resource != "todos" {
			t.Errorf("entry %s resource = %q, want the scope's", e.Key, e.Resource)
		}
	}
	if st := r.record(t, scopeA); st.Cursor != cur(4) {
		t.Errorf("stored cursor %q, want %q", st.Cursor, cur(4))
	}
}

// Catch-up entries are applied whatever their origin: a write made on the
// client's behalf while it was offline must reach its copy.
func TestOwnOriginAppliedInCatchUp(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{Origin: "me"})
	rec := newRecorder()
	r.subscribe(t, scopeA, rec)
	sync, err := r.c.Sync(scopeB)
	if err != nil {
		t.Fatal(err)
	}
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	idA := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID
	idB := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID
	fc.send(t, changes(idA, cur(1), with(up("a"), "origin", "me"), up("b")))
	fc.send(t, caughtUp(idA, cur(1)))
	fc.send(t, changes(idB, cur(1), with(up("x"), "origin", "me")))
	fc.send(t, caughtUp(idB, cur(1)))
	r.waitCaughtUp(ctx, t, scopeA, cur(1))
	r.waitCaughtUp(ctx, t, scopeB, cur(1))
	if k := batchKeys(rec.all()[0]); !slices.Equal(k, []string{"u:a", "u:b"}) {
		t.Errorf("catch-up batch keys %v, want the own-origin entry kept", k)
	}
	// In a synced scope even a live own-origin entry lands: the client holds
	// no mutation of that row, so it is not an echo of one.
	fc.send(t, changes(idB, cur(2), with(up("y"), "origin", "me")))
	fc.send(t, caughtUp(idB, cur(2)))
	r.waitCaughtUp(ctx, t, scopeB, cur(2))
	if rows := sync.Rows(); len(rows) != 2 || rows["x"] == nil || rows["y"] == nil {
		t.Errorf("synced rows %v, want x and y", rows)
	}
}

func TestUnknownResourceFailsLoudly(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	rec := newRecorder()
	r.subscribe(t, scopeA, rec)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	id := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID

	fc.send(t, changes(id, cur(1), up("a")))
	fc.send(t, changes(id, cur(2), with(up("b"), "resource", "todos"))) // naming the scope's resource is fine
	fc.send(t, changes(id, cur(3), up("c"), with(up("x"), "resource", "users")))
	fc.send(t, changes(id, cur(4), up("d"))) // after the bad frame: never applied on this connection
	fc.waitClosed(ctx, t)
	es := r.events.waitKind(ctx, t, EventProtocolError, 1)
	if e := es[len(es)-1]; !strings.Contains(e.Err.Error(), `"users"`) {
		t.Errorf("protocol error %v does not name the resource", e.Err)
	}

	fc2 := r.fs.accept(ctx, t)
	fc2.handshake(ctx, t)
	if s := fc2.nextOf(ctx, t, protocol.FrameSubscribe); s.Cursor != cur(2) {
		t.Errorf("resubscribed with cursor %q, want the last applied %q", s.Cursor, cur(2))
	}
	got := rec.all()
	if len(got) != 2 || hasKey(got, "c") || hasKey(got, "x") || hasKey(got, "d") {
		t.Errorf("batches:\n%s want only a and b applied", describeBatches(got))
	}
}

func TestBadServerFramesDropTheConnection(t *testing.T) {
	for name, frame := range map[string][]byte{
		"not json":                 []byte("not json"),
		"wrong version":            []byte(`{"v":2,"type":"changes","id":"1","cursor":"1.E.1"}`),
		"changes without cursor":   []byte(`{"v":1,"type":"changes","id":"1","entries":[{"op":"upsert","key":"a","row":{}}]}`),
		"upsert without row":       []byte(`{"v":1,"type":"changes","id":"1","cursor":"1.E.1","entries":[{"op":"upsert","key":"a"}]}`),
		"unknown op":               []byte(`{"v":1,"type":"changes","id":"1","cursor":"1.E.1","entries":[{"op":"merge","key":"a"}]}`),
		"caught-up without cursor": []byte(`{"v":1,"type":"caught-up","id":"1"}`),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			r := newFakeRig(t, Config{})
			rec := newRecorder()
			r.subscribe(t, scopeA, rec)
			start(t, r.c)
			fc := r.fs.accept(ctx, t)
			fc.handshake(ctx, t)
			if id := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID; id != "1" {
				t.Fatalf("first subscription id %q; the frames above assume 1", id)
			}
			fc.sendRaw(t, websocket.TextMessage, frame)
			fc.waitClosed(ctx, t)
			r.events.waitKind(ctx, t, EventProtocolError, 1)
			fc2 := r.fs.accept(ctx, t) // and it reconnects
			fc2.handshake(ctx, t)
			if n := len(rec.all()); n != 0 {
				t.Errorf("%d batches applied from a bad frame", n)
			}
		})
	}
	t.Run("binary message", func(t *testing.T) {
		ctx := testCtx(t)
		r := newFakeRig(t, Config{})
		start(t, r.c)
		fc := r.fs.accept(ctx, t)
		fc.handshake(ctx, t)
		fc.sendRaw(t, websocket.BinaryMessage, []byte(`{"v":1,"type":"update-available","build":"x"}`))
		fc.waitClosed(ctx, t)
		r.events.waitKind(ctx, t, EventProtocolError, 1)
	})
}

func TestStaleSubscriptionsAreIgnored(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	recA, recB := newRecorder(), newRecorder()
	subA := r.subscribe(t, scopeA, recA)
	r.subscribe(t, scopeB, recB)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	idA := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID
	idB := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID

	fc.send(t, changes("999", cur(1), up("never"))) // an id the client never issued
	fc.send(t, changes(idA, cur(1), up("a1")))
	fc.send(t, caughtUp(idA, cur(1)))
	recA.wait(ctx, t, "a1", func(bs []Batch) bool { return hasKey(bs, "a1") })
	// The caught-up event comes once its cursor is stored: A's batch is
	// applied in full (Apply, then the cursor) before A is unsubscribed.
	r.events.waitKind(ctx, t, EventCaughtUp, 1)
	before := len(recA.all())

	if err := subA.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if f := fc.nextOf(ctx, t, protocol.FrameUnsubscribe); f.ID != idA {
		t.Errorf("unsubscribe id %q, want %q", f.ID, idA)
	}
	// Frames already in flight for A, and the server's answer to a late
	// unsubscribe, are ignored.
	fc.send(t, changes(idA, cur(2), up("a2")))
	fc.send(t, caughtUp(idA, cur(2)))
	fc.send(t, errorFrame(idA, protocol.CodeUnknownSub))
	fc.send(t, changes(idB, cur(3), up("b1")))
	recB.wait(ctx, t, "b1", func(bs []Batch) bool { return hasKey(bs, "b1") })

	if got := recA.all(); len(got) != before {
		t.Errorf("A got batches after Unsubscribe:\n%s", describeBatches(got))
	}
	if hasKey(recB.all(), "never") {
		t.Error("a frame for an unknown id was applied")
	}
	if st := r.record(t, scopeA); st.State != StateUnsubscribed || st.Cursor != cur(1) {
		t.Errorf("A's record = %+v, want unsubscribed with cursor %s", st, cur(1))
	}

	// Subscribing again resumes from the kept cursor with a new id.
	recA2 := newRecorder()
	r.subscribe(t, scopeA, recA2)
	s := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if s.ID == idA || s.ID == idB || s.Cursor != cur(1) {
		t.Errorf("resubscribe = %+v, want a fresh id and cursor %s", s, cur(1))
	}
	fc.send(t, changes(s.ID, cur(4), up("a4")))
	got := recA2.wait(ctx, t, "a4", func(bs []Batch) bool { return len(bs) > 0 })
	if got[0].Reset {
		t.Error("a resubscribe with a cursor delivered Reset")
	}
}

func TestResetFrame(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	old := protocol.Cursor{Epoch: "OldEpoch", Pos: 9}.String()
	r.seed(t, scopeA, old)
	rec := newRecorder()
	_ = rec.mirror.Apply(ctx, Batch{Entries: []protocol.Entry{entry("upsert", "stale", `{}`)}}) // the app's old copy
	r.subscribe(t, scopeA, rec)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	s := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if s.Cursor != old {
		t.Fatalf("subscribe cursor %q, want the stored %q", s.Cursor, old)
	}
	fc.send(t, resetFrame(s.ID, "epoch_changed"))
	es := r.events.waitKind(ctx, t, EventReset, 1)
	if es[len(es)-1].Reason != "epoch_changed" {
		t.Errorf("reset event %v", es[len(es)-1])
	}
	if st := r.record(t, scopeA); st.Cursor != "" || st.Digest == "" {
		t.Errorf("record after reset = %+v, want kept with no cursor", st)
	}
	got := rec.all()
	if len(got) != 1 || !got[0].Reset || len(got[0].Entries) != 0 || got[0].Cursor != "" {
		t.Fatalf("reset batch:\n%s", describeBatches(got))
	}
	if rec.mirror.Len() != 0 {
		t.Errorf("mirror kept %v after reset", rec.mirror.Rows())
	}

	newEpoch := func(p, seq uint64) string {
		return protocol.Cursor{Epoch: "NewEpoch", Pos: p, Snapshot: seq != 0, Seq: seq, Sealed: "opaque"}.String()
	}
	fc.send(t, changes(s.ID, newEpoch(3, 1), up("a")))
	fc.send(t, caughtUp(s.ID, newEpoch(3, 0)))
	r.waitCaughtUp(ctx, t, scopeA, newEpoch(3, 0))
	got = rec.all()
	if len(got) != 3 || got[1].Reset || !slices.Equal(batchKeys(got[1]), []string{"u:a"}) {
		t.Errorf("after reset:\n%s", describeBatches(got))
	}
	if st := r.record(t, scopeA); st.Cursor != newEpoch(3, 0) {
		t.Errorf("cursor after the new snapshot %q", st.Cursor)
	}
}

func TestInvalidCursorResubscribesWithoutOne(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	r.seed(t, scopeA, cur(5))
	rec := newRecorder()
	r.subscribe(t, scopeA, rec)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	s1 := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if s1.Cursor != cur(5) {
		t.Fatalf("cursor %q", s1.Cursor)
	}
	fc.send(t, errorFrame(s1.ID, protocol.CodeInvalidCursor))
	s2 := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if s2.Cursor != "" || s2.ID == s1.ID || s2.Resource != "todos" {
		t.Errorf("resubscribe = %+v, want no cursor and a new id", s2)
	}
	if st := r.record(t, scopeA); st.Cursor != "" {
		t.Errorf("stored cursor %q survived invalid_cursor", st.Cursor)
	}
	fc.send(t, changes(s1.ID, cur(6), up("stale"))) // the old id is dead
	fc.send(t, changes(s2.ID, snapCur(1, 1), up("a")))
	got := rec.wait(ctx, t, "the snapshot", func(bs []Batch) bool { return len(bs) > 0 })
	if !got[0].Reset || hasKey(got, "stale") {
		t.Errorf("batches:\n%s want the first with Reset, nothing from the old id", describeBatches(got))
	}
	es := r.events.waitKind(ctx, t, EventServerError, 1)
	if e := es[0]; e.Code != protocol.CodeInvalidCursor || e.SubscriptionID != s1.ID || e.Scope.String() != scopeA.String() {
		t.Errorf("event %v", e)
	}
}

func TestForbiddenIsNotRetriedOnTheConnection(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	r.subscribe(t, scopeA, newTestRows())
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	sA := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	fc.send(t, errorFrame(sA.ID, protocol.CodeForbidden))
	es := r.events.waitKind(ctx, t, EventServerError, 1)
	if es[0].Code != protocol.CodeForbidden || es[0].Scope.String() != scopeA.String() {
		t.Errorf("event %v", es[0])
	}
	// Any immediate retry would have been sent before the event; the next
	// frame must be B's subscribe.
	r.subscribe(t, scopeB, newTestRows())
	if s := fc.nextOf(ctx, t, protocol.FrameSubscribe); string(s.Conditions["project_id"]) != `"p2"` {
		t.Errorf("next frame %+v, want B's subscribe (A must not be retried on this connection)", s)
	}
	if st := r.record(t, scopeA); st.State != StateFailed {
		t.Errorf("A's state %q, want failed", st.State)
	}
	// A new connection tries it again.
	r.c.Reconnect()
	fc2 := r.fs.accept(ctx, t)
	fc2.handshake(ctx, t)
	var got []string
	for range 2 {
		got = append(got, string(fc2.nextOf(ctx, t, protocol.FrameSubscribe).Conditions["project_id"]))
	}
	if !slices.Equal(got, []string{`"p1"`, `"p2"`}) {
		t.Errorf("subscribes on the new connection: %v", got)
	}
}

func TestUnavailableIsRetriedOnTheConnection(t *testing.T) {
	for _, code := range []protocol.Code{protocol.CodeUnavailable, protocol.CodeInternal} {
		t.Run(string(code), func(t *testing.T) {
			ctx := testCtx(t)
			r := newFakeRig(t, Config{})
			r.seed(t, scopeA, cur(4))
			r.subscribe(t, scopeA, newTestRows())
			start(t, r.c)
			fc := r.fs.accept(ctx, t)
			fc.handshake(ctx, t)
			s1 := fc.nextOf(ctx, t, protocol.FrameSubscribe)
			fc.send(t, errorFrame(s1.ID, code))
			s2 := fc.nextOf(ctx, t, protocol.FrameSubscribe)
			if s2.ID == s1.ID || s2.Cursor != cur(4) {
				t.Errorf("retry = %+v, want a new id and the stored cursor", s2)
			}
			fc.send(t, errorFrame(s2.ID, code))
			if s3 := fc.nextOf(ctx, t, protocol.FrameSubscribe); s3.ID == s2.ID || s3.Cursor != cur(4) {
				t.Errorf("second retry = %+v", s3)
			}
		})
	}
}

func TestCloseCodes(t *testing.T) {
	for _, code := range []int{int(protocol.ClosePolicy), int(protocol.CloseVersionSkew)} {
		t.Run(fmt.Sprintf("%d ends Run", code), func(t *testing.T) {
			ctx := testCtx(t)
			r := newFakeRig(t, Config{})
			h := start(t, r.c)
			fc := r.fs.accept(ctx, t)
			fc.handshake(ctx, t)
			fc.close(t, code, "bye")
			err := h.result(ctx, t)
			var ce *CloseError
			if !errors.As(err, &ce) || int(ce.Code) != code || ce.Reason != "bye" {
				t.Fatalf("Run = %v, want a CloseError %d", err, code)
			}
		})
	}
	t.Run("1008 before welcome, after an error frame", func(t *testing.T) {
		ctx := testCtx(t)
		r := newFakeRig(t, Config{Token: func(context.Context) (string, error) { return "forged", nil }})
		h := start(t, r.c)
		fc := r.fs.accept(ctx, t)
		fc.nextOf(ctx, t, protocol.FrameHello)
		fc.send(t, errorFrame("", protocol.CodeUnauthenticated))
		fc.close(t, int(protocol.ClosePolicy), "unauthenticated")
		var ce *CloseError
		if err := h.result(ctx, t); !errors.As(err, &ce) || ce.Code != protocol.ClosePolicy {
			t.Fatalf("Run = %v", err)
		}
		var sawError bool
		for _, e := range r.events.all() {
			sawError = sawError || e.Kind == EventServerError && e.Code == protocol.CodeUnauthenticated
		}
		if !sawError {
			t.Errorf("the error frame before the close was not reported: %v", r.events.all())
		}
		if r.events.count(EventConnected) != 0 || r.events.count(EventConnectFailed) != 1 {
			t.Errorf("events %v", r.events.all())
		}
	})
	t.Run("1013 before welcome, after too_many_connections: reconnects with a growing backoff", func(t *testing.T) {
		ctx := testCtx(t)
		r := newFakeRig(t, Config{MinBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond})
		start(t, r.c)
		const refusals = 3
		for range refusals {
			fc := r.fs.accept(ctx, t)
			fc.nextOf(ctx, t, protocol.FrameHello)
			fc.send(t, errorFrame("", protocol.CodeTooManyConnections))
			fc.close(t, int(protocol.CloseOverloaded), "too many connections")
		}
		r.fs.accept(ctx, t).handshake(ctx, t)
		es := r.events.waitKind(ctx, t, EventConnectFailed, refusals)
		for i, e := range es {
			if e.Attempt != i || e.CloseCode != protocol.CloseOverloaded {
				t.Errorf("connect-failed event %d: attempt %d, close %v; want attempt %d, close 1013", i, e.Attempt, e.CloseCode, i)
			}
		}
	})
	for _, code := range []int{int(protocol.CloseGoingAway), int(protocol.CloseOverloaded), int(protocol.CloseIdle), int(protocol.CloseDrain), int(protocol.CloseNormal)} {
		t.Run(fmt.Sprintf("%d reconnects", code), func(t *testing.T) {
			ctx := testCtx(t)
			r := newFakeRig(t, Config{})
			r.subscribe(t, scopeA, newTestRows())
			start(t, r.c)
			fc := r.fs.accept(ctx, t)
			fc.handshake(ctx, t)
			fc.nextOf(ctx, t, protocol.FrameSubscribe)
			fc.close(t, code, "later")
			fc2 := r.fs.accept(ctx, t)
			fc2.handshake(ctx, t)
			fc2.nextOf(ctx, t, protocol.FrameSubscribe)
			es := r.events.waitKind(ctx, t, EventDisconnected, 1)
			if int(es[len(es)-1].CloseCode) != code {
				t.Errorf("disconnected event %v, want close code %d", es[len(es)-1], code)
			}
		})
	}
}

func TestUpdateAvailableAndRefreshToken(t *testing.T) {
	ctx := testCtx(t)
	var tokens atomic.Int32
	r := newFakeRig(t, Config{Build: "web-1", Token: func(context.Context) (string, error) {
		return fmt.Sprintf("tok-%d", tokens.Add(1)), nil
	}})
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	if h := fc.handshake(ctx, t); h.Token != "tok-1" {
		t.Fatalf("hello token %q", h.Token)
	}
	fc.send(t, map[string]any{"v": 1, "type": "update-available", "build": "web-2"})
	es := r.events.waitKind(ctx, t, EventUpdateAvailable, 1)
	if es[len(es)-1].Build != "web-2" {
		t.Errorf("update event %v", es[len(es)-1])
	}
	fc.send(t, map[string]any{"v": 1, "type": "some-future-frame", "x": 1}) // ignored
	fc.send(t, map[string]any{"v": 1, "type": "refresh-token", "expires_in": 30})
	if f := fc.nextOf(ctx, t, protocol.FrameRefresh); f.Token != "tok-2" {
		t.Errorf("refresh token %q, want a fresh one", f.Token)
	}
	r.events.waitKind(ctx, t, EventTokenRefreshed, 1)
}

func TestSlowHandlerDoesNotBlockTheReader(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	rec := newRecorder()
	first := true
	rec.hook = func(Batch) error {
		if first {
			first = false
			close(entered)
			<-release
		}
		return nil
	}
	r.subscribe(t, scopeA, rec)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	id := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID

	fc.send(t, changes(id, cur(1), up("k1")))
	<-entered
	const n = 300
	for i := 2; i <= n; i++ {
		fc.send(t, changes(id, cur(uint64(i)), up(fmt.Sprintf("k%d", i))))
	}
	// While the handler is stuck, the client still reads: it answers a ping.
	if err := fc.ws.WriteControl(websocket.PingMessage, []byte("still there?"), timeNow().Add(failAfter)); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-fc.pongs:
		if p != "still there?" {
			t.Errorf("pong %q", p)
		}
	case <-ctx.Done():
		t.Fatal("no pong while the handler was busy: the reader is blocked")
	}
	close(release)
	got := rec.wait(ctx, t, "every batch", func(bs []Batch) bool { return len(bs) == n })
	for i, b := range got {
		if b.Cursor != cur(uint64(i+1)) {
			t.Fatalf("batch %d has cursor %s: applied out of order", i, b.Cursor)
		}
	}
}

func TestApplyErrorResubscribesFromTheStoredCursor(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	rec := newRecorder()
	failed := false
	rec.hook = func(b Batch) error {
		if b.Cursor == cur(2) && !failed {
			failed = true
			return errors.New("disk full")
		}
		return nil
	}
	r.subscribe(t, scopeA, rec)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	id := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID
	fc.send(t, changes(id, cur(1), up("a")))
	fc.send(t, changes(id, cur(2), up("b")))
	fc.send(t, changes(id, cur(3), up("c")))
	fc.waitClosed(ctx, t)
	es := r.events.waitKind(ctx, t, EventApplyError, 1)
	if e := es[len(es)-1]; e.Err == nil || e.Err.Error() != "disk full" || e.Scope.String() != scopeA.String() {
		t.Errorf("apply error event %v", e)
	}

	fc2 := r.fs.accept(ctx, t)
	fc2.handshake(ctx, t)
	s := fc2.nextOf(ctx, t, protocol.FrameSubscribe)
	if s.Cursor != cur(1) {
		t.Fatalf("resubscribed from %q, want %q (the failed batch was not persisted)", s.Cursor, cur(1))
	}
	fc2.send(t, changes(s.ID, cur(2), up("b")))
	fc2.send(t, changes(s.ID, cur(3), up("c")))
	fc2.send(t, caughtUp(s.ID, cur(3)))
	got := rec.wait(ctx, t, "caught-up", func(bs []Batch) bool { return countCaughtUp(bs) == 1 })
	var keys []string
	for _, b := range got {
		keys = append(keys, batchKeys(b)...)
	}
	if !slices.Equal(keys, []string{"u:a", "u:b", "u:c"}) || rec.failureCount() != 1 {
		t.Errorf("applied %v with %d failures, want a, b, c once each after one failure", keys, rec.failureCount())
	}
}

func TestUnsubscribeDuringApplyIsNotPersisted(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	recA, recB := newRecorder(), newRecorder()
	recA.hook = func(b Batch) error {
		if b.Cursor == cur(2) {
			close(entered)
			<-release
		}
		return nil
	}
	subA := r.subscribe(t, scopeA, recA)
	r.subscribe(t, scopeB, recB)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	idA := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID
	idB := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID
	fc.send(t, changes(idA, cur(1), up("a")))
	fc.send(t, changes(idA, cur(2), up("b")))
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the second batch was never applied")
	}
	// The app unsubscribes while that apply is running.
	if err := subA.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	fc.nextOf(ctx, t, protocol.FrameUnsubscribe)
	close(release)
	// B's caught-up is handled after A's apply finished and was (not)
	// persisted: frames are handled in order.
	fc.send(t, changes(idB, cur(5), up("x")))
	fc.send(t, caughtUp(idB, cur(5)))
	r.waitCaughtUp(ctx, t, scopeB, cur(5))
	if st := r.record(t, scopeA); st.Cursor != cur(1) || st.State != StateUnsubscribed {
		t.Errorf("A's record = %+v; the apply that outlived its subscription must not be persisted (want cursor %s)", st, cur(1))
	}
}
