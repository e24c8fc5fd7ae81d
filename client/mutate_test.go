package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidesync/tide/core/protocol"
)

func ack(key, cursor string, entries ...map[string]any) map[string]any {
	if entries == nil {
		entries = []map[string]any{}
	}
	return map[string]any{"v": 1, "type": "ack", "key": key, "cursor": cursor, "entries": entries}
}

func reject(key string, code protocol.Code) map[string]any {
	return map[string]any{"v": 1, "type": "reject", "key": key, "code": code, "message": "test says " + string(code)}
}

func todoRow(id, title string) map[string]any {
	return map[string]any{"id": id, "project_id": "p1", "title": title}
}

func upRow(key string, row map[string]any) map[string]any {
	return map[string]any{"op": "upsert", "key": key, "row": row, "resource": "todos"}
}

func setTitle(id, title string) func(*LocalTx) error {
	return func(tx *LocalTx) error { return tx.Upsert("todos", id, todoRow(id, title)) }
}

// titles returns a synced scope's rows as id → title.
func titles(t *testing.T, sub *Subscription) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, raw := range sub.Rows() {
		var r struct{ Title string }
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		out[k] = r.Title
	}
	return out
}

// waitVersion waits until sub's rows changed to version v.
func waitVersion(ctx context.Context, t *testing.T, sub *Subscription, v uint64) {
	t.Helper()
	for {
		ch := sub.Changed()
		if got := sub.Version(); got >= v {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for version %d of %s (at %d)", v, sub.Scope(), sub.Version())
		}
	}
}

func keysOfPending(ps []*PendingMutation) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Key())
	}
	return out
}

func TestMutateOptimisticAckRejectAndOrder(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	sub, err := r.c.Sync(scopeA)
	if err != nil {
		t.Fatal(err)
	}
	// Made before any connection: queued.
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	m1, err := r.c.Mutate(ctx, Mutation{Resource: "todos", Name: "rename", Args: map[string]any{"id": "t1"}, Local: setTitle("t1", "local one"), TraceParent: tp})
	if err != nil {
		t.Fatal(err)
	}
	if len(m1.Key()) != 32 || m1.Seq() != 1 {
		t.Errorf("generated key %q seq %d, want 32 hex digits and seq 1", m1.Key(), m1.Seq())
	}
	if got := titles(t, sub); got["t1"] != "local one" {
		t.Errorf("optimistic row not visible at once: %v", got)
	}
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	s := fc.nextOf(ctx, t, protocol.FrameSubscribe) // subscriptions first
	f1 := fc.nextOf(ctx, t, protocol.FrameMutate)
	if f1.Key != m1.Key() || f1.Seq != 1 || f1.Resource != "todos" || f1.Name != "rename" || string(f1.Args) != `{"id":"t1"}` || f1.At <= 0 || f1.TraceParent != tp {
		t.Errorf("mutate frame %+v", f1)
	}
	fc.send(t, changes(s.ID, cur(1), map[string]any{"op": "upsert", "key": "t1", "row": todoRow("t1", "server zero")}))
	fc.send(t, caughtUp(s.ID, cur(1)))
	if err := sub.Wait(ctx); err != nil || sub.State() != SubLive {
		t.Fatalf("Wait = %v, state %s", err, sub.State())
	}
	if got := titles(t, sub); got["t1"] != "local one" {
		t.Errorf("the pending write must stay on top of the snapshot: %v", got)
	}

	m2, _ := r.c.Mutate(ctx, Mutation{Key: "k2", Resource: "todos", Name: "rename", Local: setTitle("t2", "two")})
	m3, _ := r.c.Mutate(ctx, Mutation{Key: "k3", Resource: "todos", Name: "rename", Local: setTitle("t3", "three")})
	if _, err := r.c.Mutate(ctx, Mutation{Key: "k3", Resource: "todos", Name: "rename"}); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("a key in use: %v, want ErrDuplicateKey", err)
	}
	for _, want := range []string{"k2", "k3"} {
		if f := fc.nextOf(ctx, t, protocol.FrameMutate); f.Key != want {
			t.Fatalf("sent %s, want %s (sequence order)", f.Key, want)
		}
	}

	// The ack of m1 lands the server's row, once notified.
	v := sub.Version()
	fc.send(t, ack(m1.Key(), cur(2), upRow("t1", todoRow("t1", "server one"))))
	res, err := m1.Wait(ctx)
	if err != nil || res.Cursor != cur(2) || len(res.Entries) != 1 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	waitVersion(ctx, t, sub, v+1)
	// A reject of m2 rolls it back, m3 stays.
	fc.send(t, reject("k2", protocol.CodeForbidden))
	_, err = m2.Wait(ctx)
	var re *RejectError
	if !errors.As(err, &re) || re.Code != protocol.CodeForbidden {
		t.Fatalf("Wait = %v, want a RejectError forbidden", err)
	}
	waitVersion(ctx, t, sub, v+2)
	if got := titles(t, sub); !maps2(got, map[string]string{"t1": "server one", "t3": "three"}) {
		t.Errorf("rows %v", got)
	}
	if got := sub.Version(); got != v+2 {
		t.Errorf("%d notifications for an ack and a reject, want 2", got-v)
	}
	if got := keysOfPending(r.c.Pending()); !slices.Equal(got, []string{m1.Key(), "k3"}) {
		t.Errorf("pending %v: m1 waits for the scope to reach its cursor", got)
	}
	// The scope reaches the ack's cursor: m1 settles.
	fc.send(t, changes(s.ID, cur(2), map[string]any{"op": "upsert", "key": "t1", "row": todoRow("t1", "server one")}))
	select {
	case <-m1.Settled():
	case <-ctx.Done():
		t.Fatal("m1 did not settle when the scope reached its cursor")
	}
	if got := keysOfPending(r.c.Pending()); !slices.Equal(got, []string{"k3"}) {
		t.Errorf("pending %v after m1 settled", got)
	}

	// An unanswered mutation is resent on reconnect with its key.
	r.c.Reconnect()
	fc2 := r.fs.accept(ctx, t)
	fc2.handshake(ctx, t)
	if s2 := fc2.nextOf(ctx, t, protocol.FrameSubscribe); s2.Cursor != cur(2) {
		t.Errorf("resubscribe cursor %q", s2.Cursor)
	}
	if f := fc2.nextOf(ctx, t, protocol.FrameMutate); f.Key != "k3" || f.Seq != m3.Seq() || f.At == 0 {
		t.Errorf("resend %+v", f)
	}
}

func maps2(a, b map[string]string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestMutateConflictReachesWaitAndEvent(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	sub, _ := r.c.Sync(scopeA)
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	s := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	fc.send(t, caughtUp(s.ID, cur(1)))
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := r.c.Mutate(ctx, Mutation{Key: "c1", Resource: "todos", Name: "rename", Local: setTitle("t1", "mine"),
		Strategy: Merge(func(local, base, server json.RawMessage) (json.RawMessage, error) {
			return nil, errors.New("both edited")
		})})
	if err != nil {
		t.Fatal(err)
	}
	fc.nextOf(ctx, t, protocol.FrameMutate)
	fc.send(t, ack("c1", cur(2), upRow("t1", todoRow("t1", "theirs"))))
	res, err := m.Wait(ctx)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.RowKey != "t1" || res.Key != "c1" {
		t.Fatalf("Wait = %+v, %v; want a ConflictError on t1", res, err)
	}
	r.events.waitKind(ctx, t, EventMutationConflict, 1)
	if got := titles(t, sub); got["t1"] != "theirs" {
		t.Errorf("after a conflict the server's row lands: %v", got)
	}
}

func TestOfflineQueueSurvivesRestart(t *testing.T) {
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "tide.json")
	store1, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	fs := newFakeServer(t)
	c1, _ := newTestClient(t, Config{URL: fs.url, Store: store1})
	sub1, _ := c1.Sync(scopeA)
	var keys []string
	var ats []int64
	for i := range 3 {
		m, err := c1.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: map[string]int{"n": i}, Local: setTitle(fmt.Sprintf("t%d", i), "offline"),
			TraceParent: fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e473%d-00f067aa0ba902b7-01", i)})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, m.Key())
	}
	if len(sub1.Rows()) != 3 {
		t.Fatalf("rows %v", sub1.Rows())
	}
	// The process ends without ever connecting. A new one opens the file.
	store2, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := newTestClient(t, Config{URL: fs.url, Store: store2})
	if got := keysOfPending(c2.Pending()); !slices.Equal(got, keys) {
		t.Fatalf("restored pending %v, want %v", got, keys)
	}
	sub2, _ := c2.Sync(scopeA)
	if got := titles(t, sub2); len(got) != 3 || got["t0"] != "offline" {
		t.Errorf("the optimistic rows were not restored with the queue: %v", got)
	}
	start(t, c2)
	fc := fs.accept(ctx, t)
	fc.handshake(ctx, t)
	fc.nextOf(ctx, t, protocol.FrameSubscribe)
	for i, want := range keys {
		f := fc.nextOf(ctx, t, protocol.FrameMutate)
		if f.Key != want || f.Seq != int64(i+1) || string(f.Args) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("mutate %d = %+v, want key %s seq %d", i, f, want, i+1)
		}
		if tp := fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e473%d-00f067aa0ba902b7-01", i); f.TraceParent != tp {
			t.Errorf("mutate %d after the restart: traceparent %q, want %q", i, f.TraceParent, tp)
		}
		ats = append(ats, f.At)
	}
	if !slices.IsSorted(ats) || ats[0] <= 0 {
		t.Errorf("at %v", ats)
	}
	// A mutation of the new process continues the sequence.
	m, err := c2.Mutate(ctx, Mutation{Resource: "todos", Name: "add"})
	if err != nil || m.Seq() != 4 {
		t.Errorf("next seq %d (%v), want 4", m.Seq(), err)
	}
}

// A synced scope persisted with its cursor resumes a complete copy: the
// rows written before the restart are there, and only the changes since
// are asked for.
func TestSyncedCopyResumesAfterRestart(t *testing.T) {
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "tide.json")
	fs := newFakeServer(t)
	store1, _ := NewFileStore(path)
	c1, ev1 := newTestClient(t, Config{URL: fs.url, Store: store1})
	sub1, _ := c1.Sync(scopeA)
	h1 := start(t, c1)
	fc := fs.accept(ctx, t)
	fc.handshake(ctx, t)
	s := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	fc.send(t, changes(s.ID, cur(3), map[string]any{"op": "upsert", "key": "a", "row": todoRow("a", "A")}, map[string]any{"op": "upsert", "key": "b", "row": todoRow("b", "B")}))
	fc.send(t, caughtUp(s.ID, cur(3)))
	ev1.waitKind(ctx, t, EventCaughtUp, 1)
	if len(sub1.Rows()) != 2 {
		t.Fatalf("rows %v", sub1.Rows())
	}
	h1.stop(t)

	store2, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c2, ev2 := newTestClient(t, Config{URL: fs.url, Store: store2})
	sub2, _ := c2.Sync(scopeA)
	if got := titles(t, sub2); !maps2(got, map[string]string{"a": "A", "b": "B"}) || sub2.Cursor() != cur(3) {
		t.Fatalf("restored copy %v at %q", got, sub2.Cursor())
	}
	start(t, c2)
	fc2 := fs.accept(ctx, t)
	fc2.handshake(ctx, t)
	s2 := fc2.nextOf(ctx, t, protocol.FrameSubscribe)
	if s2.Cursor != cur(3) {
		t.Fatalf("resumed from %q, want %q", s2.Cursor, cur(3))
	}
	fc2.send(t, changes(s2.ID, cur(4), del("a"), map[string]any{"op": "upsert", "key": "c", "row": todoRow("c", "C")}))
	fc2.send(t, caughtUp(s2.ID, cur(4)))
	ev2.waitKind(ctx, t, EventCaughtUp, 1)
	if got := titles(t, sub2); !maps2(got, map[string]string{"b": "B", "c": "C"}) {
		t.Errorf("after resume %v, want b and c", got)
	}
}

// TestSyncIgnoresACursorWithoutRows: a cursor stored without rows is never
// used by Sync.
func TestSyncIgnoresACursorWithoutRows(t *testing.T) {
	store, err := NewFileStore(filepath.Join(t.TempDir(), "tide.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{URL: "ws://127.0.0.1:1/tide/ws", Store: store})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := scopeA.Digest()
	n, _ := scopeA.normalize()
	_ = store.Save(context.Background(), Record{Digest: d, Resource: "todos", Conditions: n.condJSON, State: StateLive, Cursor: cur(9)})
	if _, err := c.Sync(scopeA); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := store.Load(context.Background(), d); r.Cursor != "" {
		t.Errorf("Sync kept cursor %q that had no copy", r.Cursor)
	}
}

func TestRefusedSubscriptionStateAndRenewedSession(t *testing.T) {
	ctx := testCtx(t)
	var dials atomic.Int32
	r := newFakeRig(t, Config{HeaderFunc: func(context.Context) (http.Header, error) {
		return http.Header{"Cookie": {fmt.Sprintf("session=s%d", dials.Add(1))}}, nil
	}})
	sub, _ := r.c.Sync(scopeA)
	if sub.State() != SubConnecting {
		t.Errorf("state %s before Run", sub.State())
	}
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	if got := fc.header.Get("Cookie"); got != "session=s1" {
		t.Errorf("first dial cookie %q", got)
	}
	fc.handshake(ctx, t)
	s := fc.nextOf(ctx, t, protocol.FrameSubscribe)
	fc.send(t, errorFrame(s.ID, protocol.CodeUnauthenticated))
	err := sub.Wait(ctx)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeUnauthenticated {
		t.Fatalf("Wait = %v, want the unauthenticated refusal", err)
	}
	if !errors.As(sub.Err(), &pe) || pe.Code != protocol.CodeUnauthenticated {
		t.Errorf("Err = %v", sub.Err())
	}
	// The client reconnects with a renewed session from HeaderFunc.
	fc2 := r.fs.accept(ctx, t)
	if got := fc2.header.Get("Cookie"); got != "session=s2" {
		t.Errorf("second dial cookie %q, want a renewed one", got)
	}
	fc2.handshake(ctx, t)
	s2 := fc2.nextOf(ctx, t, protocol.FrameSubscribe)
	fc2.send(t, caughtUp(s2.ID, cur(1)))
	if err := sub.Wait(ctx); err != nil || sub.Err() != nil || sub.State() != SubLive {
		t.Errorf("after caught-up Wait = %v, Err = %v", err, sub.Err())
	}
}

func TestTokenFailuresNeverEndRun(t *testing.T) {
	ctx := testCtx(t)
	var calls atomic.Int32
	r := newFakeRig(t, Config{Token: func(context.Context) (string, error) {
		n := calls.Add(1)
		if n <= 3 || n >= 5 && n <= 7 { // hello fails 3 times; then the refresh fails 3 times
			return "", fmt.Errorf("token endpoint down (call %d)", n)
		}
		return fmt.Sprintf("tok-%d", n), nil
	}})
	h := start(t, r.c)
	fc := r.fs.accept(ctx, t)
	if hello := fc.handshake(ctx, t); hello.Token != "tok-4" {
		t.Fatalf("hello token %q, want tok-4 after three failures", hello.Token)
	}
	fc.send(t, map[string]any{"v": 1, "type": "refresh-token", "expires_in": 30})
	if f := fc.nextOf(ctx, t, protocol.FrameRefresh); f.Token != "tok-8" {
		t.Errorf("refresh token %q, want tok-8 after three failures", f.Token)
	}
	if n := r.events.count(EventTokenError); n != 6 {
		t.Errorf("%d token-error events, want 6", n)
	}
	// The token expires on an established connection: the server closes
	// with 1008, and the client reconnects with a fresh token.
	fc.send(t, errorFrame("", protocol.CodeUnauthenticated))
	fc.close(t, int(protocol.ClosePolicy), "the token expired")
	fc2 := r.fs.accept(ctx, t)
	if hello := fc2.handshake(ctx, t); hello.Token != "tok-9" {
		t.Errorf("hello after expiry %q, want tok-9", hello.Token)
	}
	// A fresh token refused before welcome is final.
	fc2.close(t, int(protocol.ClosePolicy), "revoked")
	fc3 := r.fs.accept(ctx, t)
	fc3.nextOf(ctx, t, protocol.FrameHello)
	fc3.send(t, errorFrame("", protocol.CodeUnauthenticated))
	fc3.close(t, int(protocol.ClosePolicy), "access revoked")
	var ce *CloseError
	if err := h.result(ctx, t); !errors.As(err, &ce) || ce.Code != protocol.ClosePolicy {
		t.Fatalf("Run = %v, want a CloseError 1008 after a fresh token was refused", err)
	}
}

func TestIdenticalTokenIsNotResent(t *testing.T) {
	ctx := testCtx(t)
	var calls atomic.Int32
	r := newFakeRig(t, Config{Token: func(context.Context) (string, error) {
		if calls.Add(1) <= 4 {
			return "cached", nil // hello, then three refreshes returning the same token
		}
		return "fresh", nil
	}})
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	fc.send(t, map[string]any{"v": 1, "type": "refresh-token", "expires_in": 30})
	fc.send(t, map[string]any{"v": 1, "type": "refresh-token", "expires_in": 30}) // asked again: still one refresh loop
	f := fc.nextOf(ctx, t, protocol.FrameRefresh)
	if f.Token != "fresh" {
		t.Errorf("refresh sent %q, want only the new token", f.Token)
	}
	es := r.events.waitKind(ctx, t, EventTokenError, 3)
	for _, e := range es {
		if !errors.Is(e.Err, ErrSameToken) {
			t.Errorf("event %v, want ErrSameToken", e)
		}
	}
	// Nothing else was sent: the next frame is a subscribe made now.
	r.subscribe(t, scopeB, newTestRows())
	fc.nextOf(ctx, t, protocol.FrameSubscribe)
	if n := calls.Load(); n != 5 {
		t.Errorf("%d token calls, want 5", n)
	}
}

// TestMutateRefusesBadInput: Mutate checks its input before it changes or
// queues anything.
func TestMutateRefusesBadInput(t *testing.T) {
	r := newFakeRig(t, Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		m    Mutation
	}{
		{"no resource", Mutation{Name: "rename"}},
		{"no name", Mutation{Resource: "todos"}},
		{"key with a control character", Mutation{Resource: "todos", Name: "rename", Key: "k\n"}},
		{"traceparent too long", Mutation{Resource: "todos", Name: "rename", TraceParent: strings.Repeat("0", protocol.MaxTraceParentLen+1)}},
		{"traceparent with a control character", Mutation{Resource: "todos", Name: "rename", TraceParent: "00-\x07"}},
	} {
		if _, err := r.c.Mutate(ctx, tc.m); err == nil {
			t.Errorf("%s: Mutate accepted %+v", tc.name, tc.m)
		}
	}
	if n := len(r.c.Pending()); n != 0 {
		t.Errorf("%d mutations queued by refused calls", n)
	}
}

// A refused scope of the written resource brings nothing until the server
// allows it again, so it must not hold mutations back from settling: they
// settle once the scopes that are served reach the ack's cursor.
func TestRefusedScopeDoesNotHoldMutationsBack(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	subA, err := r.c.Sync(scopeA)
	if err != nil {
		t.Fatal(err)
	}
	subB, err := r.c.Sync(scopeB)
	if err != nil {
		t.Fatal(err)
	}
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	ids := map[string]string{} // scope's project → subscription id
	for range 2 {
		s := fc.nextOf(ctx, t, protocol.FrameSubscribe)
		var p string
		if err := json.Unmarshal(s.Conditions["project_id"], &p); err != nil {
			t.Fatalf("subscribe %+v: %v", s, err)
		}
		ids[p] = s.ID
	}
	fc.send(t, errorFrame(ids["p2"], protocol.CodeForbidden))
	fc.send(t, caughtUp(ids["p1"], cur(1)))
	if err := subA.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := subB.Wait(ctx); err == nil || subB.State() != SubFailed {
		t.Fatalf("refused scope: Wait = %v, state %s", err, subB.State())
	}
	m, err := r.c.Mutate(ctx, Mutation{Key: "k1", Resource: "todos", Name: "rename", Local: setTitle("t1", "one")})
	if err != nil {
		t.Fatal(err)
	}
	fc.nextOf(ctx, t, protocol.FrameMutate)
	fc.send(t, ack("k1", cur(2), upRow("t1", todoRow("t1", "one"))))
	if _, err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	fc.send(t, changes(ids["p1"], cur(2), upRow("t1", todoRow("t1", "one"))))
	select {
	case <-m.Settled():
	case <-ctx.Done():
		t.Fatalf("the mutation did not settle once the served scope reached its cursor; pending %v", keysOfPending(r.c.Pending()))
	}
	if got := keysOfPending(r.c.Pending()); len(got) != 0 {
		t.Errorf("pending %v", got)
	}
}
