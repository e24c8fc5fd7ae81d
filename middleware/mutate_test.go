package middleware_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

type renameArgs struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// TestMutateOverHTTP: POST <prefix>/mutate runs a mutator once per key
// (the Tide-Origin header scopes the key), answers with the ack or a
// reject with its HTTP status, and refuses a cross-site page.
func TestMutateOverHTTP(t *testing.T) {
	v := newEnv(t)
	tbl, err := core.Register(v.e, core.Resource[todo]{Table: "notes", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	if err := core.AddMutator(tbl, "rename", core.Mutator[renameArgs]{
		Authorize: func(_ context.Context, p authz.Principal, _ renameArgs) error {
			if p.IsAnonymous() {
				return authz.ErrUnauthenticated
			}
			return nil
		},
		Run: func(ctx context.Context, tx *core.Tx, a renameArgs) error {
			runs++
			if a.Title == "taken" {
				return fmt.Errorf("%w: the title is taken", core.ErrConflict)
			}
			return tbl.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p7", Title: a.Title})
		},
	}); err != nil {
		t.Fatal(err)
	}
	post := func(cookie, origin, pageOrigin, body string) (int, protocol.ServerFrame) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, v.srv.URL+"/tide/mutate", strings.NewReader(body))
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		if origin != "" {
			req.Header.Set(middleware.ClientOriginHeader, origin)
		}
		if pageOrigin != "" {
			req.Header.Set("Origin", pageOrigin)
		}
		return doFrame(t, req)
	}
	at := time.Now().UnixMilli()
	frame := func(key, title string) string {
		return fmt.Sprintf(`{"v":1,"key":%q,"resource":"notes","name":"rename","args":{"id":"n1","title":%q},"at":%d}`, key, title, at)
	}
	status, f := post("session=alice", "phone", "", frame("k1", "hello"))
	if status != http.StatusOK || f.Type != protocol.FrameAck || len(f.Entries) != 1 || f.Entries[0].Origin != "phone" {
		t.Fatalf("%d %+v", status, f)
	}
	if status, f = post("session=alice", "phone", "", frame("k1", "hello")); status != http.StatusOK || !f.Replayed {
		t.Fatalf("resend: %d %+v", status, f)
	}
	if runs != 1 {
		t.Fatalf("ran %d times", runs)
	}
	for _, tt := range []struct {
		name, cookie, page, body string
		status                   int
		code                     protocol.Code
	}{
		{"conflict", "session=alice", "", frame("k2", "taken"), http.StatusConflict, protocol.CodeConflict},
		{"anonymous", "", "", frame("k3", "x"), http.StatusUnauthorized, protocol.CodeUnauthenticated},
		{"unknown mutator", "session=alice", "", strings.Replace(frame("k4", "x"), "rename", "nope", 1), http.StatusNotFound, protocol.CodeUnknownMutator},
		{"expired key", "session=alice", "", strings.Replace(frame("k5", "x"), fmt.Sprint(at), "1000", 1), http.StatusGone, protocol.CodeKeyExpired},
		{"bad frame", "session=alice", "", `{"v":1,"key":"k6"}`, http.StatusBadRequest, protocol.CodeBadFrame},
	} {
		status, f := post(tt.cookie, "phone", tt.page, tt.body)
		if status != tt.status || f.Code != tt.code {
			t.Errorf("%s: %d %+v, want %d %s", tt.name, status, f, tt.status, tt.code)
		}
	}
	status, f = post("session=alice", "phone", "https://evil.example", frame("k7", "x"))
	if status != http.StatusForbidden || f.Type != protocol.FrameError {
		t.Fatalf("cross-site mutate: %d %+v", status, f)
	}
}

// TestAnonymousMutationsOverHTTP: anonymous callers' keys are scoped to
// their Tide-Origin: two of them with different origins and the same key
// each have their own write applied (and a resend replayed), and an
// anonymous mutation without the header is refused bad_frame, with nothing
// run or recorded.
func TestAnonymousMutationsOverHTTP(t *testing.T) {
	v := newEnv(t)
	tbl, err := core.Register(v.e, core.Resource[todo]{Table: "guestbook", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	if err := core.AddMutator(tbl, "sign", core.Mutator[renameArgs]{
		Authorize: func(context.Context, authz.Principal, renameArgs) error { return nil }, // anyone, anonymous callers included
		Run: func(ctx context.Context, tx *core.Tx, a renameArgs) error {
			runs++
			return tbl.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p7", Title: a.Title})
		},
	}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UnixMilli()
	sign := func(origin, key, id string) (int, protocol.ServerFrame) {
		t.Helper()
		body := fmt.Sprintf(`{"v":1,"key":%q,"resource":"guestbook","name":"sign","args":{"id":%q,"title":"hi"},"at":%d}`, key, id, at)
		req, _ := http.NewRequest(http.MethodPost, v.srv.URL+"/tide/mutate", strings.NewReader(body))
		if origin != "" {
			req.Header.Set(middleware.ClientOriginHeader, origin)
		}
		return doFrame(t, req)
	}
	for _, tt := range []struct {
		name, origin, id string
		replayed         bool
	}{
		{"first anonymous device", "web-4c1d9a0e6f2b7c3d8e9f0a1b2c3d4e5f", "g1", false},
		{"second anonymous device, same key", "web-9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b", "g2", false},
		{"the first device resends", "web-4c1d9a0e6f2b7c3d8e9f0a1b2c3d4e5f", "g1", true},
	} {
		status, f := sign(tt.origin, "k1", tt.id)
		if status != http.StatusOK || f.Type != protocol.FrameAck || f.Replayed != tt.replayed || len(f.Entries) != 1 || f.Entries[0].Key != tt.id {
			t.Fatalf("%s: %d %+v, want the ack of its own write %s (replayed %v)", tt.name, status, f, tt.id, tt.replayed)
		}
	}
	for i := range 2 { // refused each time: nothing was recorded
		status, f := sign("", "k2", "g3")
		if status != http.StatusBadRequest || f.Type != protocol.FrameReject || f.Code != protocol.CodeBadFrame || f.Key != "k2" || !strings.Contains(f.Detail, "origin") {
			t.Fatalf("anonymous without an origin, try %d: %d %+v", i, status, f)
		}
	}
	if runs != 2 {
		t.Fatalf("the mutator ran %d times, want 2", runs)
	}
}

// TestHTTPPrincipalHeader: the polling and mutation endpoints name the
// caller's principal in Tide-Principal, errors and rejects included, and
// send no such header for an anonymous caller.
func TestHTTPPrincipalHeader(t *testing.T) {
	v := newEnv(t)
	post := func(path, cookie, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, v.srv.URL+path, strings.NewReader(body))
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	poll := `{"v":1,"resource":"todos","conditions":{"project_id":"p7"}}`
	mutate := fmt.Sprintf(`{"v":1,"key":"k1","resource":"todos","name":"none","at":%d}`, time.Now().UnixMilli())
	for _, tt := range []struct {
		name, path, cookie, body string
		status                   int
		header                   string // "": absent
	}{
		{"poll", "/tide/changes", "session=alice", poll, http.StatusOK, "alice"},
		{"poll refused", "/tide/changes", "session=bob", `{"v":1,"resource":"todos","conditions":{"project_id":"p9"}}`, http.StatusForbidden, "bob"},
		{"poll, anonymous", "/tide/changes", "", poll, http.StatusUnauthorized, ""},
		{"mutate rejected", "/tide/mutate", "session=alice", mutate, http.StatusNotFound, "alice"},
		{"mutate, anonymous", "/tide/mutate", "", mutate, http.StatusNotFound, ""},
		{"an id with a percent sign", "/tide/changes", "session=50%off", poll, http.StatusOK, "50%25off"},
		{"a body that is not JSON", "/tide/changes", "session=alice", `{`, http.StatusBadRequest, "alice"},
	} {
		resp := post(tt.path, tt.cookie, tt.body)
		got, set := resp.Header[middleware.PrincipalHeader]
		switch {
		case resp.StatusCode != tt.status:
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.status)
		case tt.header == "" && set:
			t.Errorf("%s: %s %q for an anonymous caller", tt.name, middleware.PrincipalHeader, got)
		case tt.header != "" && (len(got) != 1 || got[0] != tt.header):
			t.Errorf("%s: %s %q, want %q", tt.name, middleware.PrincipalHeader, got, tt.header)
		}
	}
}

// TestMutateOverHTTPTooLarge: a mutate body above the limit is answered
// 413 with a frame_too_large reject for its key when the body's first
// bytes show it, and with a 413 error otherwise; a body that does not
// decode is refused in JSON's terms, not Go's.
func TestMutateOverHTTPTooLarge(t *testing.T) {
	v := newEnv(t)
	big := strings.Repeat("x", 70<<10)
	post := func(body string) (int, protocol.ServerFrame) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, v.srv.URL+"/tide/mutate", strings.NewReader(body))
		req.Header.Set("Cookie", "session=alice")
		return doFrame(t, req)
	}
	status, f := post(`{"v":1,"type":"mutate","key":"big-1","resource":"todos","name":"add","args":{"title":"` + big + `"},"at":1}`)
	if status != http.StatusRequestEntityTooLarge || f.Type != protocol.FrameReject || f.Key != "big-1" || f.Code != protocol.CodeFrameTooLarge ||
		f.Message != "the change is too large" || f.Detail != "request bodies are limited to 65536 bytes" {
		t.Fatalf("key first: %d %+v", status, f)
	}
	status, f = post(`{"v":1,"key":"big-2","args":{"title":"` + big + `"}}`)
	if status != http.StatusRequestEntityTooLarge || f.Type != protocol.FrameReject || f.Key != "big-2" {
		t.Fatalf("without type: %d %+v", status, f)
	}
	for _, body := range []string{
		`{"v":1,"args":{"title":"` + big + `"},"key":"big-3"}`,
		`{"v":1,"type":"subscribe","key":"big-4","args":{"title":"` + big + `"}}`,
	} {
		status, f = post(body)
		if status != http.StatusRequestEntityTooLarge || f.Type != protocol.FrameError || f.Code != protocol.CodeFrameTooLarge {
			t.Fatalf("%.40s: %d %+v", body, status, f)
		}
	}
	status, f = post(`{"v":1,"key":7}`)
	if status != http.StatusBadRequest || f.Code != protocol.CodeBadFrame || f.Message != "the body is not a JSON mutate frame: key must be a string" ||
		!strings.Contains(f.Detail, "cannot unmarshal number") {
		t.Fatalf("undecodable: %d %+v", status, f)
	}
}

// doFrame sends req and returns the response's status and its body, a
// server frame.
func doFrame(t *testing.T, req *http.Request) (int, protocol.ServerFrame) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f, err := protocol.DecodeServerFrame(b)
	if err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return resp.StatusCode, f
}
