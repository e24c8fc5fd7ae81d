package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	routes "github.com/tidesync/tide/internal/transport"
	"github.com/tidesync/tide/middleware"
)

// authEnv is an engine that takes channel tokens, on a fake clock, behind
// the middleware on loopback. Cookie-style principals come from the X-User
// and X-Projects headers (headerPrincipal).
type authEnv struct {
	e     *core.Engine
	kr    *authz.Keyring
	clock *tidetest.Clock
	todos *core.Table[todo]
	url   string
}

func newAuthEnv(t *testing.T, res core.Resource[todo]) *authEnv {
	t.Helper()
	clk := tidetest.NewClock(time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC))
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Tokens: kr, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if res.Table == "" {
		res.Table = "todos"
	}
	todos, err := core.Register(e, res)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	return &authEnv{e: e, kr: kr, clock: clk, todos: todos, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
}

func (a *authEnv) mint(t *testing.T, p authz.Principal, ttl time.Duration) string {
	t.Helper()
	tok, _, err := a.kr.Mint(p, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// dial opens a connection; user, if set, is the cookie principal.
func (a *authEnv) dial(t *testing.T, user string, projects ...string) *wsClient {
	t.Helper()
	return dialAt(t, a.url, user, projects...)
}

// helloToken says hello with a channel token; it does not wait for the
// answer.
func (c *wsClient) helloToken(tok string) {
	c.t.Helper()
	c.Send(tidetest.HelloFrame(protocol.ClientFrame{Token: tok}))
}

var projects = authz.RequireClaim("project_id", "projects")

func alice(projects ...string) authz.Principal {
	return authz.Principal{ID: "alice", Claims: map[string]any{"projects": projects}}
}

// TestHelloTokens: every kind of bad token in hello is refused with
// "unauthenticated" and close 1008; a good one replaces the cookie
// principal, and a token's grants narrow what its claims would allow.
func TestHelloTokens(t *testing.T) {
	a := newAuthEnv(t, core.Resource[todo]{Authorize: projects})
	now := a.clock.Now()
	valid := a.mint(t, alice("p7", "p8"), 10*time.Minute)
	parts := strings.Split(valid, ".")
	otherKey, _ := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k2", Secret: bytes.Repeat([]byte{2}, 32)}, Now: a.clock.Now})
	wrongKey, _, _ := otherKey.Mint(alice("p7"), time.Minute)
	sign := func(tok authz.Token) string {
		s, err := a.kr.Sign(tok)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tt := range []struct {
		name, token string
		reason      authz.TokenCode
	}{
		{"forged", strings.Join(parts[:3], ".") + ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", authz.CodeTokenSignature},
		{"tampered", parts[0] + "." + parts[1] + "." + strings.ToUpper(parts[2][:4]) + parts[2][4:] + "." + parts[3], authz.CodeTokenSignature},
		{"wrong key id", wrongKey, authz.CodeTokenUnknownKey},
		{"expired", sign(authz.Token{Principal: alice("p7"), IssuedAt: now.Add(-time.Hour), Expiry: now.Add(-time.Minute)}), authz.CodeTokenExpired},
		{"not yet valid", sign(authz.Token{Principal: alice("p7"), NotBefore: now.Add(time.Minute), Expiry: now.Add(time.Hour)}), authz.CodeTokenNotYetValid},
		{"garbage", "garbage", authz.CodeTokenMalformed},
		{"oversized", "tide1.k1." + strings.Repeat("A", 6000) + ".x", authz.CodeTokenTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := a.dial(t, "cookie-user", "p7")
			c.helloToken(tt.token)
			f := c.ExpectErrorClose(protocol.CodeUnauthenticated, protocol.ClosePolicy)
			if !strings.Contains(f.Message, string(tt.reason)) {
				t.Fatalf("message %q does not name %s", f.Message, tt.reason)
			}
		})
	}
	t.Run("beyond the protocol's token limit", func(t *testing.T) {
		c := a.dial(t, "")
		c.helloToken(strings.Repeat("A", 9000))
		c.ExpectErrorClose(protocol.CodeBadFrame, protocol.ClosePolicy)
	})

	_ = a.todos.Upsert(context.Background(), todo{"t1", "p7", "a", false}, todo{"t2", "p8", "b", false})
	t.Run("valid", func(t *testing.T) {
		c := a.dial(t, "") // no cookie: the token alone identifies the caller
		c.helloToken(valid)
		c.Expect(protocol.FrameWelcome)
		c.Subscribe("s7", "todos", project("p7"))
		if got, _ := c.Collect("s7"); keys(got) != "u:t1" {
			t.Fatalf("got %s", keys(got))
		}
		c.Subscribe("s9", "todos", project("p9"))
		c.ExpectErrorFor("s9", protocol.CodeForbidden)
	})
	t.Run("token for another scope", func(t *testing.T) {
		p := alice("p7", "p8")
		p.Grants = []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": {"p7"}}}}
		c := a.dial(t, "")
		c.helloToken(a.mint(t, p, time.Minute))
		c.Expect(protocol.FrameWelcome)
		c.Subscribe("s8", "todos", project("p8")) // the claims allow it, the token does not
		f := c.Expect(protocol.FrameError)
		if f.ID != "s8" || f.Code != protocol.CodeForbidden || !strings.Contains(f.Message, string(authz.CodeScopeNotAllowed)) {
			t.Fatalf("got %+v", f)
		}
		c.Subscribe("all", "todos", nil)
		c.ExpectErrorFor("all", protocol.CodeForbidden)
		c.Subscribe("s7", "todos", project("p7"))
		if got, _ := c.Collect("s7"); keys(got) != "u:t1" {
			t.Fatalf("got %s", keys(got))
		}
	})
	t.Run("tokens refused without a verifier", func(t *testing.T) {
		s := newServer(t, core.Config{})
		c := s.dial(t, "u1", "p7")
		c.helloToken(valid)
		c.ExpectErrorClose(protocol.CodeUnauthenticated, protocol.ClosePolicy)
	})
}

// TestTokenRefresh: refresh-token comes before expiry; a refresh with a new
// token keeps the connection past the old expiry; without one the
// connection ends with "unauthenticated" and 1008 at expiry.
func TestTokenRefresh(t *testing.T) {
	a := newAuthEnv(t, core.Resource[todo]{Authorize: projects})
	c := a.dial(t, "")
	c.helloToken(a.mint(t, alice("p7"), 60*time.Second))
	c.Expect(protocol.FrameWelcome)
	c.Subscribe("s", "todos", project("p7"))
	c.Collect("s")

	a.clock.Advance(29 * time.Second)
	c.Probe() // nothing yet: the request comes 30 s before expiry
	a.clock.Advance(time.Second)
	if f := c.Expect(protocol.FrameRefreshToken); f.ExpiresIn != 30 {
		t.Fatalf("refresh-token %+v", f)
	}
	c.Refresh(a.mint(t, alice("p7"), 120*time.Second)) // expires at 150 s
	c.Probe()

	a.clock.Advance(31 * time.Second) // 61 s: past the first token's expiry
	c.Probe()
	_ = a.todos.Upsert(context.Background(), todo{"t1", "p7", "live", false})
	if f := c.Expect(protocol.FrameChanges); keys(f.Entries) != "u:t1" {
		t.Fatalf("after the old expiry: %+v", f)
	}

	a.clock.Advance(59 * time.Second) // 120 s: 30 s before the new expiry
	if f := c.Expect(protocol.FrameRefreshToken); f.ExpiresIn != 30 {
		t.Fatalf("second refresh-token %+v", f)
	}
	a.clock.Advance(29 * time.Second)
	c.Probe()
	a.clock.Advance(time.Second) // 150 s, not refreshed
	f := c.ExpectErrorClose(protocol.CodeUnauthenticated, protocol.ClosePolicy)
	if !strings.Contains(f.Message, "expired") {
		t.Fatalf("message %q", f.Message)
	}
}

func TestRefreshRefused(t *testing.T) {
	a := newAuthEnv(t, core.Resource[todo]{Authorize: projects})
	for _, tt := range []struct {
		name  string
		token string
		code  protocol.Code
	}{
		{"another principal", a.mint(t, authz.Principal{ID: "mallory", Claims: map[string]any{"projects": []string{"p7"}}}, time.Minute), protocol.CodeForbidden},
		{"invalid", "tide1.k1.AAAA.AAAA", protocol.CodeUnauthenticated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := a.dial(t, "")
			c.helloToken(a.mint(t, alice("p7"), time.Minute))
			c.Expect(protocol.FrameWelcome)
			c.Refresh(tt.token)
			c.ExpectErrorClose(tt.code, protocol.ClosePolicy)
		})
	}
	t.Run("cookie principal refreshes to a token of its own", func(t *testing.T) {
		c := a.dial(t, "alice", "p7")
		c.hello()
		c.Refresh(a.mint(t, alice("p7"), time.Minute))
		c.Probe()
	})
}

// TestRefreshNarrowsGrants: a refreshed token's grants apply at once; the
// subscriptions they no longer cover end with "forbidden".
func TestRefreshNarrowsGrants(t *testing.T) {
	a := newAuthEnv(t, core.Resource[todo]{Authorize: projects})
	grant := func(ps ...string) authz.Principal {
		p := alice("p7", "p8")
		p.Grants = []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": ps}}}
		return p
	}
	c := a.dial(t, "")
	c.helloToken(a.mint(t, grant("p7", "p8"), time.Minute))
	c.Expect(protocol.FrameWelcome)
	c.Subscribe("s7", "todos", project("p7"))
	c.Collect("s7")
	c.Subscribe("s8", "todos", project("p8"))
	c.Collect("s8")
	c.Refresh(a.mint(t, grant("p7"), time.Minute))
	c.ExpectErrorFor("s8", protocol.CodeForbidden)
	_ = a.todos.Upsert(context.Background(), todo{"x", "p8", "hidden", false}, todo{"y", "p7", "seen", false})
	if f := c.Expect(protocol.FrameChanges); f.ID != "s7" || keys(f.Entries) != "u:y" {
		t.Fatalf("got %+v", f)
	}
}

// TestRevoke: Revoke ends every connection of a principal at once, cookie
// and token alike, refuses its tokens afterwards, and leaves others alone.
func TestRevoke(t *testing.T) {
	a := newAuthEnv(t, core.Resource[todo]{Authorize: projects})
	tok := a.mint(t, alice("p7"), 10*time.Minute)
	viaToken := a.dial(t, "")
	viaToken.helloToken(tok)
	viaToken.Expect(protocol.FrameWelcome)
	viaCookie := a.dial(t, "alice", "p7")
	viaCookie.hello()
	bob := a.dial(t, "bob", "p7")
	bob.hello()
	for _, c := range []*wsClient{viaToken, viaCookie, bob} {
		c.Subscribe("s", "todos", project("p7"))
		c.Collect("s")
	}
	if n := a.e.Revoke("alice"); n != 2 {
		t.Fatalf("Revoke ended %d connections, want 2", n)
	}
	_ = a.todos.Upsert(context.Background(), todo{"t1", "p7", "after", false})
	for _, c := range []*wsClient{viaToken, viaCookie} {
		f := c.ExpectErrorClose(protocol.CodeUnauthenticated, protocol.ClosePolicy)
		if !strings.Contains(f.Message, "revoked") {
			t.Fatalf("message %q", f.Message)
		}
	}
	if f := bob.Expect(protocol.FrameChanges); keys(f.Entries) != "u:t1" {
		t.Fatalf("bob got %+v", f)
	}
	again := a.dial(t, "")
	again.helloToken(tok)
	f := again.ExpectErrorClose(protocol.CodeUnauthenticated, protocol.ClosePolicy)
	if !strings.Contains(f.Message, string(authz.CodeTokenRevoked)) {
		t.Fatalf("message %q", f.Message)
	}
	if n := a.e.Revoke(""); n != 0 {
		t.Fatalf("Revoke of anonymous ended %d", n)
	}
}

// TestReauthorize: a policy backed by the app's data (a membership table)
// runs again on Reauthorize; the subscriptions it now denies end with
// "forbidden", the connection and its other subscriptions go on.
func TestReauthorize(t *testing.T) {
	var mu sync.Mutex
	members := map[string]bool{"alice/p7": true, "alice/p8": true}
	membership := func(ctx context.Context, r authz.Request) error {
		if r.Principal.IsAnonymous() {
			return authz.ErrUnauthenticated
		}
		mu.Lock()
		defer mu.Unlock()
		for _, p := range r.Conditions["project_id"] {
			if !members[r.Principal.ID+"/"+p] {
				return authz.ErrForbidden
			}
		}
		return ctx.Err()
	}
	a := newAuthEnv(t, core.Resource[todo]{Authorize: authz.All(authz.RequireConditions("project_id"), membership)})
	c := a.dial(t, "alice")
	c.hello()
	c.Subscribe("s7", "todos", project("p7"))
	c.Collect("s7")
	c.Subscribe("s8", "todos", project("p8"))
	c.Collect("s8")

	if n, err := a.e.Reauthorize(context.Background(), "alice"); n != 0 || err != nil {
		t.Fatalf("nothing changed, yet Reauthorize ended %d (%v)", n, err)
	}
	mu.Lock()
	delete(members, "alice/p8")
	mu.Unlock()
	if n, err := a.e.Reauthorize(context.Background(), "alice"); n != 1 || err != nil {
		t.Fatalf("Reauthorize ended %d (%v), want 1", n, err)
	}
	c.ExpectErrorFor("s8", protocol.CodeForbidden)
	_ = a.todos.Upsert(context.Background(), todo{"x", "p8", "no longer", false}, todo{"y", "p7", "still", false})
	if f := c.Expect(protocol.FrameChanges); f.ID != "s7" || keys(f.Entries) != "u:y" {
		t.Fatalf("got %+v", f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.e.Reauthorize(ctx, "alice"); err == nil {
		t.Fatal("a cancelled Reauthorize reported success")
	}
	c.Probe() // the cancelled check ended nothing
}

// ownTodo is a row with an owner and a privacy flag, for row filters.
type ownTodo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Owner     string `tide:"owner"`
	Private   bool   `tide:"private"`
}

// TestRowFilter: what a filter hides is left out of snapshots, replayed and
// pushed as deletes where the client may hold it, and never sent as a row.
func TestRowFilter(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := core.Register(e, core.Resource[ownTodo]{Table: "todos", Authorize: projects,
		Filter: func(p authz.Principal, r *ownTodo) bool { return !r.Private || r.Owner == p.ID }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		ts.Close()
	})
	s := &server{e: e, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
	ctx := context.Background()
	up := func(rows ...ownTodo) {
		t.Helper()
		if err := tbl.Upsert(ctx, rows...); err != nil {
			t.Fatal(err)
		}
	}
	up(ownTodo{"a", "p7", "alice", false}, ownTodo{"b", "p7", "bob", true}, ownTodo{"c", "p7", "alice", true})
	c := s.dial(t, "alice", "p7")
	c.hello()
	c.Subscribe("s", "todos", project("p7"))
	snap, cursor := c.Collect("s")
	if got := keys(snap); got != "u:a u:c" {
		t.Fatalf("snapshot %s", got)
	}

	up(ownTodo{"a", "p7", "bob", true})   // a becomes hidden: a delete
	up(ownTodo{"b", "p7", "bob", false})  // b becomes visible: an upsert
	_ = tbl.Delete(ctx, ownTodo{ID: "a"}) // deleting a hidden row: nothing
	up(ownTodo{"d", "p7", "bob", true})   // a new hidden row: nothing, not even its key
	up(ownTodo{"d", "p7", "carol", true}) // hidden before and after: nothing
	_ = tbl.Delete(ctx, ownTodo{ID: "c"}) // deleting a visible row: a delete
	up(ownTodo{"c", "p8", "alice", true}) // back in another scope: nothing here
	want := "d:a u:b d:c"
	var live []protocol.Entry
	for len(live) < 3 {
		live = append(live, c.Expect(protocol.FrameChanges).Entries...)
	}
	if got := keys(live); got != want {
		t.Fatalf("live %s, want %s", got, want)
	}
	for _, e := range live {
		if e.Op == "upsert" && strings.Contains(string(e.Row), `"private":true`) && !strings.Contains(string(e.Row), `"owner":"alice"`) {
			t.Fatalf("leaked %s", e.Row)
		}
	}
	// Replay from the snapshot's cursor sends the same; bob's snapshot
	// shows what he may see.
	r := s.dial(t, "alice", "p7")
	r.hello()
	r.SubscribeFrom("r", "todos", project("p7"), cursor)
	if got, _ := r.Collect("r"); keys(got) != want {
		t.Fatalf("replay %s, want %s", keys(got), want)
	}
	b := s.dial(t, "bob", "p7")
	b.hello()
	b.Subscribe("s", "todos", project("p7"))
	if got, _ := b.Collect("s"); keys(got) != "u:b" {
		t.Fatalf("bob's snapshot %s", keys(got))
	}
	// Polling goes through the same filter.
	bob := authz.Principal{ID: "bob", Claims: map[string]any{"projects": []string{"p7"}}}
	out, err := routes.Of(e).Poll(ctx, bob, "", protocol.PollRequest{V: 1, Resource: "todos", Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}})
	if err != nil {
		t.Fatal(err)
	}
	var page struct{ Entries []protocol.Entry }
	if err := json.Unmarshal(out, &page); err != nil || keys(page.Entries) != "u:b" {
		t.Fatalf("bob's poll %s (%v)", out, err)
	}
	out, err = routes.Of(e).Poll(ctx, alice("p7"), "", protocol.PollRequest{V: 1, Resource: "todos", Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}, Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &page); err != nil || keys(page.Entries) != want {
		t.Fatalf("alice's poll from her cursor %s (%v)", out, err)
	}
}

// TestConditionsValidatedBeforePolicy: bad conditions are refused with
// invalid_conditions (or too_many_conditions) without the policy ever
// running; good ones reach it in canonical form.
func TestConditionsValidatedBeforePolicy(t *testing.T) {
	type item struct {
		ID    string `tide:"id,pk"`
		Org   string `tide:"org,scope"`
		Team  int64  `tide:"team,scope"`
		Open  bool   `tide:"open,scope"`
		Title string `tide:"title"`
	}
	var mu sync.Mutex
	var seen []map[string][]string
	recordAll := func(_ context.Context, r authz.Request) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Conditions)
		return nil
	}
	e, err := core.New(core.Config{MaxConditionValues: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[item]{Table: "items", Authorize: recordAll}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		ts.Close()
	})
	s := &server{e: e, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
	c := s.dial(t, "u1")
	c.hello()
	for i, tt := range []struct {
		conds string
		code  protocol.Code
	}{
		{`{"nope":"x"}`, protocol.CodeInvalidConditions},
		{`{"title":"x"}`, protocol.CodeInvalidConditions},
		{`{"id":"x"}`, protocol.CodeInvalidConditions},
		{`{"org":7}`, protocol.CodeInvalidConditions},
		{`{"team":"seven"}`, protocol.CodeInvalidConditions},
		{`{"team":1.5}`, protocol.CodeInvalidConditions},
		{`{"team":"007"}`, protocol.CodeInvalidConditions},
		{`{"open":"true"}`, protocol.CodeInvalidConditions},
		{`{"org":{"in":[]}}`, protocol.CodeInvalidConditions},
		{`{"org":{"in":["a"],"or":["b"]}}`, protocol.CodeInvalidConditions},
		{`{"org":null}`, protocol.CodeInvalidConditions},
		{`{"org":["a"]}`, protocol.CodeInvalidConditions},
		{`{"org":{"in":["a","b","c","d","e","f"]}}`, protocol.CodeTooManyConditions},
	} {
		id := fmt.Sprintf("c%d", i)
		c.Send(`{"v":1,"type":"subscribe","id":"` + id + `","resource":"items","conditions":` + tt.conds + `}`)
		if f := c.Expect(protocol.FrameError); f.ID != id || f.Code != tt.code {
			t.Errorf("%s: got %+v, want %s", tt.conds, f, tt.code)
		}
	}
	mu.Lock()
	if len(seen) != 0 {
		t.Fatalf("the policy ran for invalid conditions: %v", seen)
	}
	mu.Unlock()
	c.Send(`{"v":1,"type":"subscribe","id":"ok","resource":"items","conditions":{"org":{"in":["b","a","b"]},"team":"9007199254740993","open":false}}`)
	c.Collect("ok")
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]string{"org": {"a", "b"}, "team": {"9007199254740993"}, "open": {"false"}}
	if len(seen) != 1 || fmt.Sprint(seen[0]) != fmt.Sprint(want) {
		t.Fatalf("the policy saw %v, want %v", seen, want)
	}
}
