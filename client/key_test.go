package client

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

func TestKey(t *testing.T) {
	type myID string
	for _, tc := range []struct {
		parts []any
		want  string
	}{
		{[]any{"t1"}, "t1"},
		{[]any{42}, "42"},
		{[]any{int64(-7)}, "-7"},
		{[]any{uint64(1<<64 - 1)}, "18446744073709551615"},
		{[]any{true}, "true"},
		{[]any{"u1", "b7"}, `["u1","b7"]`},
		{[]any{"a:b", "c"}, `["a:b","c"]`},
		{[]any{"a", "b:c"}, `["a","b:c"]`},
		{[]any{"u1", 7, false}, `["u1","7","false"]`},
		{[]any{`"\`, "\n\x01ü"}, `["\"\\","\n\u0001ü"]`},
		{[]any{myID("x"), 1.5}, `["x","1.5"]`}, // not key types: fmt.Sprint's text
		{nil, ""},
	} {
		if got := Key(tc.parts...); got != tc.want {
			t.Errorf("Key(%#v) = %q, want %q", tc.parts, got, tc.want)
		}
	}
	if parts, err := KeyParts(`["a:b","c"]`, 2); err != nil || !slices.Equal(parts, []string{"a:b", "c"}) {
		t.Fatalf("KeyParts: %q, %v", parts, err)
	}
	if _, err := KeyParts(`["a:b", "c"]`, 2); err == nil {
		t.Fatal("KeyParts accepted a key with a space")
	}
}

// boardMember is a resource whose primary key is two columns.
type boardMember struct {
	UserID  string `tide:"user_id,pk"`
	BoardID string `tide:"board_id,pk,scope"`
	Role    string `tide:"role"`
}

// TestCompositeKeyStore: a synced scope of a composite-key resource holds
// its rows under Key(parts...), keeps them in a FileStore across a client
// restart, and applies a delete by that key that happened meanwhile.
func TestCompositeKeyStore(t *testing.T) {
	ctx := testCtx(t)
	e, err := core.New(core.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	members, err := core.Register(e, core.Resource[boardMember]{Table: "board_members", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e)(http.NotFoundHandler()))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		_ = e.Shutdown(sctx)
		srv.Close()
	})
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"
	if err := members.Upsert(ctx,
		boardMember{UserID: "alice", BoardID: "p7", Role: "owner"},
		boardMember{UserID: "alice:p7", BoardID: "x"}, // would collide with ("alice", "p7:x") under a separator
		boardMember{UserID: "alice", BoardID: "p7:x"},
		boardMember{UserID: `bo"b\`, BoardID: "p7"},
	); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "store.json")
	scope := Scope{Resource: "board_members"}

	store, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := newTestClient(t, Config{URL: url, Store: store})
	sub, err := c1.Sync(scope)
	if err != nil {
		t.Fatal(err)
	}
	run := start(t, c1)
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	rows := sub.Rows()
	for _, k := range []string{Key("alice", "p7"), Key("alice:p7", "x"), Key("alice", "p7:x"), Key(`bo"b\`, "p7")} {
		m, err := protocol.DecodeRow[boardMember](rows[k])
		parts, _ := KeyParts(k, 2)
		if err != nil || m.UserID != parts[0] || m.BoardID != parts[1] {
			t.Fatalf("row %s: %+v, %v (rows %v)", k, m, err, rows)
		}
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %v", len(rows), rows)
	}
	if err := run.stop(t); err != context.Canceled {
		t.Fatalf("Run: %v", err)
	}

	// While no client runs.
	if err := members.Delete(ctx, boardMember{UserID: "alice", BoardID: "p7"}); err != nil {
		t.Fatal(err)
	}
	if err := members.Upsert(ctx, boardMember{UserID: `bo"b\`, BoardID: "p7", Role: "admin"}); err != nil {
		t.Fatal(err)
	}

	store2, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c2, events := newTestClient(t, Config{URL: url, Store: store2})
	start(t, c2)
	events.waitKind(ctx, t, EventCaughtUp, 1)
	subs := c2.Subscriptions()
	if len(subs) != 1 {
		t.Fatalf("%d subscriptions resumed, want 1", len(subs))
	}
	if err := subs[0].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	rows = subs[0].Rows()
	if _, ok := rows[Key("alice", "p7")]; ok || len(rows) != 3 {
		t.Fatalf("resumed rows %v: want the delete of %s applied", rows, Key("alice", "p7"))
	}
	if m, err := protocol.DecodeRow[boardMember](rows[Key(`bo"b\`, "p7")]); err != nil || m.Role != "admin" {
		t.Fatalf("resumed row: %+v, %v", m, err)
	}
}
