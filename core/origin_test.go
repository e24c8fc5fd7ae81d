package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

type originNote struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Body      string `tide:"body"`
}

// originDevice is a client device of TestOriginShownOnlyToItsDevice: a
// principal and the origin its hello and its polls name.
type originDevice struct {
	name, user, origin string
}

// TestOriginShownOnlyToItsDevice: a write's origin reaches the device that
// wrote it and no one else: not another principal, not another device of
// the same principal, not a connection without an origin; live, in a
// replay, in a snapshot and in a poll; for a plain resource, one with a row
// filter and a subscription of both.
func TestOriginShownOnlyToItsDevice(t *testing.T) {
	const writerOrigin = "alice-phone-6b1f0c"
	e, err := core.New(core.Config{Feed: memfeed.New(memfeed.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: projectPolicy})
	if err != nil {
		t.Fatal(err)
	}
	notes, err := core.Register(e, core.Resource[originNote]{Table: "notes", Authorize: projectPolicy,
		Filter: func(_ authz.Principal, n *originNote) bool { return n.Body != "secret" }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		ts.Close()
	})
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"

	devices := []originDevice{
		{"the writer", "alice", writerOrigin},
		{"another device of the writer's principal", "alice", "alice-laptop-93d2"},
		{"another principal", "bob", "bob-phone-1c7e"},
		{"a connection without an origin", "bob", ""},
	}
	want := func(d originDevice) string {
		if d.origin == writerOrigin {
			return writerOrigin
		}
		return ""
	}
	check := func(t *testing.T, d originDevice, how string, entries []protocol.Entry, n int) {
		t.Helper()
		if len(entries) != n {
			t.Fatalf("%s: %s: %d entries, want %d: %+v", d.name, how, len(entries), n, entries)
		}
		for _, en := range entries {
			if en.Origin != want(d) {
				t.Errorf("%s: %s: entry %s has origin %q, want %q", d.name, how, en.Key, en.Origin, want(d))
			}
		}
	}
	both := []string{"todos", "notes"}

	// Each device subscribes to todos, notes and both, and is caught up.
	type cursors struct{ todos, notes, both string }
	conns := make([]*wsClient, len(devices))
	before := make([]cursors, len(devices))
	for i, d := range devices {
		c := dialAt(t, wsURL, d.user, "p7")
		c.Hello(protocol.ClientFrame{Origin: d.origin})
		c.Subscribe("t", "todos", project("p7"))
		_, before[i].todos = c.Collect("t")
		c.Subscribe("n", "notes", project("p7"))
		_, before[i].notes = c.Collect("n")
		subscribeMulti(c.Conn, "m", both, project("p7"), "")
		_, before[i].both = c.Collect("m")
		conns[i] = c
	}

	// The writer's device writes both rows (as a mutator would, with its
	// origin), in one transaction.
	ctx := core.WithOrigin(context.Background(), writerOrigin)
	if err := todos.Upsert(ctx, todo{ID: "t1", ProjectID: "p7", Title: "ship"}); err != nil {
		t.Fatal(err)
	}
	if err := notes.Upsert(ctx, originNote{ID: "n1", ProjectID: "p7", Body: "hello"}); err != nil {
		t.Fatal(err)
	}

	t.Run("live", func(t *testing.T) {
		for i, d := range devices {
			got := map[string][]protocol.Entry{}
			for frames := 0; len(got["t"]) < 1 || len(got["n"]) < 1 || len(got["m"]) < 2; frames++ {
				if frames == 10 {
					t.Fatalf("%s: after 10 frames got %+v", d.name, got)
				}
				f, raw, err := conns[i].ReadFrame()
				if err != nil {
					t.Fatalf("%s: %v", d.name, err)
				}
				if f.Type != protocol.FrameChanges {
					t.Fatalf("%s: got %+v", d.name, f)
				}
				if want(d) == "" && bytes.Contains(raw, []byte(writerOrigin)) {
					t.Errorf("%s: a live frame names the writer's origin: %s", d.name, raw)
				}
				got[f.ID] = append(got[f.ID], f.Entries...)
			}
			check(t, d, "live todos", got["t"], 1)
			check(t, d, "live notes (row filter)", got["n"], 1)
			check(t, d, "live todos and notes", got["m"], 2)
		}
	})

	t.Run("replay", func(t *testing.T) {
		for i, d := range devices {
			c := dialAt(t, wsURL, d.user, "p7")
			c.Hello(protocol.ClientFrame{Origin: d.origin})
			c.SubscribeFrom("t", "todos", project("p7"), before[i].todos)
			entries, _ := c.Collect("t")
			check(t, d, "replayed todos", entries, 1)
			c.SubscribeFrom("n", "notes", project("p7"), before[i].notes)
			entries, _ = c.Collect("n")
			check(t, d, "replayed notes (row filter)", entries, 1)
			subscribeMulti(c.Conn, "m", both, project("p7"), before[i].both)
			entries, _ = c.Collect("m")
			check(t, d, "replayed todos and notes", entries, 2)
		}
	})

	t.Run("snapshot", func(t *testing.T) {
		for _, d := range devices {
			if want(d) != "" {
				continue // a snapshot's rows name no writer at all
			}
			c := dialAt(t, wsURL, d.user, "p7")
			c.Hello(protocol.ClientFrame{Origin: d.origin})
			c.Subscribe("t", "todos", project("p7"))
			entries, _ := c.Collect("t")
			check(t, d, "snapshot of todos", entries, 1)
			subscribeMulti(c.Conn, "m", both, project("p7"), "")
			entries, _ = c.Collect("m")
			check(t, d, "snapshot of todos and notes", entries, 2)
		}
	})

	t.Run("poll", func(t *testing.T) {
		for i, d := range devices {
			for _, q := range []struct {
				how string
				req protocol.PollRequest
				n   int
			}{
				{"polled todos", protocol.PollRequest{V: 1, Resource: "todos", Cursor: before[i].todos}, 1},
				{"polled notes (row filter)", protocol.PollRequest{V: 1, Resource: "notes", Cursor: before[i].notes}, 1},
				{"polled todos and notes", protocol.PollRequest{V: 1, Resources: both, Cursor: before[i].both}, 2},
			} {
				q.req.Conditions = map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}
				f, raw := pollAs(t, ts.URL, d, q.req)
				if want(d) == "" && bytes.Contains(raw, []byte(writerOrigin)) {
					t.Errorf("%s: %s: the page names the writer's origin: %s", d.name, q.how, raw)
				}
				check(t, d, q.how, f.Entries, q.n)
			}
		}
		// A Tide-Origin the server would not take from hello is refused.
		body := `{"v":1,"resource":"todos","conditions":{"project_id":"p7"}}`
		r, _ := http.NewRequest(http.MethodPost, ts.URL+"/tide/changes", strings.NewReader(body))
		r.Header.Set("X-User", "bob")
		r.Header.Set("X-Projects", "p7")
		r.Header.Set(middleware.ClientOriginHeader, strings.Repeat("o", protocol.MaxOriginLen+1))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(raw, []byte(`"code":"bad_frame"`)) {
			t.Errorf("a poll with a %d-byte origin: %d %s", protocol.MaxOriginLen+1, resp.StatusCode, raw)
		}
	})
}

// pollAs posts req to POST /tide/changes as device d and returns the page.
func pollAs(t *testing.T, base string, d originDevice, req protocol.PollRequest) (protocol.ServerFrame, []byte) {
	t.Helper()
	body, _ := json.Marshal(req)
	r, err := http.NewRequest(http.MethodPost, base+"/tide/changes", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-User", d.user)
	r.Header.Set("X-Projects", "p7")
	if d.origin != "" {
		r.Header.Set(middleware.ClientOriginHeader, d.origin)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var f protocol.ServerFrame
	if err := json.Unmarshal(raw, &f); err != nil || resp.StatusCode != http.StatusOK || f.Type != protocol.FrameChanges {
		t.Fatalf("%s: poll answered %d %s (%v)", d.name, resp.StatusCode, raw, err)
	}
	return f, raw
}
