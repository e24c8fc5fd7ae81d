package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

// TestGoClientTokenRefresh runs the reference client against the token
// endpoint: it fetches a token for hello, answers refresh-token with a new
// one and outlives the first token; when it cannot get a token any more,
// the server ends the connection at expiry with 1008.
func TestGoClientTokenRefresh(t *testing.T) {
	clk := tidetest.NewClock(time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC))
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Tokens: kr, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[todo]{Table: "notes", Authorize: authz.Authenticated}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(sessionPrincipal), middleware.WithTokenEndpoint(kr))(http.NotFoundHandler()))
	defer srv.Close()
	defer e.Shutdown(context.Background())

	var fetches atomic.Int32
	var broken atomic.Bool
	events := make(chan client.Event, 64)
	c, err := client.New(client.Config{
		URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws",
		Token: func(ctx context.Context) (string, error) {
			if broken.Load() {
				return "", errors.New("the session is gone")
			}
			fetches.Add(1)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/tide/token", nil)
			req.Header.Set("Cookie", "session=alice")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return "", fmt.Errorf("token endpoint: %s", resp.Status)
			}
			var tr middleware.TokenResponse
			return tr.Token, json.NewDecoder(resp.Body).Decode(&tr)
		},
		OnEvent: func(ev client.Event) {
			select {
			case events <- ev:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	await := func(kind client.EventKind) client.Event {
		t.Helper()
		timeout := time.After(30 * time.Second) // bounds a broken test only
		for {
			select {
			case ev := <-events:
				if ev.Kind == kind {
					return ev
				}
				if ev.Kind == client.EventDisconnected || ev.Kind == client.EventConnectFailed {
					t.Fatalf("waiting for %s: %v", kind, ev)
				}
			case <-timeout:
				t.Fatalf("no %s event", kind)
			}
		}
	}
	sub, err := c.Sync(client.Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p7"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	await(client.EventCaughtUp)

	clk.Advance(8 * time.Minute) // a 10-minute token is refreshed 2 minutes before it expires
	await(client.EventTokenRefreshed)
	// The client writes in order: once a subscription made after the
	// refresh is caught up, the server has taken the new token.
	if _, err := c.Sync(client.Scope{Resource: "notes"}); err != nil {
		t.Fatal(err)
	}
	await(client.EventCaughtUp)
	clk.Advance(3 * time.Minute) // 11 min: the first token has expired
	if err := todos.Upsert(context.Background(), todo{"t1", "p7", "still here"}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	for {
		changed := sub.Changed() // before reading, so no change is missed
		if sub.Rows()["t1"] != nil {
			break
		}
		select {
		case <-changed:
		case <-wctx.Done():
			t.Fatalf("the connection did not outlive its first token: %v", wctx.Err())
		}
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d token fetches, want 2 (hello and one refresh)", n)
	}

	broken.Store(true)
	clk.Advance(5 * time.Minute) // 16 min: the second token's refresh request
	await(client.EventTokenError)
	clk.Advance(2 * time.Minute) // 18 min: it expires
	// The server ends the session (1008); a failing token function is not a
	// definitive refusal, so the client keeps retrying and comes back once
	// the app's token endpoint recovers.
	timeout := time.After(30 * time.Second) // bounds a broken test only
	for closed := false; !closed; {
		select {
		case ev := <-events:
			closed = ev.Kind == client.EventDisconnected && ev.CloseCode == protocol.ClosePolicy
		case err := <-runErr:
			t.Fatalf("Run returned %v after a failing token refresh; it must keep retrying", err)
		case <-timeout:
			t.Fatal("the connection outlived its token")
		}
	}
	broken.Store(false)
	for live := false; !live; {
		select {
		case ev := <-events:
			live = ev.Kind == client.EventCaughtUp
		case err := <-runErr:
			t.Fatalf("Run returned %v; want a reconnect with a fresh token", err)
		case <-timeout:
			t.Fatal("the client did not reconnect once its token function recovered")
		}
	}
}
