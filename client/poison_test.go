package client

// No poison pills: a mutation that can never be sent is refused at Mutate,
// or settled once it is known to be undeliverable; it never stays pending
// forever.

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

// addTodoMutator declares todos.add, which upserts the todo of its args.
func addTodoMutator(t *testing.T, srv *realServer) {
	t.Helper()
	err := core.AddMutator(srv.todos, "add", core.Mutator[addArgs]{
		Authorize: func(context.Context, authz.Principal, addArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			return srv.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p1", Title: a.Title})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// wantRefused checks that err is a *RejectError of code.
func wantRefused(t *testing.T, err error, code protocol.Code) *RejectError {
	t.Helper()
	var re *RejectError
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("err = %v, want a RejectError %s", err, code)
	}
	return re
}

func TestMutateRefusesWhatCanNeverBeSent(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{MaxFrameBytes: 4096})
	addTodoMutator(t, srv)
	path := filepath.Join(t.TempDir(), "store.json")
	store, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}

	// Before any welcome the limit is 65536 bytes.
	c0, _ := newTestClient(t, Config{URL: srv.url, Store: store})
	ran := false
	local := func(tx *LocalTx) error { ran = true; return tx.Upsert("todos", "big", todoRow("big", "x")) }
	_, err = c0.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: addArgs{ID: "big", Title: strings.Repeat("x", 70000)}, Local: local})
	re := wantRefused(t, err, protocol.CodeFrameTooLarge)
	if ran || len(c0.Pending()) != 0 {
		t.Errorf("a refused mutation ran Local (%v) or was queued (%v)", ran, keysOfPending(c0.Pending()))
	}
	if re.Message == "" || strings.Contains(re.Error(), re.Key) {
		t.Errorf("refusal %q (message %q) must have a message and no key", re.Error(), re.Message)
	}

	// A welcome announces 4096 bytes; the store remembers it.
	sub, err := c0.Sync(p1)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, c0)
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_ = h.stop(t)
	store2, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newTestClient(t, Config{URL: srv.url, Store: store2})
	sub, err = c.Sync(p1)
	if err != nil {
		t.Fatal(err)
	}
	v := sub.Version()
	_, err = c.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: addArgs{ID: "big", Title: strings.Repeat("x", 5000)}, Local: local})
	wantRefused(t, err, protocol.CodeFrameTooLarge)
	for _, args := range []any{[]int{1, 2}, "text", make(chan int)} {
		_, err = c.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: args, Local: local})
		if re := wantRefused(t, err, protocol.CodeInvalidArgs); re.Detail == "" {
			t.Errorf("args %T: no detail in %+v", args, re)
		}
	}
	if ran || len(c.Pending()) != 0 || sub.Version() != v {
		t.Errorf("refused mutations ran Local (%v), were queued (%v) or changed the rows", ran, keysOfPending(c.Pending()))
	}
	if q, err := store2.LoadQueue(ctx); err != nil || len(q.Mutations) != 0 {
		t.Errorf("stored queue %+v, %v; want empty", q, err)
	}
	// Below the limit all is well.
	m, err := c.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: addArgs{ID: "ok", Title: strings.Repeat("x", 3000)}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if _, err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A queued mutation whose frame exceeds the limit a later welcome
// announces is settled as rejected at that welcome, never sent.
func TestQueuedMutationOverANewLimitIsSettled(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{MaxFrameBytes: 4096})
	addTodoMutator(t, srv)
	store := NewMemoryStore() // no welcome yet: the limit is 65536
	c, events := newTestClient(t, Config{URL: srv.url, Store: store})
	sub, err := c.Sync(p1)
	if err != nil {
		t.Fatal(err)
	}
	big, err := c.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: addArgs{ID: "big", Title: strings.Repeat("x", 5000)},
		Local: func(tx *LocalTx) error { return tx.Upsert("todos", "big", todoRow("big", "x")) }})
	if err != nil {
		t.Fatal(err)
	}
	small, err := c.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: addArgs{ID: "small", Title: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	_, err = big.Wait(ctx)
	wantRefused(t, err, protocol.CodeFrameTooLarge)
	if _, err := small.Wait(ctx); err != nil {
		t.Fatalf("the mutation after it: %v", err)
	}
	<-big.Settled()
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := sub.Rows()["big"]; ok {
		t.Error("the refused mutation's optimistic row stayed")
	}
	es := events.waitKind(ctx, t, EventMutationRejected, 1)
	if es[0].Key != big.Key() || es[0].Code != protocol.CodeFrameTooLarge {
		t.Errorf("event %v", es[0])
	}
}

// A reject of code frame_too_large settles the mutation like any reject.
func TestFrameTooLargeRejectSettles(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	sub, err := r.c.Sync(scopeA)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.c.Mutate(ctx, Mutation{Key: "k1", Resource: "todos", Name: "add", Local: setTitle("t1", "local")})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	fc.nextOf(ctx, t, protocol.FrameSubscribe)
	fc.nextOf(ctx, t, protocol.FrameMutate)
	fc.send(t, map[string]any{"v": 1, "type": "reject", "key": "k1", "code": "frame_too_large", "message": "too large", "detail": "frames are limited to 65536 bytes"})
	_, err = m.Wait(ctx)
	if re := wantRefused(t, err, protocol.CodeFrameTooLarge); re.Message != "too large" || re.Detail != "frames are limited to 65536 bytes" {
		t.Errorf("reject %+v", re)
	}
	<-m.Settled()
	if len(r.c.Pending()) != 0 || len(sub.Rows()) != 0 {
		t.Errorf("pending %v, rows %v", keysOfPending(r.c.Pending()), sub.Rows())
	}
}

// The mutate frame has its key right after its type, so a server that
// refuses it for its size can still read the key.
func TestMutateFrameKeyFirst(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	if _, err := r.c.Mutate(ctx, Mutation{Key: "k1", Resource: "todos", Name: "add", Args: map[string]any{"title": "x"}}); err != nil {
		t.Fatal(err)
	}
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	select {
	case m := <-fc.msgs:
		if !strings.HasPrefix(string(m.raw), `{"v":1,"type":"mutate","key":"k1",`) || m.err != nil {
			t.Errorf("mutate frame %s (%v)", m.raw, m.err)
		}
	case <-ctx.Done():
		t.Fatal("no mutate frame")
	}
}

// A queued mutation sent on five connections the server closed before
// answering it is settled as undeliverable; a connection the client
// dropped does not count.
func TestUndeliverableMutationIsSettled(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	m, err := r.c.Mutate(ctx, Mutation{Key: "k1", Resource: "todos", Name: "add"})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r.c)
	for i := range maxCloses + 1 {
		fc := r.fs.accept(ctx, t)
		fc.handshake(ctx, t)
		if f := fc.nextOf(ctx, t, protocol.FrameMutate); f.Key != "k1" {
			t.Fatalf("sent %+v", f)
		}
		if i == 2 {
			r.c.Reconnect() // the client's own drop: not the server's refusal
			fc.waitClosed(ctx, t)
			continue
		}
		fc.close(t, websocket.CloseInternalServerErr, "crashed")
	}
	_, err = m.Wait(ctx)
	wantRefused(t, err, CodeUndeliverable)
	<-m.Settled()
	es := r.events.waitKind(ctx, t, EventMutationRejected, 1)
	if es[0].Key != "k1" || es[0].Code != CodeUndeliverable {
		t.Errorf("event %v", es[0])
	}
	// The next connection does not send it again.
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	if len(r.c.Pending()) != 0 {
		t.Errorf("pending %v", keysOfPending(r.c.Pending()))
	}
}

// A reject rate_limited (too many mutations of this user wait on the
// server) keeps the mutation pending and its local change applied, and the
// client resends it with the same key after a backoff.
func TestRateLimitedRejectResends(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	sub, err := r.c.Sync(scopeA)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.c.Mutate(ctx, Mutation{Key: "k1", Resource: "todos", Name: "add", Local: setTitle("t1", "local")})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	fc.nextOf(ctx, t, protocol.FrameSubscribe)
	fc.nextOf(ctx, t, protocol.FrameMutate)
	fc.send(t, map[string]any{"v": 1, "type": "reject", "key": "k1", "code": "rate_limited", "message": "too many mutations wait"})
	if f := fc.nextOf(ctx, t, protocol.FrameMutate); f.Key != "k1" {
		t.Fatalf("resent %+v", f)
	}
	select {
	case <-m.Settled():
		t.Fatal("a rate_limited mutation was settled")
	default:
	}
	if len(r.c.Pending()) != 1 || len(sub.Rows()) != 1 {
		t.Errorf("pending %v, rows %v", keysOfPending(r.c.Pending()), sub.Rows())
	}
}

// A connection that ends without a close frame from the server (its
// process killed, the network lost: the client reads end of file, which
// the websocket library reports as close code 1006) is a network loss,
// not the server refusing the mutation: however many there are, the
// mutation stays pending and is sent again.
func TestDroppedConnectionsDoNotSettle(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	m, err := r.c.Mutate(ctx, Mutation{Key: "k1", Resource: "todos", Name: "add"})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r.c)
	for range maxCloses + 1 {
		fc := r.fs.accept(ctx, t)
		fc.handshake(ctx, t)
		if f := fc.nextOf(ctx, t, protocol.FrameMutate); f.Key != "k1" {
			t.Fatalf("sent %+v", f)
		}
		_ = fc.ws.Close() // the TCP connection ends, no close frame
	}
	fc := r.fs.accept(ctx, t)
	fc.handshake(ctx, t)
	if f := fc.nextOf(ctx, t, protocol.FrameMutate); f.Key != "k1" {
		t.Fatalf("after %d dropped connections, sent %+v, want k1 again", maxCloses+1, f)
	}
	select {
	case <-m.Settled():
		_, err := m.Wait(ctx)
		t.Fatalf("settled after dropped connections: %v", err)
	default:
	}
	if p := keysOfPending(r.c.Pending()); len(p) != 1 {
		t.Errorf("pending %v, want k1", p)
	}
}
