package core_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// cursorNode is an engine with a row-filtered resource behind HTTP: its
// WebSocket and poll addresses.
type cursorNode struct {
	e    *core.Engine
	tbl  *core.Table[ownTodo]
	http string // the server's base URL
	ws   string // its WebSocket endpoint
}

// ownTodoVisible is the row filter of these tests: a private row is seen
// by its owner only.
func ownTodoVisible(p authz.Principal, r *ownTodo) bool { return !r.Private || r.Owner == p.ID }

func newCursorNode(t *testing.T, f feed.Feed) *cursorNode {
	t.Helper()
	return newCursorNodeOf(t, core.Config{Feed: f}, projects)
}

func newCursorNodeOf(t *testing.T, cfg core.Config, policy authz.Policy) *cursorNode {
	t.Helper()
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := core.Register(e, core.Resource[ownTodo]{Table: "todos", Authorize: policy, Filter: ownTodoVisible})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		ts.Close()
	})
	return &cursorNode{e: e, tbl: tbl, http: ts.URL, ws: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
}

// poll posts one poll request as user (member of p7 and p8) and returns
// the answer's frame.
func (n *cursorNode) poll(t *testing.T, user string, req protocol.PollRequest) protocol.ServerFrame {
	t.Helper()
	req.V = 1
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := http.NewRequest(http.MethodPost, n.http+"/tide/changes", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-User", user)
	hr.Header.Set("X-Projects", "p7,p8")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var f protocol.ServerFrame
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// pollSnapshot polls the scope of p7 as user, limit rows a page, from
// cursor until the server has no more, and returns the keys delivered and
// every cursor handed out. It stops after pages polls if pages > 0.
func (n *cursorNode) pollSnapshot(t *testing.T, user, cursor string, limit, pages int) (keys, cursors []string) {
	t.Helper()
	for i := 0; pages <= 0 || i < pages; i++ {
		if i > 1000 {
			t.Fatal("the snapshot did not end in 1000 polls")
		}
		f := n.poll(t, user, protocol.PollRequest{Resource: "todos", Conditions: rawConds("p7"), Cursor: cursor, Limit: limit})
		if f.Type != protocol.FrameChanges {
			t.Fatalf("poll %d of %s from %q: %+v", i, user, cursor, f)
		}
		for _, en := range f.Entries {
			keys = append(keys, en.Key)
		}
		cursor = f.Cursor
		cursors = append(cursors, cursor)
		if !f.More {
			break
		}
	}
	return keys, cursors
}

func rawConds(project string) map[string]json.RawMessage {
	return map[string]json.RawMessage{"project_id": json.RawMessage(`"` + project + `"`)}
}

// cursorSecrets are the rows of p7 alice may not see, their keys
// interleaved with the ones she may, so that pages of any size end on some.
var cursorSecrets = []ownTodo{
	{"b-secret-of-mallory", "p7", "mallory", true},
	{"d-secret-of-mallory", "p7", "mallory", true},
	{"f-secret-of-bob", "p7", "bob", true},
	{"g-secret-of-bob", "p7", "bob", true},
}

var cursorVisible = []ownTodo{
	{"a-shared", "p7", "bob", false},
	{"c-alices", "p7", "alice", true},
	{"e-shared", "p7", "mallory", false},
	{"h-shared", "p7", "bob", false},
}

func writeCursorRows(t *testing.T, tbl *core.Table[ownTodo]) {
	t.Helper()
	if err := tbl.Upsert(context.Background(), append(slices.Clone(cursorSecrets), cursorVisible...)...); err != nil {
		t.Fatal(err)
	}
}

// revealedKeys returns the keys of cursorSecrets that cursor holds, in the
// clear or in any base64 spelling of any of its dot-separated parts.
func revealedKeys(cursor string) []string {
	texts := []string{cursor}
	for _, part := range strings.Split(cursor, ".") {
		for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
			if b, err := enc.DecodeString(part); err == nil {
				texts = append(texts, string(b))
			}
		}
	}
	var out []string
	for _, r := range cursorSecrets {
		for _, s := range texts {
			if strings.Contains(s, r.ID) {
				out = append(out, r.ID)
				break
			}
		}
	}
	return out
}

func visibleKeys() []string {
	var out []string
	for _, r := range cursorVisible {
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out
}

// TestSnapshotCursorsRevealNoHiddenKey: paging a row-filtered scope's
// snapshot a row or two at a time, over HTTP polls and over the WebSocket,
// no cursor holds the key of a row the filter hides (in any base64
// decoding of any part), and the pages deliver exactly the visible rows.
func TestSnapshotCursorsRevealNoHiddenKey(t *testing.T) {
	n := newCursorNode(t, nil)
	writeCursorRows(t, n.tbl)
	for _, limit := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("poll/limit ", limit), func(t *testing.T) {
			keys, cursors := n.pollSnapshot(t, "alice", "", limit, 0)
			if !slices.Equal(keys, visibleKeys()) {
				t.Fatalf("delivered %v, want %v", keys, visibleKeys())
			}
			for _, c := range cursors {
				if got := revealedKeys(c); len(got) > 0 {
					t.Fatalf("cursor %q reveals %v", c, got)
				}
			}
		})
		t.Run(fmt.Sprint("websocket/limit ", limit), func(t *testing.T) {
			c := dialAt(t, n.ws, "alice", "p7", "p8")
			c.hello()
			c.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "s", Resource: "todos", Conditions: rawConds("p7"), Limit: limit})
			var keys []string
			for {
				f := c.Next()
				if got := revealedKeys(f.Cursor); len(got) > 0 {
					t.Fatalf("%s cursor %q reveals %v", f.Type, f.Cursor, got)
				}
				if f.Type == protocol.FrameCaughtUp {
					break
				}
				for _, en := range f.Entries {
					keys = append(keys, en.Key)
				}
			}
			if !slices.Equal(keys, visibleKeys()) {
				t.Fatalf("delivered %v, want %v", keys, visibleKeys())
			}
		})
	}
}

// TestSnapshotCursorsAreBound: a snapshot cursor resumes only the
// principal's own snapshot of its own scopes: bob replaying alice's (both
// may read p7), or alice using hers for p8 or for a subscription of
// several resources, gets invalid_cursor, over polls and the WebSocket;
// so does a cursor altered in any part, and one of protocol 1.
func TestSnapshotCursorsAreBound(t *testing.T) {
	n := newCursorNode(t, nil)
	writeCursorRows(t, n.tbl)
	_, cursors := n.pollSnapshot(t, "alice", "", 1, 3)
	cur := cursors[len(cursors)-1]
	parsed, err := protocol.ParseCursor(cur)
	if err != nil || !parsed.Snapshot {
		t.Fatalf("cursor %q after 3 of 8 rows: %+v, %v", cur, parsed, err)
	}
	alter := func(f func(*protocol.Cursor)) string {
		c := parsed
		f(&c)
		return c.String()
	}
	flip := func(c *protocol.Cursor) {
		b := []byte(c.Sealed)
		b[len(b)/2] ^= 1
		c.Sealed = string(b)
	}
	for _, tc := range []struct {
		name, user, project, cursor string
	}{
		{"another principal", "bob", "p7", cur},
		{"another scope", "alice", "p8", cur},
		{"another number", "alice", "p7", alter(func(c *protocol.Cursor) { c.Seq++ })},
		{"another position", "alice", "p7", alter(func(c *protocol.Cursor) { c.Pos++ })},
		{"a sealed byte flipped", "alice", "p7", alter(flip)},
		{"sealed bytes cut short", "alice", "p7", alter(func(c *protocol.Cursor) { c.Sealed = c.Sealed[:20] })},
		{"a cursor of protocol 1", "alice", "p7", "1s." + parsed.Epoch + ".0." + base64.RawURLEncoding.EncodeToString([]byte("c-alices"))},
	} {
		t.Run(tc.name+"/poll", func(t *testing.T) {
			f := n.poll(t, tc.user, protocol.PollRequest{Resource: "todos", Conditions: rawConds(tc.project), Cursor: tc.cursor, Limit: 1})
			if f.Type != protocol.FrameError || f.Code != protocol.CodeInvalidCursor {
				t.Fatalf("got %+v, want invalid_cursor", f)
			}
		})
		t.Run(tc.name+"/websocket", func(t *testing.T) {
			c := dialAt(t, n.ws, tc.user, "p7", "p8")
			c.hello()
			c.SubscribeFrom("s", "todos", project(tc.project), tc.cursor)
			c.ExpectErrorFor("s", protocol.CodeInvalidCursor)
		})
	}
	// The cursor still works for its own principal and scope.
	keys, _ := n.pollSnapshot(t, "alice", cur, 1, 0)
	if want := visibleKeys()[2:]; !slices.Equal(keys, want) {
		t.Fatalf("resumed %v, want %v", keys, want)
	}
}

// keylessFeed hides the cursor key of the feed it wraps, as a feed
// without feed.CursorKeyer.
type keylessFeed struct {
	feed.Feed
	feed.Writer
}

// TestSnapshotCursorsOfAProcessKey: engines whose feed offers no cursor
// key seal with a key of their own process: another engine on the same
// feed refuses their snapshot cursors (invalid_cursor), and the client's
// snapshot from no cursor then works there.
func TestSnapshotCursorsOfAProcessKey(t *testing.T) {
	f := memfeed.New(memfeed.Options{})
	a, b := newCursorNode(t, keylessFeed{f, f}), newCursorNode(t, keylessFeed{f, f})
	writeCursorRows(t, a.tbl)
	_, cursors := a.pollSnapshot(t, "alice", "", 1, 2)
	if f := b.poll(t, "alice", protocol.PollRequest{Resource: "todos", Conditions: rawConds("p7"), Cursor: cursors[1], Limit: 1}); f.Code != protocol.CodeInvalidCursor {
		t.Fatalf("the other engine answered %+v, want invalid_cursor", f)
	}
	if keys, _ := b.pollSnapshot(t, "alice", "", 1, 0); !slices.Equal(keys, visibleKeys()) {
		t.Fatalf("snapshot anew %v, want %v", keys, visibleKeys())
	}
}

// TestSnapshotCursorsMoveBetweenNodes: two engines on one Postgres change
// log share its cursor key: a snapshot paged on one resumes on the other,
// over polls and the WebSocket, delivering every visible row once.
func TestSnapshotCursorsMoveBetweenNodes(t *testing.T) {
	pool, name := testenv.PostgresSchema(t)
	if _, err := pool.Exec(context.Background(), "CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, owner text NOT NULL, private boolean NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	node := func() *cursorNode {
		f := newPgFeed(t, pool, name, pgfeed.Options{})
		n := newCursorNode(t, f)
		if err := f.Migrate(context.Background(), n.e.Schemas()...); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := node(), node()
	writeCursorRows(t, a.tbl)

	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint("poll/limit ", limit), func(t *testing.T) {
			first, cursors := a.pollSnapshot(t, "alice", "", limit, 3)
			rest, _ := b.pollSnapshot(t, "alice", cursors[len(cursors)-1], limit, 0)
			if got := append(first, rest...); !slices.Equal(got, visibleKeys()) {
				t.Fatalf("delivered %v on a, then %v on b; want %v once each", first, rest, visibleKeys())
			}
		})
		t.Run(fmt.Sprint("websocket/limit ", limit), func(t *testing.T) {
			ca := dialAt(t, a.ws, "alice", "p7", "p8")
			ca.hello()
			ca.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "s", Resource: "todos", Conditions: rawConds("p7"), Limit: limit})
			f := ca.Expect(protocol.FrameChanges)
			var first []string
			for _, en := range f.Entries {
				first = append(first, en.Key)
			}
			ca.Close()
			cb := dialAt(t, b.ws, "alice", "p7", "p8")
			cb.hello()
			cb.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "s", Resource: "todos", Conditions: rawConds("p7"), Limit: limit, Cursor: f.Cursor})
			entries, _ := cb.Collect("s")
			got := first
			for _, en := range entries {
				got = append(got, en.Key)
			}
			if !slices.Equal(got, visibleKeys()) {
				t.Fatalf("delivered %v; want %v once each", got, visibleKeys())
			}
		})
	}
}

// errorLog records the messages logged at ERROR or above.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelError }
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler               { return l }
func (l *errorLog) WithGroup(string) slog.Handler                    { return l }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	l.msgs = append(l.msgs, msg)
	return nil
}

func (l *errorLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// TestForgedCursorsAreRefusedQuietly: on the Postgres feed, a snapshot
// cursor whose place holds a NUL or invalid UTF-8, which Postgres text
// cannot hold (forged in the spelling of protocol 1, which carried the key
// in the clear, or with sealed bytes of its own), is refused as the
// client's mistake (invalid_cursor), over polls and the WebSocket, and
// nothing is logged at ERROR: it is not the feed's failure.
func TestForgedCursorsAreRefusedQuietly(t *testing.T) {
	pool, name := testenv.PostgresSchema(t)
	if _, err := pool.Exec(context.Background(), "CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, owner text NOT NULL, private boolean NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	f := newPgFeed(t, pool, name, pgfeed.Options{})
	log := &errorLog{}
	n := newCursorNodeOf(t, core.Config{Feed: f, Logger: slog.New(log)}, projects)
	if err := f.Migrate(context.Background(), n.e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	writeCursorRows(t, n.tbl)
	_, cursors := n.pollSnapshot(t, "alice", "", 1, 1) // the engine is ready: its epoch known
	epoch := strings.Split(cursors[0], ".")[1]
	old := func(key string) string {
		return "1s." + epoch + ".0." + base64.RawURLEncoding.EncodeToString([]byte(key))
	}
	sealed := func(b string) string {
		return protocol.Cursor{Epoch: epoch, Snapshot: true, Seq: 1, Sealed: b}.String()
	}
	for _, tc := range []struct{ name, cursor string }{
		{"a key with a NUL, spelled as in protocol 1", old("a\x00b")},
		{"a key of invalid UTF-8, spelled as in protocol 1", old("\xff\xfe")},
		{"sealed bytes with a NUL", sealed(strings.Repeat("\x00", 40))},
		{"sealed bytes of invalid UTF-8", sealed(strings.Repeat("\xff", 40))},
	} {
		t.Run(tc.name+"/poll", func(t *testing.T) {
			fr := n.poll(t, "alice", protocol.PollRequest{Resource: "todos", Conditions: rawConds("p7"), Cursor: tc.cursor, Limit: 1})
			if fr.Type != protocol.FrameError || fr.Code != protocol.CodeInvalidCursor {
				t.Fatalf("got %+v, want invalid_cursor", fr)
			}
		})
		t.Run(tc.name+"/websocket", func(t *testing.T) {
			c := dialAt(t, n.ws, "alice", "p7", "p8")
			c.hello()
			c.SubscribeFrom("s", "todos", project("p7"), tc.cursor)
			c.ExpectErrorFor("s", protocol.CodeInvalidCursor)
		})
	}
	if msgs := log.all(); len(msgs) > 0 {
		t.Fatalf("logged at ERROR:\n%s", strings.Join(msgs, "\n"))
	}
}

// TestSnapshotCursorPastALongKey: a snapshot cursor past a key too long
// for a cursor of protocol.MaxCursorLen bytes is still handed out on the
// WebSocket (the snapshot goes on), and refused with invalid_cursor when
// sent back, after which a snapshot from no cursor works; a poll's page
// goes on past such a row, so paging a row at a time does not stand still
// on it. Keys up to 650 bytes fit.
func TestSnapshotCursorPastALongKey(t *testing.T) {
	n := newCursorNode(t, nil)
	fits, long := "b"+strings.Repeat("x", 649), "d"+strings.Repeat("y", 800)
	rows := []ownTodo{{"a", "p7", "bob", false}, {fits, "p7", "bob", false}, {"c", "p7", "bob", false}, {long, "p7", "bob", false}, {"e", "p7", "bob", false}}
	if err := n.tbl.Upsert(context.Background(), rows...); err != nil {
		t.Fatal(err)
	}
	want := []string{"a", fits, "c", long, "e"}

	keys, cursors := n.pollSnapshot(t, "alice", "", 1, 0)
	if !slices.Equal(keys, want) {
		t.Fatalf("polled %d keys %.20q, want %d", len(keys), keys, len(want))
	}
	for _, c := range cursors {
		if len(c) > protocol.MaxCursorLen {
			t.Fatalf("a poll handed out a cursor of %d bytes", len(c))
		}
	}
	if len(cursors[1]) > protocol.MaxCursorLen || len(cursors[1]) < 900 {
		t.Fatalf("the cursor past a key of 650 bytes has %d bytes", len(cursors[1]))
	}

	c := dialAt(t, n.ws, "alice", "p7", "p8")
	c.hello()
	c.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "s", Resource: "todos", Conditions: rawConds("p7"), Limit: 1})
	var pastLong string
	for got := 0; got < len(want); {
		f := c.Expect(protocol.FrameChanges)
		if got += len(f.Entries); len(f.Entries) == 1 && f.Entries[0].Key == long {
			pastLong = f.Cursor
		}
	}
	c.Expect(protocol.FrameCaughtUp)
	if len(pastLong) <= protocol.MaxCursorLen {
		t.Fatalf("the cursor past a key of 801 bytes has %d bytes", len(pastLong))
	}
	c.SubscribeFrom("r", "todos", project("p7"), pastLong)
	c.ExpectErrorFor("r", protocol.CodeInvalidCursor)
	c.Subscribe("again", "todos", project("p7"))
	if entries, _ := c.Collect("again"); len(entries) != len(want) {
		t.Fatalf("the snapshot anew has %d rows, want %d", len(entries), len(want))
	}
}
