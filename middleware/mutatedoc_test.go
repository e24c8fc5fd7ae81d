package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// docBlocks returns the bodies of the fenced blocks of the given language
// in a docs page.
func docBlocks(t *testing.T, page, lang string) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/" + page)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestMutateOverHTTPDocExamples: the HTTP mutate bodies docs/protocol.md
// and docs/writes.md show are accepted as they are written (with "at" set
// to the time of the test, as the docs say a client sends it), the
// documented answer decodes as an ack, and a body without the protocol
// version is refused as documented.
func TestMutateOverHTTPDocExamples(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	type putArgs struct {
		ID        string `json:"id"`
		ProjectID string `json:"project_id"`
		Title     string `json:"title"`
	}
	if err := core.AddMutator(todos, "put", core.Mutator[putArgs]{
		Authorize: func(context.Context, authz.Principal, putArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a putArgs) error {
			return todos.UpsertTx(ctx, tx, todo(a))
		},
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(sessionPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		srv.Close()
	})

	// The documented bodies: the request of protocol.md's http example and
	// the -d of writes.md's curl example.
	var bodies []string
	var answer string
	for _, blk := range docBlocks(t, "protocol.md", "http") {
		_, body, _ := strings.Cut(blk, "\n\n")
		switch {
		case strings.HasPrefix(blk, "POST /tide/mutate "):
			bodies = append(bodies, strings.TrimSpace(body))
		case strings.HasPrefix(blk, "HTTP/1.1 200 OK"):
			answer = strings.TrimSpace(body)
		}
	}
	for _, blk := range docBlocks(t, "writes.md", "sh") {
		if m := regexp.MustCompile(`-d '([^']*)'`).FindStringSubmatch(blk); m != nil && strings.Contains(blk, "/tide/mutate") {
			bodies = append(bodies, m[1])
		}
	}
	if len(bodies) != 2 || answer == "" {
		t.Fatalf("found %d documented bodies and answer %q; want protocol.md's and writes.md's", len(bodies), answer)
	}
	if f, err := protocol.DecodeServerFrame([]byte(answer)); err != nil || f.Type != protocol.FrameAck || f.Key == "" || len(f.Entries) != 1 {
		t.Fatalf("documented answer %q: %+v, %v", answer, f, err)
	}
	atField := regexp.MustCompile(`"at":\d+`)
	post := func(body string) (int, protocol.ServerFrame) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/tide/mutate", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Cookie", "session=alice")
		req.Header.Set(middleware.OriginHeader, "dev-a")
		return doFrame(t, req)
	}
	for i, body := range bodies {
		if !atField.MatchString(body) {
			t.Fatalf("documented body %q has no at", body)
		}
		body = atField.ReplaceAllString(body, fmt.Sprintf(`"at":%d`, time.Now().UnixMilli()))
		body = strings.Replace(body, `"key":"m-7f3a"`, fmt.Sprintf(`"key":"doc-%d"`, i), 1)
		status, f := post(body)
		if status != http.StatusOK || f.Type != protocol.FrameAck || len(f.Entries) != 1 || f.Entries[0].Key != "t6" {
			t.Fatalf("documented body %d: %d %+v", i, status, f)
		}
	}
	// Without "v": refused as the docs say.
	noV := strings.Replace(atField.ReplaceAllString(bodies[0], fmt.Sprintf(`"at":%d`, time.Now().UnixMilli())), `"v":1,`, "", 1)
	status, f := post(noV)
	if status != http.StatusBadRequest || f.Code != protocol.CodeBadFrame || !strings.Contains(f.Message+" "+f.Detail, `missing protocol version "v"`) {
		t.Fatalf("without v: %d %+v", status, f)
	}
}
