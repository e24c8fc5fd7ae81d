package core_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

type addArgs struct {
	ID        string `json:"id"`
	ProjectID string `json:"project_id"`
	Title     string `json:"title"`
}

// memberOf allows a principal to write the projects of its "projects" claim.
func memberOf(_ context.Context, p authz.Principal, a addArgs) error {
	if p.IsAnonymous() {
		return authz.ErrUnauthenticated
	}
	for _, pr := range p.Strings("projects") {
		if pr == a.ProjectID {
			return nil
		}
	}
	return fmt.Errorf("%w: not a member of %s", authz.ErrForbidden, a.ProjectID)
}

// addMutators declares todos.add (counting its runs), todos.fail and
// todos.conflict, and todos.open (no policy).
func addMutators(t *testing.T, s *server) *atomic.Int64 {
	t.Helper()
	var runs atomic.Int64
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(core.AddMutator(s.todos, "add", core.Mutator[addArgs]{
		Authorize: memberOf,
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			runs.Add(1)
			if a.Title == "" {
				return fmt.Errorf("%w: a todo needs a title", core.ErrInvalidArgs)
			}
			return s.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: a.ProjectID, Title: a.Title})
		},
	}))
	must(core.AddMutator(s.todos, "conflict", core.Mutator[addArgs]{
		Authorize: memberOf,
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			if err := s.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: a.ProjectID, Title: "written, then rolled back"}); err != nil {
				return err
			}
			return fmt.Errorf("%w: %s is taken", core.ErrConflict, a.Title)
		},
	}))
	must(core.AddMutator(s.todos, "fail", core.Mutator[addArgs]{
		Authorize: memberOf,
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			if err := s.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: a.ProjectID, Title: "rolled back"}); err != nil {
				return err
			}
			panic("the mutator broke")
		},
	}))
	must(core.AddMutator(s.todos, "open", core.Mutator[addArgs]{
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error { return nil },
	}))
	return &runs
}

func mutateFrame(key, name string, args any, at time.Time) map[string]any {
	return map[string]any{"v": 1, "type": "mutate", "key": key, "seq": 1, "resource": "todos", "name": name, "args": args, "at": at.UnixMilli()}
}

// TestMutateAtAheadWithinBound: a device whose clock runs ahead of the
// server's, by less than a day, still has its mutations run (the bound is
// for clocks that are wrong, not for skew).
func TestMutateAtAheadWithinBound(t *testing.T) {
	s := newServer(t, core.Config{})
	addMutators(t, s)
	c := s.dial(t, "alice", "p7")
	c.hello()
	c.Send(mutateFrame("ahead", "add", addArgs{ID: "t1", ProjectID: "p7", Title: "ship"}, time.Now().Add(23*time.Hour)))
	if ack := c.Expect(protocol.FrameAck); ack.Key != "ahead" {
		t.Fatalf("ack %+v", ack)
	}
}

// TestMutateAckAndSubscriber: an applied mutation is acked with its rows and
// a cursor (its entries name the writer's origin), and the row reaches a
// subscriber of its scope, another principal's device, without it.
func TestMutateAckAndSubscriber(t *testing.T) {
	s := newServer(t, core.Config{})
	runs := addMutators(t, s)
	sub := s.dial(t, "bob", "p7")
	sub.hello()
	sub.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
	sub.Collect("s")

	c := s.dial(t, "alice", "p7")
	c.Hello(protocol.ClientFrame{Origin: "alice-phone"})
	c.Send(mutateFrame("k1", "add", addArgs{ID: "t1", ProjectID: "p7", Title: "ship"}, time.Now()))
	ack := c.Expect(protocol.FrameAck)
	if ack.Key != "k1" || ack.Replayed || len(ack.Entries) != 1 {
		t.Fatalf("ack %+v", ack)
	}
	e := ack.Entries[0]
	if e.Op != "upsert" || e.Key != "t1" || e.Resource != "todos" || e.Origin != "alice-phone" {
		t.Fatalf("ack entry %+v", e)
	}
	if _, err := protocol.ParseCursor(ack.Cursor); err != nil {
		t.Fatalf("ack cursor %q: %v", ack.Cursor, err)
	}
	live := sub.Expect(protocol.FrameChanges)
	if len(live.Entries) != 1 || live.Entries[0].Key != "t1" || live.Entries[0].Origin != "" {
		t.Fatalf("subscriber got %+v", live)
	}
	if live.Cursor != ack.Cursor {
		t.Fatalf("the subscriber's cursor %s is not the ack's %s", live.Cursor, ack.Cursor)
	}
	if runs.Load() != 1 {
		t.Fatalf("mutator ran %d times", runs.Load())
	}
}

// TestMutateResendIsReplayed: a key sent again, on the same connection or
// another one of the same principal and origin, returns the recorded ack
// without running the mutator; another origin's key of the same text is
// its own mutation.
func TestMutateResendIsReplayed(t *testing.T) {
	s := newServer(t, core.Config{})
	runs := addMutators(t, s)
	at := time.Now()
	args := addArgs{ID: "t1", ProjectID: "p7", Title: "once"}
	c := s.dial(t, "alice", "p7")
	c.Hello(protocol.ClientFrame{Origin: "o1"})
	c.Send(mutateFrame("k1", "add", args, at))
	first := c.Expect(protocol.FrameAck)
	c.Send(mutateFrame("k1", "add", args, at))
	again := c.Expect(protocol.FrameAck)
	if !again.Replayed || len(again.Entries) != 1 || string(again.Entries[0].Row) != string(first.Entries[0].Row) {
		t.Fatalf("resend: %+v, first %+v", again, first)
	}
	c.Close()

	c2 := s.dial(t, "alice", "p7")
	c2.Hello(protocol.ClientFrame{Origin: "o1"})
	c2.Send(mutateFrame("k1", "add", args, at))
	if f := c2.Expect(protocol.FrameAck); !f.Replayed {
		t.Fatalf("resend after reconnect ran again: %+v", f)
	}
	if runs.Load() != 1 {
		t.Fatalf("mutator ran %d times for one key", runs.Load())
	}
	other := s.dial(t, "alice", "p7")
	other.Hello(protocol.ClientFrame{Origin: "o2"})
	other.Send(mutateFrame("k1", "add", args, at))
	if f := other.Expect(protocol.FrameAck); f.Replayed {
		t.Fatalf("another device's key was taken for this one's: %+v", f)
	}
	if runs.Load() != 2 {
		t.Fatalf("mutator ran %d times, want 2", runs.Load())
	}
}

// TestAnonymousMutationsNeedAnOrigin: anonymous callers' keys are scoped to
// their hello's origin: two anonymous devices that send the same key each
// have their own write applied (a resend is still replayed), and an
// anonymous mutation on a connection without an origin is refused
// bad_frame, with nothing run or recorded (a resend is refused again). A
// signed-in caller needs none.
func TestAnonymousMutationsNeedAnOrigin(t *testing.T) {
	s := newServer(t, core.Config{})
	var runs atomic.Int64
	if err := core.AddMutator(s.todos, "guest", core.Mutator[addArgs]{
		Authorize: func(context.Context, authz.Principal, addArgs) error { return nil }, // anyone, anonymous callers included
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			runs.Add(1)
			return s.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: a.ProjectID, Title: a.Title})
		},
	}); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	conn := func(user, origin string) *wsClient {
		c := s.dial(t, user, "p7")
		c.Hello(protocol.ClientFrame{Origin: origin})
		return c
	}
	const originA, originB = "go-5WQ2ZK7R4M3XH6TB1N9VCJ8DPA", "go-E3F7KQ2M9TZ5XR1W8HN6VB4CJD"
	for _, tt := range []struct {
		name, user, origin, id string
		replayed               bool
	}{
		{"first anonymous device", "", originA, "a1", false},
		{"second anonymous device, same key", "", originB, "b1", false},
		{"the first device resends", "", originA, "a1", true},
		{"a signed-in caller without an origin", "alice", "", "s1", false},
	} {
		c := conn(tt.user, tt.origin)
		c.Send(mutateFrame("k1", "guest", addArgs{ID: tt.id, ProjectID: "p7", Title: "hi"}, at))
		f := c.Expect(protocol.FrameAck)
		if f.Replayed != tt.replayed || len(f.Entries) != 1 || f.Entries[0].Key != tt.id {
			t.Fatalf("%s: %+v, want the ack of its own write %s (replayed %v)", tt.name, f, tt.id, tt.replayed)
		}
	}
	c := conn("", "")
	for i := range 2 {
		c.Send(mutateFrame("k2", "guest", addArgs{ID: "n1", ProjectID: "p7", Title: "hi"}, at))
		f := c.Expect(protocol.FrameReject)
		if f.Key != "k2" || f.Code != protocol.CodeBadFrame || !strings.Contains(f.Detail, "origin") || f.Message == "" {
			t.Fatalf("anonymous without an origin, try %d: %+v", i, f)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("the mutator ran %d times, want 3", runs.Load())
	}
}

// TestMutateRefusals: each refusal is a reject with its code, a message a
// person may be shown (the mutator's own words for invalid_args and
// conflict, JSON's terms for arguments that do not decode, a fixed one
// for the rest: never Go's types, never "tide:") and a detail for
// developers; the connection keeps serving, and nothing is written. A
// failing mutator's error stays in the server's log: it may name data
// the caller may not see.
func TestMutateRefusals(t *testing.T) {
	s := newServer(t, core.Config{})
	addMutators(t, s)
	ok := addArgs{ID: "t9", ProjectID: "p7", Title: "x"}
	for _, tt := range []struct {
		name    string
		frame   any
		code    protocol.Code
		message string
		detail  string // a part of it
	}{
		{"unknown resource", map[string]any{"v": 1, "type": "mutate", "key": "r1", "resource": "nope", "name": "add", "at": time.Now().UnixMilli()}, protocol.CodeUnknownResource,
			"this action is not available", `no resource "nope"`},
		{"unknown mutator", mutateFrame("r2", "explode", ok, time.Now()), protocol.CodeUnknownMutator,
			"this action is not available", `resource todos has no mutator "explode"`},
		{"args of the wrong type", mutateFrame("r3", "add", map[string]any{"title": 7}, time.Now()), protocol.CodeInvalidArgs,
			"title must be a string", "todos.add: json: cannot unmarshal number"},
		{"args not an object", mutateFrame("r4", "add", []int{1}, time.Now()), protocol.CodeInvalidArgs,
			"the change is not valid", "args is a JSON object"},
		{"invalid by the mutator", mutateFrame("r5", "add", addArgs{ID: "t9", ProjectID: "p7"}, time.Now()), protocol.CodeInvalidArgs,
			"a todo needs a title", "todos.add: tide: invalid arguments: a todo needs a title"},
		{"policy refuses", mutateFrame("r6", "add", addArgs{ID: "t9", ProjectID: "p9", Title: "x"}, time.Now()), protocol.CodeForbidden,
			"you do not have access to this", "todos.add: authz: forbidden: not a member of p9"},
		{"no policy", mutateFrame("r7", "open", ok, time.Now()), protocol.CodeForbidden,
			"you do not have access to this", "the mutator has no policy"},
		{"conflict", mutateFrame("r8", "conflict", ok, time.Now()), protocol.CodeConflict,
			"x is taken", "todos.conflict: tide: conflict: x is taken"},
		{"mutator panics", mutateFrame("r9", "fail", ok, time.Now()), protocol.CodeMutatorFailed,
			"the change could not be saved", "todos.fail failed"},
		{"older than key retention", mutateFrame("r10", "add", ok, time.Now().Add(-30*24*time.Hour)), protocol.CodeKeyExpired,
			"the change is too old to be saved", "older than the retained idempotency keys"},
		{"missing at", map[string]any{"v": 1, "type": "mutate", "key": "r11", "resource": "todos", "name": "add"}, protocol.CodeBadFrame,
			"the app sent a change the server cannot read", "at (Unix milliseconds) is required"},
		{"a field of the wrong type", map[string]any{"v": 1, "type": "mutate", "key": "r12", "seq": "one", "resource": "todos", "name": "add", "at": 1}, protocol.CodeBadFrame,
			"the app sent a change the server cannot read", "json: cannot unmarshal string"},
		{"at two days ahead", mutateFrame("r13", "add", ok, time.Now().Add(48*time.Hour)), protocol.CodeBadFrame,
			"this device's clock is ahead of the server's: set it right and try again", "ahead of the server's clock"},
		{"at beyond the range of time", map[string]any{"v": 1, "type": "mutate", "key": "r14", "resource": "todos", "name": "add", "args": ok, "at": int64(math.MaxInt64)}, protocol.CodeBadFrame,
			"this device's clock is ahead of the server's: set it right and try again", "ahead of the server's clock"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := s.dial(t, "alice", "p7")
			c.hello()
			c.Send(tt.frame)
			f := c.Expect(protocol.FrameReject)
			if f.Code != tt.code || f.Key == "" {
				t.Fatalf("reject %+v, want code %s", f, tt.code)
			}
			if f.Message != tt.message || !strings.Contains(f.Detail, tt.detail) {
				t.Fatalf("message %q, detail %q; want %q, a detail with %q", f.Message, f.Detail, tt.message, tt.detail)
			}
			if strings.Contains(f.Detail, "the mutator broke") {
				t.Fatalf("the detail reveals the mutator's error: %q", f.Detail)
			}
			c.Probe() // still serving
		})
	}
	rows, err := s.todos.Rows(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Fatalf("refused mutations wrote %+v", rows)
	}
	if st := s.e.Stats(); st.MutationsRejected < 12 {
		t.Fatalf("stats count %d rejections", st.MutationsRejected)
	}
}

// TestMutateConcurrentSameKey: the same key sent at once on several
// connections runs the mutator once; every answer is an ack.
func TestMutateConcurrentSameKey(t *testing.T) {
	s := newServer(t, core.Config{})
	runs := addMutators(t, s)
	at := time.Now()
	const n = 8
	conns := make([]*wsClient, n)
	for i := range conns {
		conns[i] = s.dial(t, "alice", "p7")
		conns[i].Hello(protocol.ClientFrame{Origin: "o1"})
	}
	var wg sync.WaitGroup
	acks := make([]protocol.ServerFrame, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Send(mutateFrame("same", "add", addArgs{ID: "t1", ProjectID: "p7", Title: "once"}, at))
			acks[i] = c.Expect(protocol.FrameAck)
		}()
	}
	wg.Wait()
	replayed := 0
	for _, a := range acks {
		if a.Replayed {
			replayed++
		}
	}
	if runs.Load() != 1 || replayed != n-1 {
		t.Fatalf("mutator ran %d times; %d of %d acks replayed", runs.Load(), replayed, n)
	}
}

// TestMutateInOrder: the mutations of one connection run in the order they
// were sent.
func TestMutateInOrder(t *testing.T) {
	s := newServer(t, core.Config{})
	var order []string
	var mu sync.Mutex
	if err := core.AddMutator(s.todos, "note", core.Mutator[addArgs]{
		Authorize: memberOf,
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			mu.Lock()
			order = append(order, a.Title)
			mu.Unlock()
			return nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	c := s.dial(t, "alice", "p7")
	c.hello()
	const n = 50
	for i := range n {
		c.Send(mutateFrame(fmt.Sprint("k", i), "note", addArgs{ProjectID: "p7", Title: fmt.Sprint(i)}, time.Now()))
	}
	for i := range n {
		if f := c.Expect(protocol.FrameAck); f.Key != fmt.Sprint("k", i) {
			t.Fatalf("ack %d is for %s", i, f.Key)
		}
	}
	for i, v := range order {
		if v != fmt.Sprint(i) {
			t.Fatalf("ran in order %v", order)
		}
	}
}

// TestMutatorDeclarations: bad declarations are refused.
func TestMutatorDeclarations(t *testing.T) {
	s := newServer(t, core.Config{})
	run := func(context.Context, *core.Tx, addArgs) error { return nil }
	for _, tt := range []struct {
		name string
		m    core.Mutator[addArgs]
	}{
		{"Bad-Name", core.Mutator[addArgs]{Run: run}},
		{"", core.Mutator[addArgs]{Run: run}},
		{"norun", core.Mutator[addArgs]{}},
	} {
		if err := core.AddMutator(s.todos, tt.name, tt.m); !errors.Is(err, core.ErrInvalidResource) {
			t.Errorf("AddMutator(%q) = %v", tt.name, err)
		}
	}
	if err := core.AddMutator(s.todos, "dup", core.Mutator[addArgs]{Run: run}); err != nil {
		t.Fatal(err)
	}
	if err := core.AddMutator(s.todos, "dup", core.Mutator[addArgs]{Run: run}); !errors.Is(err, core.ErrInvalidResource) {
		t.Errorf("duplicate AddMutator = %v", err)
	}
}

// writerOnBus serves the in-memory feed mf through bus, with a short
// advanceWait, and returns alice (who may write p7 and p8) subscribed to
// p7 as "a", caught up.
func writerOnBus(t *testing.T, mf *memfeed.Feed, bus feed.Bus) *wsClient {
	t.Helper()
	core.SetAdvanceWait(t, 10*time.Millisecond)
	s := newServer(t, core.Config{Feed: mf, Bus: bus})
	addMutators(t, s)
	c := s.dial(t, "alice", "p7", "p8")
	c.hello()
	c.Subscribe("a", "todos", map[string]any{"project_id": "p7"})
	c.Collect("a")
	return c
}

// heldBus is a bus whose Tail, while hold is set, keeps each batch it read
// for hold before returning it: a tailer held up, as while the bus
// reconnects.
type heldBus struct {
	feed.Bus
	hold atomic.Int64 // nanoseconds
}

func (b *heldBus) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	changes, err := b.Bus.Tail(ctx, after, limit)
	if d := time.Duration(b.hold.Load()); d > 0 && len(changes) > 0 {
		t := time.NewTimer(d) // the fault: the batch arrives late
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return changes, err
}

// TestMutateAdvancesQuietScopesAfterASlowTailer: when the tailer
// dispatches an acknowledged write long after the ack (far more than the
// connection's check interval), the writer's other subscription, whose
// scope the write did not touch and which gets no other change, still
// receives an empty changes frame at the ack's cursor, so its client knows
// its copy reflects the write.
func TestMutateAdvancesQuietScopesAfterASlowTailer(t *testing.T) {
	mf := memfeed.New(memfeed.Options{})
	bus := &heldBus{Bus: mf}
	c := writerOnBus(t, mf, bus)
	c.Subscribe("b", "todos", map[string]any{"project_id": "p8"})
	c.Collect("b")
	bus.hold.Store(int64(20 * 10 * time.Millisecond))
	c.Send(mutateFrame("k1", "add", addArgs{ID: "t1", ProjectID: "p7", Title: "ship"}, time.Now()))
	ack := c.Expect(protocol.FrameAck)
	got := map[string]protocol.ServerFrame{}
	for len(got) < 2 {
		f := c.Expect(protocol.FrameChanges)
		got[f.ID] = f
	}
	if f := got["a"]; f.Cursor != ack.Cursor || len(f.Entries) != 1 {
		t.Errorf("the written scope got %+v, want the row at the ack's cursor %s", f, ack.Cursor)
	}
	if f := got["b"]; f.Cursor != ack.Cursor || len(f.Entries) != 0 {
		t.Errorf("the quiet scope got %+v, want no entries at the ack's cursor %s", f, ack.Cursor)
	}
}

// topicBus delivers only the topics it was told an interest in, as NATS
// does: a node never sees the changes of other topics.
type topicBus struct {
	feed.Bus
	mu   sync.Mutex
	want map[feed.Topic]bool
	read feed.Position // the last position read, returned or skipped
}

func (b *topicBus) AddInterest(_ context.Context, ts []feed.Topic) (feed.Position, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range ts {
		b.want[t] = true
	}
	return b.read, nil
}

func (b *topicBus) DropInterest([]feed.Topic) {}

func (b *topicBus) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	for {
		b.mu.Lock()
		from := max(after, b.read)
		b.mu.Unlock()
		changes, err := b.Bus.Tail(ctx, from, limit)
		if err != nil || len(changes) == 0 {
			return changes, err
		}
		b.mu.Lock()
		b.read = changes[len(changes)-1].Pos
		var out []feed.Change
		for _, c := range changes {
			if b.want[feed.Topic{Resource: c.Resource, All: true}] || len(c.Scope) > 0 && b.want[feed.Topic{Resource: c.Resource, Tenant: c.Scope[0]}] {
				out = append(out, c)
			}
		}
		b.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
	}
}

// TestMutateAdvancesScopesPastAWriteTheBusNeverBrings: with a bus that
// delivers only this node's topics, a mutation that writes a topic no
// subscription of the node needs is never dispatched here; the writer's
// subscription, whose scope it did not touch, still reaches the ack's
// cursor (it replays from the feed), so its client knows the write is in.
func TestMutateAdvancesScopesPastAWriteTheBusNeverBrings(t *testing.T) {
	mf := memfeed.New(memfeed.Options{})
	c := writerOnBus(t, mf, &topicBus{Bus: mf, want: map[feed.Topic]bool{}})
	c.Send(mutateFrame("k1", "add", addArgs{ID: "t1", ProjectID: "p8", Title: "elsewhere"}, time.Now()))
	ack := c.Expect(protocol.FrameAck)
	want, err := protocol.ParseCursor(ack.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	for {
		f := c.Next()
		if f.ID != "a" || (f.Type != protocol.FrameChanges && f.Type != protocol.FrameCaughtUp) || len(f.Entries) != 0 {
			t.Fatalf("unexpected %+v", f)
		}
		if got, err := protocol.ParseCursor(f.Cursor); err == nil && got.Pos >= want.Pos {
			return
		}
	}
}

// TestOversizedMutate: a mutate frame above the frame limit is answered by
// a reject for its key when the key comes before the limit (as clients
// write it, right after type), so the client can settle it; a frame whose
// first bytes show no mutate key gets the connection-level error. The
// connection keeps serving either way, and nothing runs.
func TestOversizedMutate(t *testing.T) {
	s := newServer(t, core.Config{MaxFrameBytes: 1024})
	runs := addMutators(t, s)
	title := strings.Repeat("x", 2000)
	frame := func(head string) string {
		return `{"v":1,"type":"mutate",` + head + `"resource":"todos","name":"add","args":{"id":"t1","project_id":"p7","title":"` + title + `"},"at":1764590000000}`
	}
	c := s.dial(t, "alice", "p7")
	c.hello()
	for _, tt := range []struct {
		name, frame string
		key         string // "": a connection-level error
	}{
		{"key after type", frame(`"key":"big-1","seq":1,`), "big-1"},
		{"key after the args", strings.Replace(frame(""), `"at"`, `"key":"big-2","at"`, 1), ""},
		{"key cut by the limit", `{"v":1,"type":"mutate","args":{"s":"` + strings.Repeat("y", 975) + `"},"key":"big-3` + strings.Repeat("z", 100) + `"}`, ""},
		{"another frame type", `{"v":1,"type":"subscribe","key":"big-4","id":"s","resource":"` + title + `"}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := c.For(t)
			c.Send(tt.frame)
			f := c.Next()
			switch {
			case tt.key != "" && (f.Type != protocol.FrameReject || f.Key != tt.key || f.Code != protocol.CodeFrameTooLarge):
				t.Fatalf("got %+v, want a frame_too_large reject for %s", f, tt.key)
			case tt.key != "" && (f.Message != "the change is too large" || f.Detail != "frames are limited to 1024 bytes"):
				t.Fatalf("message %q, detail %q", f.Message, f.Detail)
			case tt.key == "" && (f.Type != protocol.FrameError || f.ID != "" || f.Code != protocol.CodeFrameTooLarge):
				t.Fatalf("got %+v, want a connection-level frame_too_large error", f)
			}
			c.Probe()
		})
	}
	if runs.Load() != 0 {
		t.Fatalf("an oversized mutation ran %d times", runs.Load())
	}

	// Before hello, an oversized mutate is no mutation yet.
	early := s.dial(t, "alice", "p7")
	early.Send(frame(`"key":"big-5",`))
	early.ExpectErrorFor("", protocol.CodeFrameTooLarge)
}
