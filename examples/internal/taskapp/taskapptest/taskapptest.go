// Package taskapptest is the test every framework example passes: it runs
// the app on the example's routes on a free loopback port, in memory, and
// goes through it as a browser would.
//
// An example's test is one line:
//
//	func TestExample(t *testing.T) { taskapptest.Run(t, routes) }
package taskapptest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/examples/internal/taskapp"
)

// Run starts taskapp.Run with routes on a free loopback port, in memory,
// waits for its URL, and goes through the app as a browser would: the page; the API refused before
// login; a wrong password refused with no cookie set; alice's login and
// /api/me; the live task list of gemini over tide through the Go client
// (the seeded snapshot, then a task created over the API arriving as a
// change, and one written through the tasks.put mutator; a mutation into
// another project refused); the logout; bob's login, and bob refused a write to apollo.
// Then it stops the app and checks taskapp.Run returned nil.
func Run(t *testing.T, routes taskapp.Routes) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a broken test only
	defer cancel()
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- taskapp.Run(ctx, "127.0.0.1:0", "", slog.New(slog.DiscardHandler), routes, func(u string) { urls <- u })
	}()
	var base string
	select {
	case base = <-urls:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	base = strings.TrimSuffix(base, "/")

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, contentType, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	login := func(user, password string) int {
		status, _ := do(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"user": {user}, "password": {password}}.Encode())
		return status
	}

	if status, body := do(http.MethodGet, "/", "", ""); status != http.StatusOK || !strings.Contains(body, "<title>tide + ") {
		t.Fatalf("page: %d %.80q", status, body)
	}
	if status, _ := do(http.MethodGet, "/api/me", "", ""); status != http.StatusUnauthorized {
		t.Fatalf("/api/me before login: %d", status)
	}
	if status := login("alice", "wrong"); status != http.StatusSeeOther || len(jar.Cookies(mustURL(t, base))) != 0 {
		t.Fatalf("a wrong password: %d, cookies %v", status, jar.Cookies(mustURL(t, base)))
	}
	if status := login("alice", taskapp.Password); status != http.StatusSeeOther {
		t.Fatalf("login: %d", status)
	}
	if status, body := do(http.MethodGet, "/api/me", "", ""); status != http.StatusOK || !strings.Contains(body, `"gemini"`) {
		t.Fatalf("/api/me: %d %s", status, body)
	}

	var cookies []string
	for _, c := range jar.Cookies(mustURL(t, base)) {
		cookies = append(cookies, c.String())
	}
	c, err := client.New(client.Config{URL: "ws" + strings.TrimPrefix(base, "http") + "/tide/ws", Header: http.Header{"Cookie": cookies}})
	if err != nil {
		t.Fatal(err)
	}
	gemini, err := c.Sync(client.Scope{Resource: "tasks", Conditions: map[string]any{"project_id": "gemini"}})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string, ok func(map[string]json.RawMessage) bool) {
		t.Helper()
		for {
			ch := gemini.Changed()
			if ok(gemini.Rows()) {
				return
			}
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("%s: %v", what, ctx.Err())
			}
		}
	}
	clientDone := make(chan error, 1)
	clientCtx, stopClient := context.WithCancel(ctx)
	go func() { clientDone <- c.Run(clientCtx) }()
	defer func() { stopClient(); <-clientDone }()
	titled := func(title string) func(map[string]json.RawMessage) bool {
		return func(rows map[string]json.RawMessage) bool {
			for _, row := range rows {
				var task taskapp.Task
				if json.Unmarshal(row, &task) == nil && task.Title == title {
					return true
				}
			}
			return false
		}
	}
	wait("snapshot", titled("bob can see gemini, not apollo"))
	if status, body := do(http.MethodPost, "/api/tasks", "application/json", `{"project_id":"gemini","title":"from the test"}`); status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	wait("live change", titled("from the test"))
	// A client write through the tasks.put mutator: acknowledged, and
	// synced to the subscription; a project alice is not in is refused.
	put, err := c.Mutate(ctx, client.Mutation{Resource: "tasks", Name: "put",
		Args: taskapp.PutArgs{ID: "mutated-1", ProjectID: "gemini", Title: "through a mutator"}})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := put.Wait(ctx); err != nil || len(res.Entries) != 1 {
		t.Fatalf("put: %+v %v", res, err)
	}
	wait("mutated task", titled("through a mutator"))
	refused, err := c.Mutate(ctx, client.Mutation{Resource: "tasks", Name: "put",
		Args: taskapp.PutArgs{ID: "mutated-2", ProjectID: "mercury", Title: "not alice's"}})
	if err != nil {
		t.Fatal(err)
	}
	var rej *client.RejectError
	if _, err := refused.Wait(ctx); !errors.As(err, &rej) || rej.Code != protocol.CodeForbidden {
		t.Fatalf("put into another project: %v", err)
	}

	if status, _ := do(http.MethodPost, "/logout", "", ""); status != http.StatusSeeOther {
		t.Fatalf("logout: %d", status)
	}
	if status := login("bob", taskapp.Password); status != http.StatusSeeOther {
		t.Fatalf("login as bob: %d", status)
	}
	if status, body := do(http.MethodPost, "/api/tasks", "application/json", `{"project_id":"apollo","title":"not bob's"}`); status != http.StatusForbidden {
		t.Fatalf("bob writing to apollo: %d %s", status, body)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
