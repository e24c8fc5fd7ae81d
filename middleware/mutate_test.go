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
			req.Header.Set(middleware.OriginHeader, origin)
		}
		if pageOrigin != "" {
			req.Header.Set("Origin", pageOrigin)
		}
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
