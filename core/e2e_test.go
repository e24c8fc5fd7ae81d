package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
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
	h := middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler())
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

// wsClient is a tidetest.Conn on a server of these tests. Its lower-case
// methods are the names robust_test.go still calls, and its ws field the
// socket that file reads raw; the other tests use the Conn's own methods.
type wsClient struct {
	*tidetest.Conn
	t  *testing.T
	ws *websocket.Conn
}

// dialAt opens a connection to url; user, if set, is the cookie principal
// (headerPrincipal), member of projects.
func dialAt(t *testing.T, url, user string, projects ...string) *wsClient {
	t.Helper()
	var opts []tidetest.Option
	if user != "" {
		opts = append(opts, tidetest.WithHeader("X-User", user), tidetest.WithHeader("X-Projects", strings.Join(projects, ",")))
	}
	c := tidetest.Dial(t, url, opts...)
	return &wsClient{Conn: c, t: t, ws: c.WebSocket()}
}

func (s *server) dial(t *testing.T, user string, projects ...string) *wsClient {
	t.Helper()
	return dialAt(t, s.url, user, projects...)
}

// hello says hello as these tests' client build, and expects welcome.
func (c *wsClient) hello() {
	c.t.Helper()
	c.Hello(protocol.ClientFrame{Build: "test", Origin: "me"})
}

func (c *wsClient) send(frame string) {
	c.t.Helper()
	c.Send(frame)
}

func (c *wsClient) expect(typ string) protocol.ServerFrame {
	c.t.Helper()
	return c.Expect(typ)
}

func (c *wsClient) collect(id string) ([]protocol.Entry, string) {
	c.t.Helper()
	return c.Collect(id)
}

// project returns the conditions of one project's scope.
func project(id string) map[string]any { return map[string]any{"project_id": id} }

func keys(entries []protocol.Entry) string {
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
	c.Subscribe("s1", "todos", project("p7"))
	entries, cur := c.Collect("s1")
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
	var live []protocol.Entry
	for len(live) < 3 {
		f := c.Expect(protocol.FrameChanges)
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
	c.Subscribe("s1", "todos", project("p7"))
	c.Collect("s1")
	_ = s.todos.Upsert(ctx, todo{"t2", "p7", "b", false})
	f := c.Expect(protocol.FrameChanges)
	cursor := f.Cursor
	c.Close() // the socket drops

	// Missed while away: two changes in scope, one outside.
	_ = s.todos.Upsert(ctx, todo{"t3", "p7", "c", false})
	_ = s.todos.Upsert(ctx, todo{"x1", "p9", "x", false})
	_ = s.todos.Upsert(ctx, todo{"t2", "p7", "b2", true})

	c2 := s.dial(t, "u1", "p7")
	c2.hello()
	c2.SubscribeFrom("s2", "todos", project("p7"), cursor)
	missed, _ := c2.Collect("s2")
	if got := keys(missed); got != "u:t3 u:t2" {
		t.Fatalf("replayed %s, want exactly the two missed changes", got)
	}
}

func TestUnauthorizedSubscribeGetsOnlyAnError(t *testing.T) {
	s := newServer(t, core.Config{})
	_ = s.todos.Upsert(context.Background(), todo{"t1", "p7", "secret", false})
	c := s.dial(t, "u1", "p1")
	c.hello()
	c.Subscribe("s1", "todos", project("p7"))
	f := c.Expect(protocol.FrameError)
	if f.ID != "s1" || f.Code != protocol.CodeForbidden {
		t.Fatalf("got %+v", f)
	}
	// Nothing else arrives for s1: the next frame is the answer to a probe.
	c.Unsubscribe("s1")
	c.ExpectErrorFor("s1", protocol.CodeUnknownSub)
	anon := s.dial(t, "")
	anon.hello()
	anon.Subscribe("a", "todos", project("p7"))
	anon.ExpectError(protocol.CodeUnauthenticated)
}

func TestSubscribeErrors(t *testing.T) {
	s := newServer(t, core.Config{})
	c := s.dial(t, "u1", "p7")
	c.hello()
	for _, tt := range []struct {
		frame string
		code  protocol.Code
	}{
		{`{"v":1,"type":"subscribe","id":"a","resource":"nope"}`, protocol.CodeUnknownResource},
		{`{"v":1,"type":"subscribe","id":"b","resource":"todos","conditions":{"title":"x"}}`, protocol.CodeInvalidConditions},
		{`{"v":1,"type":"subscribe","id":"c","resource":"todos","conditions":{"project_id":7}}`, protocol.CodeInvalidConditions},
		{`{"v":1,"type":"subscribe","id":"d","resource":"todos","conditions":{"project_id":"p7"},"cursor":"garbage"}`, protocol.CodeInvalidCursor},
		{`{"v":1,"type":"subscribe","id":"e","resource":"todos"}`, protocol.CodeForbidden},
		{`not json`, protocol.CodeBadFrame},
		{`{"v":1,"type":"teleport"}`, protocol.CodeUnknownType},
		{`{"v":1,"type":"hello"}`, protocol.CodeBadFrame},
	} {
		c.Send(tt.frame)
		if f := c.Expect(protocol.FrameError); f.Code != tt.code {
			t.Errorf("%s: got %+v, want %s", tt.frame, f, tt.code)
		}
	}
	// The connection still serves.
	c.Subscribe("ok", "todos", project("p7"))
	c.Collect("ok")
	c.Subscribe("ok", "todos", project("p7"))
	c.ExpectError(protocol.CodeDuplicateSub)
}

func TestHelloRequiredAndVersionSkew(t *testing.T) {
	s := newServer(t, core.Config{BuildID: "v2"})
	c := s.dial(t, "u1", "p7")
	c.Subscribe("a", "todos", nil)
	c.ExpectError(protocol.CodeHelloRequired)
	c.ExpectClose(protocol.ClosePolicy)

	c = s.dial(t, "u1", "p7")
	c.Send(`{"v":2,"type":"hello"}`)
	c.ExpectError(protocol.CodeUnsupportedVersion)
	c.ExpectClose(protocol.CloseVersionSkew)

	c = s.dial(t, "u1", "p7")
	c.Send(`{"v":1,"type":"hello","build":"v1"}`)
	if f := c.Expect(protocol.FrameWelcome); f.Build != "v2" {
		t.Fatalf("%+v", f)
	}
	if f := c.Expect(protocol.FrameUpdateAvailable); f.Build != "v2" {
		t.Fatalf("%+v", f)
	}
}

func TestShutdownClosesWithDrain(t *testing.T) {
	s := newServer(t, core.Config{})
	c := s.dial(t, "u1", "p7")
	c.hello()
	c.Subscribe("s", "todos", project("p7"))
	c.Collect("s")
	done := make(chan error, 1)
	go func() { done <- s.e.Shutdown(context.Background()) }()
	c.ExpectClose(protocol.CloseDrain)
	c.Close()
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
	h2 := httptest.NewServer(middleware.Middleware(s.e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	defer h2.Close()
	for _, url := range []string{s.url, "ws" + strings.TrimPrefix(h2.URL, "http") + "/tide/ws"} {
		c := dialAt(t, url, "u", "p7")
		c.hello()
		c.Subscribe("s", "todos", project("p7"))
		c.Collect("s")
		c.Close()
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
	c.Subscribe("s", "todos", project("p7"))
	_, cursor := c.Collect("s")
	cur, err := protocol.ParseCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	ahead := protocol.Cursor{Epoch: cur.Epoch, Pos: cur.Pos + 1000}
	other := protocol.Cursor{Epoch: "another", Pos: cur.Pos}
	for i, tt := range []struct {
		cursor protocol.Cursor
		reason protocol.ResetReason
	}{{ahead, "cursor_ahead"}, {other, "epoch_changed"}} {
		id := fmt.Sprintf("r%d", i)
		c.SubscribeFrom(id, "todos", project("p7"), tt.cursor.String())
		f := c.Expect(protocol.FrameReset)
		if f.ID != id || f.Reason != tt.reason {
			t.Fatalf("got %+v, want reset %s", f, tt.reason)
		}
		// A fresh snapshot follows.
		if entries, _ := c.Collect(id); keys(entries) != "u:t1" {
			t.Fatalf("after reset: %s", keys(entries))
		}
	}
}

// TestDenialNamesTheScope: a bare authz.ErrForbidden from a policy reaches
// the client naming the resource and the conditions it asked for.
func TestDenialNamesTheScope(t *testing.T) {
	s := newServer(t, core.Config{})
	c := s.dial(t, "alice", "p7")
	c.hello()
	c.Subscribe("s", "todos", map[string]any{"project_id": map[string]any{"in": []string{"p9", "p8"}}})
	f := c.ExpectErrorFor("s", protocol.CodeForbidden)
	if want := "todos where project_id in (p8, p9)"; !strings.Contains(f.Message, want) {
		t.Fatalf("message %q does not name %q", f.Message, want)
	}
}
