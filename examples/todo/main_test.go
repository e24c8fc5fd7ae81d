package main

import (
	"context"
	"encoding/json"
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
)

// TestDemo runs the demo as `go run ./examples/todo` does (in memory), fetches
// its page, and checks that a todo added through its API reaches a client
// subscribed over the protocol, as a second browser tab would see it.
func TestDemo(t *testing.T) {
	base, hc, ctx := startDemo(t)
	resp, err := hc.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "tide todo demo") {
		t.Fatalf("page: %d %.80s", resp.StatusCode, page)
	}
	jar := hc.Jar

	// A second tab: the Go client with the same session cookie.
	cookies := jar.Cookies(mustURL(t, base))
	hdr := http.Header{}
	for _, c := range cookies {
		hdr.Add("Cookie", c.String())
	}
	c, err := client.New(client.Config{URL: "ws" + strings.TrimPrefix(base, "http") + "tide/ws", Header: hdr})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Sync(client.Scope{Resource: "todos", Conditions: map[string]any{"project_id": "demo"}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Run(ctx) }()

	resp, err = hc.Post(base+"api/todos", "application/json", strings.NewReader(`{"project_id":"demo","title":"from the other tab"}`))
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || created.ID == "" {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	for {
		changed := sub.Changed() // before reading, so no change is missed
		if row, ok := sub.Rows()[created.ID]; ok {
			if td, err := protocol.DecodeRow[Todo](row); err == nil && td.Title == "from the other tab" {
				break
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the new todo never reached the subscribed client: %v", ctx.Err())
		}
	}

	// Who is viewing the project: this tab (the Go client) and a second
	// user, through the project's presence channel.
	seen := make(chan []protocol.Member, 16)
	if _, err := c.JoinTopic("project:demo", client.TopicOptions{OnPresence: func(ms []protocol.Member) { seen <- ms }}); err != nil {
		t.Fatal(err)
	}
	other, err := client.New(client.Config{URL: "ws" + strings.TrimPrefix(base, "http") + "tide/ws", Header: http.Header{"Cookie": {sessionCookie + "=zoe"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.JoinTopic("project:demo", client.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = other.Run(ctx) }()
	for {
		var ms []protocol.Member
		select {
		case ms = <-seen:
		case <-ctx.Done():
			t.Fatal("zoe never appeared among the viewers of project demo")
		}
		if len(ms) == 2 && (ms[0].Principal == "zoe" || ms[1].Principal == "zoe") {
			break
		}
	}
}

// startDemo runs the demo in memory, as `go run ./examples/todo` does, on a
// free port until the test ends (its run must then return nil). It returns
// the demo's URL, an HTTP client with a cookie jar, and a context that ends
// with the test (a failure bound only).
func startDemo(t *testing.T) (base string, hc *http.Client, ctx context.Context) {
	t.Helper()
	t.Setenv("DATABASE_URL", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, "127.0.0.1:0", slog.New(slog.DiscardHandler), func(url string) { urls <- url })
	}()
	select {
	case base = <-urls:
	case err := <-done:
		cancel()
		t.Fatalf("run: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	jar, _ := cookiejar.New(nil)
	return base, &http.Client{Jar: jar}, ctx
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
