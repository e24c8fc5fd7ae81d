package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
	Done      bool   `tide:"done"`
}

// projectPolicy lets a principal see the projects listed in its "projects"
// claim.
func projectPolicy(_ context.Context, r authz.Request) error {
	if r.Principal.IsAnonymous() {
		return authz.ErrUnauthenticated
	}
	want := r.Conditions["project_id"]
	if len(want) == 0 {
		return authz.ErrForbidden
	}
	allowed := map[string]bool{}
	for _, p := range r.Principal.Strings("projects") {
		allowed[p] = true
	}
	for _, p := range want {
		if !allowed[p] {
			return authz.ErrForbidden
		}
	}
	return nil
}

type server struct {
	e     *core.Engine
	todos *core.Table[todo]
	url   string
}

// newServer starts an engine behind httptest on loopback. The principal is
// read from the X-User and X-Projects headers, standing in for an app's
// session.
func newServer(t *testing.T, cfg core.Config) *server {
	t.Helper()
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: projectPolicy})
	if err != nil {
		t.Fatal(err)
	}
	h := middleware.Handler(e, middleware.WithPrincipal(headerPrincipal))
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	return &server{e: e, todos: todos, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
}

type wsClient struct {
	t  *testing.T
	ws *websocket.Conn
}

func (s *server) dial(t *testing.T, user string, projects ...string) *wsClient {
	t.Helper()
	h := map[string][]string{}
	if user != "" {
		h["X-User"] = []string{user}
		h["X-Projects"] = []string{strings.Join(projects, ",")}
	}
	ws, _, err := websocket.DefaultDialer.Dial(s.url, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return &wsClient{t: t, ws: ws}
}

func (c *wsClient) send(frame string) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		c.t.Fatal(err)
	}
}

// next reads one frame. The deadline only bounds a broken test; it is not an
// assertion about speed.
func (c *wsClient) next() core.ServerFrame {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	f, err := core.DecodeServerFrame(data)
	if err != nil {
		c.t.Fatalf("decode %s: %v", data, err)
	}
	return f
}

func (c *wsClient) expect(typ string) core.ServerFrame {
	c.t.Helper()
	f := c.next()
	if f.Type != typ {
		c.t.Fatalf("got %s frame %+v, want %s", f.Type, f, typ)
	}
	return f
}

func (c *wsClient) hello() {
	c.t.Helper()
	c.send(`{"v":1,"type":"hello","build":"test","origin":"me"}`)
	c.expect(core.FrameWelcome)
}

// collect reads changes frames until caught-up and returns their entries and
// the caught-up cursor.
func (c *wsClient) collect(id string) ([]core.Entry, string) {
	c.t.Helper()
	var entries []core.Entry
	for {
		f := c.next()
		if f.ID != id {
			c.t.Fatalf("frame for %q, want %q: %+v", f.ID, id, f)
		}
		switch f.Type {
		case core.FrameChanges:
			entries = append(entries, f.Entries...)
		case core.FrameCaughtUp:
			return entries, f.Cursor
		default:
			c.t.Fatalf("unexpected %+v", f)
		}
	}
}

func keys(entries []core.Entry) string {
	var b []string
	for _, e := range entries {
		b = append(b, e.Op[:1]+":"+e.Key)
	}
	return strings.Join(b, " ")
}

func TestSnapshotThenLive(t *testing.T) {
	s := newServer(t, core.Config{PageSize: 2})
	ctx := context.Background()
	for _, td := range []todo{{"t1", "p7", "a", false}, {"t2", "p7", "b", false}, {"t3", "p8", "c", false}, {"t4", "p7", "d", true}} {
		if err := s.todos.Upsert(ctx, td); err != nil {
			t.Fatal(err)
		}
	}
	c := s.dial(t, "u1", "p7")
	c.hello()
	c.send(`{"v":1,"type":"subscribe","id":"s1","resource":"todos","conditions":{"project_id":"p7"}}`)
	entries, cur := c.collect("s1")
	if got := keys(entries); got != "u:t1 u:t2 u:t4" {
		t.Fatalf("snapshot %s", got)
	}
	if cur == "" {
		t.Fatal("caught-up without cursor")
	}
	// Live: an insert in scope, one out of scope, a move out, a delete.
	_ = s.todos.Upsert(ctx, todo{"t5", "p7", "e", false})
	_ = s.todos.Upsert(ctx, todo{"t6", "p8", "f", false})
	_ = s.todos.Upsert(ctx, todo{"t1", "p8", "a", false})
	_ = s.todos.Delete(ctx, todo{ID: "t2"})
	var live []core.Entry
	for len(live) < 3 {
		f := c.expect(core.FrameChanges)
		live = append(live, f.Entries...)
	}
	if got := keys(live); got != "u:t5 d:t1 d:t2" {
		t.Fatalf("live %s", got)
	}
	if live[0].Row == nil || live[1].Row != nil {
		t.Fatal("upserts carry rows, deletes do not")
	}
	var row todo
	if err := json.Unmarshal(live[0].Row, &row); err != nil || row.ID != "t5" || row.Title != "e" {
		t.Fatalf("row %s", live[0].Row)
	}
}

func TestResumeGetsExactlyTheMissedChanges(t *testing.T) {
	s := newServer(t, core.Config{})
	ctx := context.Background()
	_ = s.todos.Upsert(ctx, todo{"t1", "p7", "a", false})
	c := s.dial(t, "u1", "p7")
	c.hello()
	c.send(`{"v":1,"type":"subscribe","id":"s1","resource":"todos","conditions":{"project_id":"p7"}}`)
	c.collect("s1")
	_ = s.todos.Upsert(ctx, todo{"t2", "p7", "b", false})
	f := c.expect(core.FrameChanges)
	cursor := f.Cursor
	c.ws.Close() // the socket drops

	// Missed while away: two changes in scope, one outside.
	_ = s.todos.Upsert(ctx, todo{"t3", "p7", "c", false})
	_ = s.todos.Upsert(ctx, todo{"x1", "p9", "x", false})
	_ = s.todos.Upsert(ctx, todo{"t2", "p7", "b2", true})

	c2 := s.dial(t, "u1", "p7")
	c2.hello()
	c2.send(`{"v":1,"type":"subscribe","id":"s2","resource":"todos","conditions":{"project_id":"p7"},"cursor":"` + cursor + `"}`)
	missed, _ := c2.collect("s2")
	if got := keys(missed); got != "u:t3 u:t2" {
		t.Fatalf("replayed %s, want exactly the two missed changes", got)
	}
}

func TestUnauthorizedSubscribeGetsOnlyAnError(t *testing.T) {
	s := newServer(t, core.Config{})
	_ = s.todos.Upsert(context.Background(), todo{"t1", "p7", "secret", false})
	c := s.dial(t, "u1", "p1")
	c.hello()
	c.send(`{"v":1,"type":"subscribe","id":"s1","resource":"todos","conditions":{"project_id":"p7"}}`)
	f := c.expect(core.FrameError)
	if f.ID != "s1" || f.Code != core.CodeForbidden {
		t.Fatalf("got %+v", f)
	}
	// Nothing else arrives for s1: the next frame is the answer to a probe.
	c.send(`{"v":1,"type":"unsubscribe","id":"s1"}`)
	f = c.expect(core.FrameError)
	if f.Code != core.CodeUnknownSub {
		t.Fatalf("after the refusal got %+v", f)
	}
	anon := s.dial(t, "")
	anon.hello()
	anon.send(`{"v":1,"type":"subscribe","id":"a","resource":"todos","conditions":{"project_id":"p7"}}`)
	if f := anon.expect(core.FrameError); f.Code != core.CodeUnauthenticated {
		t.Fatalf("anonymous got %+v", f)
	}
}

func TestSubscribeErrors(t *testing.T) {
	s := newServer(t, core.Config{})
	c := s.dial(t, "u1", "p7")
	c.hello()
	for _, tt := range []struct {
		frame string
		code  core.Code
	}{
		{`{"v":1,"type":"subscribe","id":"a","resource":"nope"}`, core.CodeUnknownResource},
		{`{"v":1,"type":"subscribe","id":"b","resource":"todos","conditions":{"title":"x"}}`, core.CodeInvalidConditions},
		{`{"v":1,"type":"subscribe","id":"c","resource":"todos","conditions":{"project_id":7}}`, core.CodeInvalidConditions},
		{`{"v":1,"type":"subscribe","id":"d","resource":"todos","conditions":{"project_id":"p7"},"cursor":"garbage"}`, core.CodeInvalidCursor},
		{`{"v":1,"type":"subscribe","id":"e","resource":"todos"}`, core.CodeForbidden},
		{`not json`, core.CodeBadFrame},
		{`{"v":1,"type":"teleport"}`, core.CodeUnknownType},
		{`{"v":1,"type":"hello"}`, core.CodeBadFrame},
	} {
		c.send(tt.frame)
		if f := c.expect(core.FrameError); f.Code != tt.code {
			t.Errorf("%s: got %+v, want %s", tt.frame, f, tt.code)
		}
	}
	// The connection still serves.
	c.send(`{"v":1,"type":"subscribe","id":"ok","resource":"todos","conditions":{"project_id":"p7"}}`)
	c.collect("ok")
	c.send(`{"v":1,"type":"subscribe","id":"ok","resource":"todos","conditions":{"project_id":"p7"}}`)
	if f := c.expect(core.FrameError); f.Code != core.CodeDuplicateSub {
		t.Fatalf("duplicate id: %+v", f)
	}
}

func TestHelloRequiredAndVersionSkew(t *testing.T) {
	s := newServer(t, core.Config{BuildID: "v2"})
	c := s.dial(t, "u1", "p7")
	c.send(`{"v":1,"type":"subscribe","id":"a","resource":"todos"}`)
	if f := c.expect(core.FrameError); f.Code != core.CodeHelloRequired {
		t.Fatalf("%+v", f)
	}
	_, _, err := c.ws.ReadMessage()
	if !websocket.IsCloseError(err, core.ClosePolicy) {
		t.Fatalf("want close 1008, got %v", err)
	}

	c = s.dial(t, "u1", "p7")
	c.send(`{"v":2,"type":"hello"}`)
	if f := c.expect(core.FrameError); f.Code != core.CodeUnsupportedVersion {
		t.Fatalf("%+v", f)
	}
	_, _, err = c.ws.ReadMessage()
	if !websocket.IsCloseError(err, core.CloseVersionSkew) {
		t.Fatalf("want close 4000, got %v", err)
	}

	c = s.dial(t, "u1", "p7")
	c.send(`{"v":1,"type":"hello","build":"v1"}`)
	if f := c.expect(core.FrameWelcome); f.Build != "v2" {
		t.Fatalf("%+v", f)
	}
	if f := c.expect(core.FrameUpdateAvailable); f.Build != "v2" {
		t.Fatalf("%+v", f)
	}
}

func TestShutdownClosesWithDrain(t *testing.T) {
	s := newServer(t, core.Config{})
	c := s.dial(t, "u1", "p7")
	c.hello()
	c.send(`{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":{"project_id":"p7"}}`)
	c.collect("s")
	done := make(chan error, 1)
	go func() { done <- s.e.Shutdown(context.Background()) }()
	_, _, err := c.ws.ReadMessage()
	if !websocket.IsCloseError(err, core.CloseDrain) {
		t.Fatalf("want close 4002, got %v", err)
	}
	c.ws.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.e.Stats(); st.Connections != 0 || st.Subscriptions != 0 {
		t.Fatalf("after shutdown: %+v", st)
	}
}

func TestEngineStartsOnce(t *testing.T) {
	s := newServer(t, core.Config{})
	// A second handler and a second middleware on the same engine, as when
	// an app's server restarts: still one tailer.
	h2 := httptest.NewServer(middleware.Handler(s.e, middleware.WithPrincipal(headerPrincipal)))
	defer h2.Close()
	for _, url := range []string{s.url, "ws" + strings.TrimPrefix(h2.URL, "http") + "/tide/ws"} {
		ws, _, err := websocket.DefaultDialer.Dial(url, map[string][]string{"X-User": {"u"}, "X-Projects": {"p7"}})
		if err != nil {
			t.Fatal(err)
		}
		c := &wsClient{t: t, ws: ws}
		c.hello()
		c.send(`{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":{"project_id":"p7"}}`)
		c.collect("s")
		ws.Close()
	}
	if n := s.e.Stats().TailStarts; n != 1 {
		t.Fatalf("tailer started %d times", n)
	}
}

func TestUnusableCursorsReset(t *testing.T) {
	s := newServer(t, core.Config{})
	ctx := context.Background()
	_ = s.todos.Upsert(ctx, todo{"t1", "p7", "a", false})
	c := s.dial(t, "u1", "p7")
	c.hello()
	c.send(`{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":{"project_id":"p7"}}`)
	_, cursor := c.collect("s")
	cur, err := core.ParseCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	ahead := core.Cursor{Epoch: cur.Epoch, Pos: cur.Pos + 1000}
	other := core.Cursor{Epoch: "another", Pos: cur.Pos}
	for i, tt := range []struct {
		cursor core.Cursor
		reason string
	}{{ahead, "cursor_ahead"}, {other, "epoch_changed"}} {
		id := fmt.Sprintf("r%d", i)
		c.send(`{"v":1,"type":"subscribe","id":"` + id + `","resource":"todos","conditions":{"project_id":"p7"},"cursor":"` + tt.cursor.String() + `"}`)
		f := c.expect(core.FrameReset)
		if f.ID != id || f.Reason != tt.reason {
			t.Fatalf("got %+v, want reset %s", f, tt.reason)
		}
		// A fresh snapshot follows.
		if entries, _ := c.collect(id); keys(entries) != "u:t1" {
			t.Fatalf("after reset: %s", keys(entries))
		}
	}
}
