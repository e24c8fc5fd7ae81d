package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// fakeClock is a core.Clock (and a keyring's Now) that moves only when a
// test advances it; timers due by then run, in order, before Advance
// returns.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		stopped := !t.done
		t.done = true
		return stopped
	}
}

// Advance moves the clock by d and runs the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	live := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.done:
		case !t.at.After(c.now):
			t.done = true
			due = append(due, t)
		default:
			live = append(live, t)
		}
	}
	c.timers = live
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

// authEnv is an engine that takes channel tokens, on a fake clock, behind
// the middleware on loopback. Cookie-style principals come from the X-User
// and X-Projects headers (headerPrincipal).
type authEnv struct {
	e     *core.Engine
	kr    *authz.Keyring
	clock *fakeClock
	todos *core.Table[todo]
	url   string
}

func newAuthEnv(t *testing.T, res core.Resource[todo]) *authEnv {
	t.Helper()
	clk := newFakeClock()
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
	ts := httptest.NewServer(middleware.Handler(e, middleware.WithPrincipal(headerPrincipal)))
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
	h := map[string][]string{}
	if user != "" {
		h["X-User"] = []string{user}
		h["X-Projects"] = []string{strings.Join(projects, ",")}
	}
	ws, _, err := websocket.DefaultDialer.Dial(a.url, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return &wsClient{t: t, ws: ws}
}

func (c *wsClient) helloToken(tok string) {
	c.t.Helper()
	b, _ := json.Marshal(tok)
	c.send(`{"v":1,"type":"hello","token":` + string(b) + `}`)
}

func (c *wsClient) subscribe(id, project string) {
	c.t.Helper()
	c.send(`{"v":1,"type":"subscribe","id":"` + id + `","resource":"todos","conditions":{"project_id":"` + project + `"}}`)
}

// probe proves the server handled every frame sent so far and queued
// nothing else meanwhile: the next frame is the answer to an unsubscribe of
// an id never used.
func (c *wsClient) probe() {
	c.t.Helper()
	c.send(`{"v":1,"type":"unsubscribe","id":"probe"}`)
	if f := c.expect(core.FrameError); f.Code != core.CodeUnknownSub || f.ID != "probe" {
		c.t.Fatalf("probe answered by %+v", f)
	}
}

// expectClose reads an error frame with code, then a close with closeCode.
func (c *wsClient) expectClose(code core.Code, closeCode int) core.ServerFrame {
	c.t.Helper()
	f := c.expect(core.FrameError)
	if f.Code != code || f.ID != "" {
		c.t.Fatalf("error %+v, want connection-level %s", f, code)
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, data, err := c.ws.ReadMessage()
	if err == nil {
		c.t.Fatalf("after the error: %s", data)
	}
	if !websocket.IsCloseError(err, closeCode) {
		c.t.Fatalf("want close %d, got %v", closeCode, err)
	}
	return f
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
			f := c.expectClose(core.CodeUnauthenticated, core.ClosePolicy)
			if !strings.Contains(f.Message, string(tt.reason)) {
				t.Fatalf("message %q does not name %s", f.Message, tt.reason)
			}
		})
	}
	t.Run("beyond the protocol's token limit", func(t *testing.T) {
		c := a.dial(t, "")
		c.helloToken(strings.Repeat("A", 9000))
		c.expectClose(core.CodeBadFrame, core.ClosePolicy)
	})

	_ = a.todos.Upsert(context.Background(), todo{"t1", "p7", "a", false}, todo{"t2", "p8", "b", false})
	t.Run("valid", func(t *testing.T) {
		c := a.dial(t, "") // no cookie: the token alone identifies the caller
		c.helloToken(valid)
		c.expect(core.FrameWelcome)
		c.subscribe("s7", "p7")
		if got, _ := c.collect("s7"); keys(got) != "u:t1" {
			t.Fatalf("got %s", keys(got))
		}
		c.subscribe("s9", "p9")
		if f := c.expect(core.FrameError); f.ID != "s9" || f.Code != core.CodeForbidden {
			t.Fatalf("outside the claims: %+v", f)
		}
	})
	t.Run("token for another scope", func(t *testing.T) {
		p := alice("p7", "p8")
		p.Grants = []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": {"p7"}}}}
		c := a.dial(t, "")
		c.helloToken(a.mint(t, p, time.Minute))
		c.expect(core.FrameWelcome)
		c.subscribe("s8", "p8") // the claims allow it, the token does not
		f := c.expect(core.FrameError)
		if f.ID != "s8" || f.Code != core.CodeForbidden || !strings.Contains(f.Message, string(authz.CodeScopeNotAllowed)) {
			t.Fatalf("got %+v", f)
		}
		c.send(`{"v":1,"type":"subscribe","id":"all","resource":"todos"}`)
		if f := c.expect(core.FrameError); f.ID != "all" || f.Code != core.CodeForbidden {
			t.Fatalf("whole resource: %+v", f)
		}
		c.subscribe("s7", "p7")
		if got, _ := c.collect("s7"); keys(got) != "u:t1" {
			t.Fatalf("got %s", keys(got))
		}
	})
	t.Run("tokens refused without a verifier", func(t *testing.T) {
		s := newServer(t, core.Config{})
		c := s.dial(t, "u1", "p7")
		c.helloToken(valid)
		c.expectClose(core.CodeUnauthenticated, core.ClosePolicy)
	})
}

// TestTokenRefresh: refresh-token comes before expiry; a refresh with a new
// token keeps the connection past the old expiry; without one the
// connection ends with "unauthenticated" and 1008 at expiry.
func TestTokenRefresh(t *testing.T) {
	a := newAuthEnv(t, core.Resource[todo]{Authorize: projects})
	c := a.dial(t, "")
	c.helloToken(a.mint(t, alice("p7"), 60*time.Second))
	c.expect(core.FrameWelcome)
	c.subscribe("s", "p7")
	c.collect("s")

	a.clock.Advance(29 * time.Second)
	c.probe() // nothing yet: the request comes 30 s before expiry
	a.clock.Advance(time.Second)
	if f := c.expect(core.FrameRefreshToken); f.ExpiresIn != 30 {
		t.Fatalf("refresh-token %+v", f)
	}
	b, _ := json.Marshal(a.mint(t, alice("p7"), 120*time.Second)) // expires at 150 s
	c.send(`{"v":1,"type":"refresh","token":` + string(b) + `}`)
	c.probe()

	a.clock.Advance(31 * time.Second) // 61 s: past the first token's expiry
	c.probe()
	_ = a.todos.Upsert(context.Background(), todo{"t1", "p7", "live", false})
	if f := c.expect(core.FrameChanges); keys(f.Entries) != "u:t1" {
		t.Fatalf("after the old expiry: %+v", f)
	}

	a.clock.Advance(59 * time.Second) // 120 s: 30 s before the new expiry
	if f := c.expect(core.FrameRefreshToken); f.ExpiresIn != 30 {
		t.Fatalf("second refresh-token %+v", f)
	}
	a.clock.Advance(29 * time.Second)
	c.probe()
	a.clock.Advance(time.Second) // 150 s, not refreshed
	f := c.expectClose(core.CodeUnauthenticated, core.ClosePolicy)
	if !strings.Contains(f.Message, "expired") {
		t.Fatalf("message %q", f.Message)
	}
}

func TestRefreshRefused(t *testing.T) {
	a := newAuthEnv(t, core.Resource[todo]{Authorize: projects})
	for _, tt := range []struct {
		name  string
		token string
		code  core.Code
	}{
		{"another principal", a.mint(t, authz.Principal{ID: "mallory", Claims: map[string]any{"projects": []string{"p7"}}}, time.Minute), core.CodeForbidden},
		{"invalid", "tide1.k1.AAAA.AAAA", core.CodeUnauthenticated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := a.dial(t, "")
			c.helloToken(a.mint(t, alice("p7"), time.Minute))
			c.expect(core.FrameWelcome)
			b, _ := json.Marshal(tt.token)
			c.send(`{"v":1,"type":"refresh","token":` + string(b) + `}`)
			c.expectClose(tt.code, core.ClosePolicy)
		})
	}
	t.Run("cookie principal refreshes to a token of its own", func(t *testing.T) {
		c := a.dial(t, "alice", "p7")
		c.hello()
		b, _ := json.Marshal(a.mint(t, alice("p7"), time.Minute))
		c.send(`{"v":1,"type":"refresh","token":` + string(b) + `}`)
		c.probe()
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
	c.expect(core.FrameWelcome)
	c.subscribe("s7", "p7")
	c.collect("s7")
	c.subscribe("s8", "p8")
	c.collect("s8")
	b, _ := json.Marshal(a.mint(t, grant("p7"), time.Minute))
	c.send(`{"v":1,"type":"refresh","token":` + string(b) + `}`)
	if f := c.expect(core.FrameError); f.ID != "s8" || f.Code != core.CodeForbidden {
		t.Fatalf("got %+v", f)
	}
	_ = a.todos.Upsert(context.Background(), todo{"x", "p8", "hidden", false}, todo{"y", "p7", "seen", false})
	if f := c.expect(core.FrameChanges); f.ID != "s7" || keys(f.Entries) != "u:y" {
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
	viaToken.expect(core.FrameWelcome)
	viaCookie := a.dial(t, "alice", "p7")
	viaCookie.hello()
	bob := a.dial(t, "bob", "p7")
	bob.hello()
	for _, c := range []*wsClient{viaToken, viaCookie, bob} {
		c.subscribe("s", "p7")
		c.collect("s")
	}
	if n := a.e.Revoke("alice"); n != 2 {
		t.Fatalf("Revoke ended %d connections, want 2", n)
	}
	_ = a.todos.Upsert(context.Background(), todo{"t1", "p7", "after", false})
	for _, c := range []*wsClient{viaToken, viaCookie} {
		f := c.expectClose(core.CodeUnauthenticated, core.ClosePolicy)
		if !strings.Contains(f.Message, "revoked") {
			t.Fatalf("message %q", f.Message)
		}
	}
	if f := bob.expect(core.FrameChanges); keys(f.Entries) != "u:t1" {
		t.Fatalf("bob got %+v", f)
	}
	again := a.dial(t, "")
	again.helloToken(tok)
	f := again.expectClose(core.CodeUnauthenticated, core.ClosePolicy)
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
	c.subscribe("s7", "p7")
	c.collect("s7")
	c.subscribe("s8", "p8")
	c.collect("s8")

	if n, err := a.e.Reauthorize(context.Background(), "alice"); n != 0 || err != nil {
		t.Fatalf("nothing changed, yet Reauthorize ended %d (%v)", n, err)
	}
	mu.Lock()
	delete(members, "alice/p8")
	mu.Unlock()
	if n, err := a.e.Reauthorize(context.Background(), "alice"); n != 1 || err != nil {
		t.Fatalf("Reauthorize ended %d (%v), want 1", n, err)
	}
	if f := c.expect(core.FrameError); f.ID != "s8" || f.Code != core.CodeForbidden {
		t.Fatalf("got %+v", f)
	}
	_ = a.todos.Upsert(context.Background(), todo{"x", "p8", "no longer", false}, todo{"y", "p7", "still", false})
	if f := c.expect(core.FrameChanges); f.ID != "s7" || keys(f.Entries) != "u:y" {
		t.Fatalf("got %+v", f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.e.Reauthorize(ctx, "alice"); err == nil {
		t.Fatal("a cancelled Reauthorize reported success")
	}
	c.probe() // the cancelled check ended nothing
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
	ts := httptest.NewServer(middleware.Handler(e, middleware.WithPrincipal(headerPrincipal)))
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
	c.subscribe("s", "p7")
	snap, cursor := c.collect("s")
	if got := keys(snap); got != "u:a u:c" {
		t.Fatalf("snapshot %s", got)
	}

	up(ownTodo{"a", "p7", "bob", true})   // a becomes hidden: a delete
	up(ownTodo{"b", "p7", "bob", false})  // b becomes visible: an upsert
	_ = tbl.Delete(ctx, ownTodo{ID: "a"}) // deleting a hidden row: nothing
	up(ownTodo{"d", "p7", "bob", true})   // a new hidden row: a delete (harmless)
	_ = tbl.Delete(ctx, ownTodo{ID: "c"}) // deleting a visible row: a delete
	up(ownTodo{"c", "p8", "alice", true}) // back in another scope: nothing here
	want := "d:a u:b d:d d:c"
	var live []core.Entry
	for len(live) < 4 {
		live = append(live, c.expect(core.FrameChanges).Entries...)
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
	r.send(`{"v":1,"type":"subscribe","id":"r","resource":"todos","conditions":{"project_id":"p7"},"cursor":"` + cursor + `"}`)
	if got, _ := r.collect("r"); keys(got) != want {
		t.Fatalf("replay %s, want %s", keys(got), want)
	}
	b := s.dial(t, "bob", "p7")
	b.hello()
	b.subscribe("s", "p7")
	if got, _ := b.collect("s"); keys(got) != "u:b u:d" {
		t.Fatalf("bob's snapshot %s", keys(got))
	}
	// Polling goes through the same filter.
	bob := authz.Principal{ID: "bob", Claims: map[string]any{"projects": []string{"p7"}}}
	out, err := e.Poll(ctx, bob, core.PollRequest{V: 1, Resource: "todos", Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}})
	if err != nil {
		t.Fatal(err)
	}
	var page struct{ Entries []core.Entry }
	if err := json.Unmarshal(out, &page); err != nil || keys(page.Entries) != "u:b u:d" {
		t.Fatalf("bob's poll %s (%v)", out, err)
	}
	out, err = e.Poll(ctx, alice("p7"), core.PollRequest{V: 1, Resource: "todos", Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}, Cursor: cursor})
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
	ts := httptest.NewServer(middleware.Handler(e, middleware.WithPrincipal(headerPrincipal)))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		ts.Close()
	})
	s := &server{e: e, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
	c := s.dial(t, "u1")
	c.hello()
	for i, tt := range []struct {
		conds string
		code  core.Code
	}{
		{`{"nope":"x"}`, core.CodeInvalidConditions},
		{`{"title":"x"}`, core.CodeInvalidConditions},
		{`{"id":"x"}`, core.CodeInvalidConditions},
		{`{"org":7}`, core.CodeInvalidConditions},
		{`{"team":"seven"}`, core.CodeInvalidConditions},
		{`{"team":1.5}`, core.CodeInvalidConditions},
		{`{"team":"007"}`, core.CodeInvalidConditions},
		{`{"open":"true"}`, core.CodeInvalidConditions},
		{`{"org":{"in":[]}}`, core.CodeInvalidConditions},
		{`{"org":{"in":["a"],"or":["b"]}}`, core.CodeInvalidConditions},
		{`{"org":null}`, core.CodeInvalidConditions},
		{`{"org":["a"]}`, core.CodeInvalidConditions},
		{`{"org":{"in":["a","b","c","d","e","f"]}}`, core.CodeTooManyConditions},
	} {
		id := fmt.Sprintf("c%d", i)
		c.send(`{"v":1,"type":"subscribe","id":"` + id + `","resource":"items","conditions":` + tt.conds + `}`)
		if f := c.expect(core.FrameError); f.ID != id || f.Code != tt.code {
			t.Errorf("%s: got %+v, want %s", tt.conds, f, tt.code)
		}
	}
	mu.Lock()
	if len(seen) != 0 {
		t.Fatalf("the policy ran for invalid conditions: %v", seen)
	}
	mu.Unlock()
	c.send(`{"v":1,"type":"subscribe","id":"ok","resource":"items","conditions":{"org":{"in":["b","a","b"]},"team":"9007199254740993","open":false}}`)
	c.collect("ok")
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]string{"org": {"a", "b"}, "team": {"9007199254740993"}, "open": {"false"}}
	if len(seen) != 1 || fmt.Sprint(seen[0]) != fmt.Sprint(want) {
		t.Fatalf("the policy saw %v, want %v", seen, want)
	}
}
