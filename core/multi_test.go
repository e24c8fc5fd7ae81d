package core_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

type mtComment struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Body      string `tide:"body"`
}

type mtSecret struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
}

type mtLabel struct {
	ID    string `tide:"id,pk"`
	Color string `tide:"color,scope"`
}

// newMultiServer serves todos and comments (project policy), secrets (no
// policy: denied to all), members (login required) and labels (no
// project_id column).
func newMultiServer(t *testing.T) (*server, *core.Table[mtComment]) {
	t.Helper()
	e, err := core.New(core.Config{Feed: memfeed.New(memfeed.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: projectPolicy})
	if err != nil {
		t.Fatal(err)
	}
	comments, err := core.Register(e, core.Resource[mtComment]{Table: "comments", Authorize: projectPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		second(core.Register(e, core.Resource[mtSecret]{Table: "secrets"})),
		second(core.Register(e, core.Resource[mtSecret]{Table: "members", Authorize: authz.Authenticated})),
		second(core.Register(e, core.Resource[mtLabel]{Table: "labels", Authorize: authz.Allow})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(t.Context())
		ts.Close()
	})
	return &server{e: e, todos: todos, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}, comments
}

func second[T any](_ T, err error) error { return err }

func subscribeMulti(c *tidetest.Conn, id string, resources []string, conds map[string]any, cursor string) {
	f := protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: id, Resources: resources, Cursor: cursor, Conditions: map[string]json.RawMessage{}}
	for k, v := range conds {
		f.Conditions[k], _ = json.Marshal(v)
	}
	c.Send(f)
}

// TestMultiSubscribeRefused: a subscription of several resources is
// refused as a whole when one of them is unknown, lacks a condition column
// or denies it, with that resource's code and its name in the message; the
// connection goes on.
func TestMultiSubscribeRefused(t *testing.T) {
	s, _ := newMultiServer(t)
	p7 := map[string]any{"project_id": "p7"}
	cases := []struct {
		name      string
		user      string
		resources []string
		conds     map[string]any
		code      protocol.Code
		mentions  string
	}{
		{"one resource has no policy", "ann", []string{"todos", "secrets", "comments"}, p7, protocol.CodeForbidden, "secrets"},
		{"the policy of one resource denies", "ann", []string{"todos", "comments"}, map[string]any{"project_id": "p8"}, protocol.CodeForbidden, "p8"},
		{"one resource needs a login", "", []string{"todos", "members"}, p7, protocol.CodeUnauthenticated, ""},
		{"unknown resource", "ann", []string{"todos", "nope"}, p7, protocol.CodeUnknownResource, "nope"},
		{"a resource without the condition column", "ann", []string{"todos", "labels"}, p7, protocol.CodeInvalidConditions, "labels"},
		{"a resource named twice", "ann", []string{"todos", "todos"}, p7, protocol.CodeBadFrame, "todos"},
		{"too many resources", "ann", strings.Split(strings.Repeat("todos,", protocol.MaxResourcesN+1), ",")[:protocol.MaxResourcesN+1], p7, protocol.CodeBadFrame, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []tidetest.Option
			if tc.user != "" {
				opts = append(opts, tidetest.WithHeader("X-User", tc.user), tidetest.WithHeader("X-Projects", "p7"))
			}
			c := tidetest.Dial(t, s.url, opts...)
			c.Hello(protocol.ClientFrame{})
			subscribeMulti(c, "m", tc.resources, tc.conds, "")
			f := c.ExpectErrorFor("m", tc.code)
			if !strings.Contains(f.Message, tc.mentions) {
				t.Errorf("message %q does not name %q", f.Message, tc.mentions)
			}
			// Nothing else came for the refused subscription, and the
			// connection still serves others.
			c.Subscribe("ok", "labels", nil)
			if f := c.Next(); f.Type != protocol.FrameCaughtUp || f.ID != "ok" {
				t.Fatalf("after the refusal got %s %s, want caught-up of ok", f.Type, f.ID)
			}
		})
	}
	t.Run("resource outside resources", func(t *testing.T) {
		c := tidetest.Dial(t, s.url, tidetest.WithHeader("X-User", "ann"), tidetest.WithHeader("X-Projects", "p7"))
		c.Hello(protocol.ClientFrame{})
		c.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "m", Resource: "secrets", Resources: []string{"todos", "comments"}})
		c.ExpectError(protocol.CodeBadFrame)
	})
}

// TestMultiSnapshotResumeAndReset: a snapshot of several resources pages
// through them in turn; a client that left in the middle resumes with its
// snapshot cursor and gets only the rest; a cursor of another feed gets a
// reset and a new snapshot.
func TestMultiSnapshotResumeAndReset(t *testing.T) {
	s, comments := newMultiServer(t)
	ctx := t.Context()
	for _, id := range []string{"t1", "t2", "t3"} {
		if err := s.todos.Upsert(ctx, todo{ID: id, ProjectID: "p7", Title: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := comments.Upsert(ctx, mtComment{ID: "c1", ProjectID: "p7"}, mtComment{ID: "c2", ProjectID: "p7"}, mtComment{ID: "x", ProjectID: "p8"}); err != nil {
		t.Fatal(err)
	}
	resources := []string{"todos", "comments"}
	p7 := map[string]any{"project_id": "p7"}
	dial := func() *tidetest.Conn {
		c := tidetest.Dial(t, s.url, tidetest.WithHeader("X-User", "ann"), tidetest.WithHeader("X-Projects", "p7"))
		c.Hello(protocol.ClientFrame{})
		return c
	}
	c := dial()
	c.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "m", Resources: resources, Conditions: raw(p7), Limit: 2})
	var got []string
	var cursors []string
	for {
		f := c.Next()
		if f.Type == protocol.FrameCaughtUp {
			break
		}
		for _, en := range f.Entries {
			got = append(got, en.Resource+"/"+en.Key)
		}
		cursors = append(cursors, f.Cursor)
	}
	if want := "comments/c1 comments/c2 todos/t1 todos/t2 todos/t3"; strings.Join(got, " ") != want {
		t.Fatalf("snapshot %q, want %q", got, want)
	}
	// Resume after the first page (the comments).
	c2 := dial()
	c2.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "m", Resources: resources, Conditions: raw(p7), Cursor: cursors[0], Limit: 2})
	entries, _ := c2.Collect("m")
	var rest []string
	for _, en := range entries {
		rest = append(rest, en.Resource+"/"+en.Key)
	}
	if want := "todos/t1 todos/t2 todos/t3"; strings.Join(rest, " ") != want {
		t.Fatalf("resumed snapshot %q, want %q", rest, want)
	}
	// A cursor of another feed.
	c3 := dial()
	c3.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "m", Resources: resources, Conditions: raw(p7), Cursor: "1.otherfeed.3"})
	if f := c3.Next(); f.Type != protocol.FrameReset || f.Reason != protocol.ResetEpochChanged {
		t.Fatalf("got %s %s, want reset epoch_changed", f.Type, f.Reason)
	}
	if entries, _ := c3.Collect("m"); len(entries) != 5 {
		t.Fatalf("snapshot after reset: %d entries, want 5", len(entries))
	}
	// A forged snapshot cursor, its place naming a resource the
	// subscription lacks: it does not open.
	c4 := dial()
	first, err := protocol.ParseCursor(cursors[0])
	if err != nil {
		t.Fatal(err)
	}
	bad := protocol.Cursor{Epoch: first.Epoch, Snapshot: true, Seq: 1, Sealed: "secrets\x00k"}.String()
	c4.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "m", Resources: resources, Conditions: raw(p7), Cursor: bad})
	c4.ExpectErrorFor("m", protocol.CodeInvalidCursor)
}

func raw(conds map[string]any) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range conds {
		out[k], _ = json.Marshal(v)
	}
	return out
}
