package core_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

// boardMember is a membership keyed by its two columns, without a
// surrogate id: the board is a key part and a scope column.
type boardMember struct {
	UserID  string `tide:"user_id,pk"`
	BoardID string `tide:"board_id,pk,scope"`
	Role    string `tide:"role"`
}

// TestCompositeKeyRegister: several pk fields make a composite key, in
// declared order; a key part must be a keyable, non-pointer field.
func TestCompositeKeyRegister(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := core.Register(e, core.Resource[boardMember]{Table: "board_members"})
	if err != nil {
		t.Fatal(err)
	}
	s := tbl.Schema()
	if len(s.Keys) != 2 || s.KeyColumn(0).Name != "user_id" || s.KeyColumn(1).Name != "board_id" || len(s.Scope) != 1 || s.ScopeColumn(0).Name != "board_id" {
		t.Fatalf("schema keys %v scope %v", s.Keys, s.Scope)
	}
	type ptrPart struct {
		A string  `tide:"a,pk"`
		B *string `tide:"b,pk"`
	}
	if _, err := core.Register(e, core.Resource[ptrPart]{Table: "ptr_part"}); !errors.Is(err, protocol.ErrUnsupportedType) {
		t.Fatalf("a pointer key part: %v, want ErrUnsupportedType", err)
	}
	type floatPart struct {
		A string  `tide:"a,pk"`
		B float64 `tide:"b,pk"`
	}
	if _, err := core.Register(e, core.Resource[floatPart]{Table: "float_part"}); !errors.Is(err, protocol.ErrUnsupportedType) {
		t.Fatalf("a float key part: %v, want ErrUnsupportedType", err)
	}
	type mixed struct {
		N int64  `tide:"n,pk"`
		F bool   `tide:"f,pk"`
		U uint8  `tide:"u,pk"`
		S string `tide:"s,pk"`
	}
	c, err := protocol.CodecFor(reflect.TypeFor[mixed]())
	if err != nil {
		t.Fatal(err)
	}
	key, _, _, err := c.Encode(reflect.ValueOf(mixed{N: -3, F: true, U: 7, S: `a","b`}))
	if err != nil || key != `["-3","true","7","a\",\"b"]` {
		t.Fatalf("key %s, %v", key, err)
	}
}

// TestCompositeKeyEndToEnd: rows of a composite-key resource reach a
// subscriber under their canonical key text, in the snapshot and live;
// a delete through the Table is a delete of that key; and a policy that
// depends on the memberships by a key part (user_id) and a key-and-scope
// part (board_id) is re-run for exactly the subscription a deleted
// membership concerned.
func TestCompositeKeyEndToEnd(t *testing.T) {
	f := memfeed.New(memfeed.Options{})
	e, err := core.New(core.Config{Feed: f})
	if err != nil {
		t.Fatal(err)
	}
	var members *core.Table[boardMember]
	isMember := func(ctx context.Context, r authz.Request) error {
		if r.Principal.IsAnonymous() {
			return authz.ErrUnauthenticated
		}
		boards := r.Conditions["project_id"]
		if r.Resource == "board_members" {
			boards = r.Conditions["board_id"]
		}
		if len(boards) == 0 {
			return fmt.Errorf("%w: name a board", authz.ErrForbidden)
		}
		for _, b := range boards {
			rows, err := members.Rows(ctx, map[string]any{"board_id": b})
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(rows, func(m boardMember) bool { return m.UserID == r.Principal.ID }) {
				return fmt.Errorf("%w: not a member of %s", authz.ErrForbidden, b)
			}
		}
		return nil
	}
	if members, err = core.Register(e, core.Resource[boardMember]{Table: "board_members", Authorize: isMember}); err != nil {
		t.Fatal(err)
	}
	dep := core.Dependency{Resource: "board_members", Principal: "user_id", Scope: map[string]string{"board_id": "project_id"}}
	if _, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: isMember, DependsOn: []core.Dependency{dep}}); err != nil {
		t.Fatal(err)
	}
	url := serveEngine(t, e)
	ctx := context.Background()
	// "alice:p7" on board "x" and "alice" on board "p7:x" would share the
	// text "alice:p7:x" under a separator.
	if err := members.Upsert(ctx,
		boardMember{UserID: "alice", BoardID: "p7", Role: "owner"},
		boardMember{UserID: "alice", BoardID: "p8"},
		boardMember{UserID: "bob", BoardID: "p7"},
		boardMember{UserID: "alice:p7", BoardID: "x"},
		boardMember{UserID: "alice", BoardID: "p7:x"},
	); err != nil {
		t.Fatal(err)
	}
	watcher := dialAt(t, url, "bob")
	watcher.hello()
	watcher.Subscribe("m", "board_members", map[string]any{"board_id": "p7"})
	entries, _ := watcher.Collect("m")
	var got []string
	for _, en := range entries {
		got = append(got, en.Key)
	}
	slices.Sort(got)
	if want := []string{`["alice","p7"]`, `["bob","p7"]`}; !slices.Equal(got, want) {
		t.Fatalf("snapshot keys %q, want %q", got, want)
	}

	sub := func(user, board string) *wsClient {
		c := dialAt(t, url, user)
		c.hello()
		c.Subscribe("s", "todos", project(board))
		c.Collect("s")
		return c
	}
	alice7, alice8, bob7 := sub("alice", "p7"), sub("alice", "p8"), sub("bob", "p7")
	settleEngine(t, f, e)
	before := e.Stats().PolicyRechecks

	if err := members.Delete(ctx, boardMember{UserID: "alice", BoardID: "p7"}); err != nil {
		t.Fatal(err)
	}
	fr := watcher.Next()
	if fr.Type != protocol.FrameChanges || len(fr.Entries) != 1 || fr.Entries[0].Op != "delete" || fr.Entries[0].Key != `["alice","p7"]` {
		t.Fatalf("live frame after the delete: %+v, want the delete of [\"alice\",\"p7\"]", fr)
	}
	if fr := alice7.ExpectErrorFor("s", protocol.CodeForbidden); !strings.Contains(fr.Message, "not a member of p7") {
		t.Fatalf("alice's p7 subscription: %q", fr.Message)
	}
	settleEngine(t, f, e)
	alice8.Probe()
	bob7.Probe()
	if got := e.Stats().PolicyRechecks - before; got != 1 {
		t.Fatalf("re-ran %d policies, want 1 (alice's p7 todos only)", got)
	}
	rows, err := members.Rows(ctx, nil)
	if err != nil || len(rows) != 4 {
		t.Fatalf("rows after the delete: %v, %v", rows, err)
	}
}

// settleEngine waits until e has re-checked what the feed's changes so far
// call for. The deadline is a failure bound only.
func settleEngine(t *testing.T, f feed.Feed, e *core.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head, err := f.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AwaitRechecks(ctx, head); err != nil {
		t.Fatalf("AwaitRechecks(%d): %v", head, err)
	}
}

// hiddenMember is a composite-key resource with a row filter.
type hiddenMember struct {
	UserID  string `tide:"user_id,pk"`
	BoardID string `tide:"board_id,pk,scope"`
	Hidden  bool   `tide:"hidden"`
}

// TestCompositeKeyRowFilter: a row filter hides composite-key rows from a
// snapshot, and a row that becomes hidden reaches the subscriber as a
// delete of its key text, from a paged snapshot and live.
func TestCompositeKeyRowFilter(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := core.Register(e, core.Resource[hiddenMember]{Table: "hidden_members", Authorize: authz.Allow,
		Filter: func(p authz.Principal, m *hiddenMember) bool { return !m.Hidden || m.UserID == p.ID }})
	if err != nil {
		t.Fatal(err)
	}
	url := serveEngine(t, e)
	ctx := context.Background()
	var rows []hiddenMember
	for i := range 7 {
		rows = append(rows, hiddenMember{UserID: fmt.Sprintf("u:%d", i), BoardID: "b", Hidden: i%3 == 0})
	}
	rows = append(rows, hiddenMember{UserID: "alice", BoardID: "b", Hidden: true})
	if err := tbl.Upsert(ctx, rows...); err != nil {
		t.Fatal(err)
	}
	c := dialAt(t, url, "alice")
	c.hello()
	c.Send(map[string]any{"v": 1, "type": "subscribe", "id": "s", "resource": "hidden_members", "conditions": map[string]any{"board_id": "b"}, "limit": 2})
	snap, _ := c.Collect("s")
	var got []string
	for _, en := range snap {
		got = append(got, en.Key)
	}
	slices.Sort(got)
	want := []string{`["alice","b"]`, `["u:1","b"]`, `["u:2","b"]`, `["u:4","b"]`, `["u:5","b"]`}
	if !slices.Equal(got, want) {
		t.Fatalf("snapshot keys %q, want %q", got, want)
	}
	if err := tbl.Upsert(ctx, hiddenMember{UserID: "u:1", BoardID: "b", Hidden: true}); err != nil {
		t.Fatal(err)
	}
	fr := c.Expect(protocol.FrameChanges)
	if len(fr.Entries) != 1 || fr.Entries[0].Op != "delete" || fr.Entries[0].Key != `["u:1","b"]` {
		t.Fatalf("a row turned hidden: %+v, want the delete of [\"u:1\",\"b\"]", fr.Entries)
	}
}
