package adaptertest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// Run runs the conformance cases against the app build makes, each as a
// parallel subtest with its own App, over a real HTTP server on loopback.
// An adapter's test calls it once:
//
//	func TestConformance(t *testing.T) { adaptertest.Run(t, buildApp) }
func Run(t *testing.T, build Factory) {
	timeout := func(h http.Handler) http.Handler { return http.TimeoutHandler(h, time.Minute, "timed out") }
	cases := []struct {
		name string
		wrap func(http.Handler) http.Handler // around the app, if not nil
		run  func(*testing.T, *server)
	}{
		{"TokenAnonymousRefused", nil, testTokenAnonymous},
		{"TokenForSession", nil, testTokenForSession},
		{"SubscribeWithCookie", nil, testSubscribeCookie},
		{"SubscribeWithToken", nil, testSubscribeToken},
		{"ReplayAfterCursor", nil, testReplay},
		{"GoClient", nil, testGoClient},
		{"Poll", nil, testPoll},
		{"PassThrough", nil, testPassThrough},
		{"EarlierMiddlewareRefuses", nil, testBanned},
		{"PrincipalFixedAtUpgrade", nil, testPrincipalFixed},
		{"CrossOrigin", nil, testCrossOrigin},
		{"NotHijackable", timeout, testNotHijackable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, start(t, build, c.wrap))
		})
	}
}

// testTokenAnonymous: a visitor without a session gets no token.
func testTokenAnonymous(t *testing.T, s *server) {
	resp := s.do(s.browser(""), http.MethodPost, "/tide/token", nil, nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous token request: %d, want 401", resp.StatusCode)
	}
	if f := errorFrame(t, resp); f.Code != protocol.CodeUnauthenticated {
		t.Fatalf("anonymous token request: %+v", f)
	}
}

// testTokenForSession: the app's login is tide's login: the session cookie
// its login route set gets a token for the user.
func testTokenForSession(t *testing.T, s *server) {
	tok, err := s.app.keyring.Parse(s.token(s.browser("alice")))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Principal.ID != "alice" || !slices.Equal(tok.Principal.Strings("projects"), []string{"p7"}) {
		t.Fatalf("token principal %+v, want alice with projects [p7]", tok.Principal)
	}
}

// testSubscribeCookie: over a WebSocket with the session cookie the user
// gets the snapshot and live changes of their scope, and nothing else.
func testSubscribeCookie(t *testing.T, s *server) {
	ws := s.dial(s.browser("alice"), http.Header{"Origin": {s.url}})
	ws.hello("")
	if entries, _ := ws.subscribe("a", "p7", ""); !sameKeys(entries, "upsert t1") {
		t.Fatalf("snapshot %v, want t1", entries)
	}
	if f := ws.subscribeErr("b", "p8"); f.Code != protocol.CodeForbidden {
		t.Fatalf("another user's project: %+v, want forbidden", f)
	}
	s.upsert(t, todo{"b2", "p8", "not alice's"}, todo{"t2", "p7", "live"})
	if f := ws.next(); f.Type != protocol.FrameChanges || f.ID != "a" || !sameKeys(f.Entries, "upsert t2") {
		t.Fatalf("live change: %+v, want t2 on a", f)
	}

	// The upgrade's request ended at tide (an Echo error returned after it
	// would be written onto the hijacked connection and reach the app's
	// error handler). It ended before the welcome above, in practice.
	if s.app.sawPath("/tide/ws") {
		t.Fatal("the upgrade request went on past tide")
	}

	anon := s.dial(s.browser(""), nil)
	anon.hello("")
	if f := anon.subscribeErr("a", "p7"); f.Code != protocol.CodeUnauthenticated {
		t.Fatalf("anonymous subscribe: %+v, want unauthenticated", f)
	}
}

// testSubscribeToken: a token from the endpoint opens a socket with no
// cookie at all; a forged one is refused.
func testSubscribeToken(t *testing.T, s *server) {
	tok := s.token(s.browser("alice"))
	ws := s.dial(s.browser(""), nil)
	ws.hello(tok)
	if entries, _ := ws.subscribe("a", "p7", ""); !sameKeys(entries, "upsert t1") {
		t.Fatalf("snapshot %v, want t1", entries)
	}

	forged := s.dial(s.browser(""), nil)
	forged.sendHello(tok[:len(tok)-4] + "AAAA")
	if f := forged.next(); f.Type != protocol.FrameError || f.Code != protocol.CodeUnauthenticated {
		t.Fatalf("forged token: %+v, want unauthenticated", f)
	}
}

// testReplay: resubscribing with a cursor replays exactly what changed
// after it.
func testReplay(t *testing.T, s *server) {
	alice := s.browser("alice")
	ws := s.dial(alice, nil)
	ws.hello("")
	_, cursor := ws.subscribe("a", "p7", "")
	ws.ws.Close()

	s.upsert(t, todo{"t3", "p7", "while away"})
	if err := s.app.todos.Delete(context.Background(), todo{ID: "t1", ProjectID: "p7"}); err != nil {
		t.Fatal(err)
	}
	ws = s.dial(alice, nil)
	ws.hello("")
	if entries, _ := ws.subscribe("a", "p7", cursor); !sameKeys(entries, "upsert t3", "delete t1") {
		t.Fatalf("replay after %s: %v, want t3 upserted and t1 deleted", cursor, entries)
	}
}

// testGoClient: tide's Go client, with the app's session cookie, keeps a
// copy of the scope.
func testGoClient(t *testing.T, s *server) {
	alice := s.browser("alice")
	u, _ := url.Parse(s.url)
	var cookies []string
	for _, c := range alice.Jar.Cookies(u) {
		cookies = append(cookies, c.String())
	}
	c, err := client.New(client.Config{URL: s.ws, Header: http.Header{"Cookie": cookies}})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Sync(client.Scope{Resource: "todos", Conditions: map[string]any{"project_id": "p7"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // bounds a broken test only
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	wait := func(what, key string) {
		for {
			changed := sub.Changed()
			if sub.Rows()[key] != nil {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("%s: %v (rows %v, err %v)", what, ctx.Err(), sub.Rows(), sub.Err())
			}
		}
	}
	wait("snapshot", "t1")
	s.upsert(t, todo{"t4", "p7", "pushed"})
	wait("live change", "t4")
	if rows := sub.Rows(); len(rows) != 2 {
		t.Fatalf("rows %v, want t1 and t4", rows)
	}
}

// testPoll: the polling endpoint serves a logged-in user's scope with 200.
func testPoll(t *testing.T, s *server) {
	body := `{"v":1,"resource":"todos","conditions":{"project_id":"p7"}}`
	resp := s.do(s.browser("alice"), http.MethodPost, "/tide/changes", strings.NewReader(body), nil)
	got := readBody(t, resp)
	f, err := protocol.DecodeServerFrame([]byte(got))
	if resp.StatusCode != http.StatusOK || err != nil || f.Type != protocol.FrameChanges || !sameKeys(f.Entries, "upsert t1") {
		t.Fatalf("poll: %d %s (%v)", resp.StatusCode, got, err)
	}
	resp = s.do(s.browser(""), http.MethodPost, "/tide/changes", strings.NewReader(body), nil)
	if f := errorFrame(t, resp); resp.StatusCode != http.StatusUnauthorized || f.Code != protocol.CodeUnauthenticated {
		t.Fatalf("anonymous poll: %d %+v", resp.StatusCode, f)
	}
}

// testPassThrough: the app's own routes, statuses, headers and 404s are
// untouched, and tide's routes end at tide.
func testPassThrough(t *testing.T, s *server) {
	b := s.browser("")
	resp := s.do(b, http.MethodGet, "/teapot", nil, nil)
	if body := readBody(t, resp); resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-App") != "teapot" || body != "short and stout" {
		t.Fatalf("app route: %d %q %q", resp.StatusCode, resp.Header.Get("X-App"), body)
	}
	resp = s.do(b, http.MethodGet, "/tide/about", nil, nil)
	if body := readBody(t, resp); resp.StatusCode != http.StatusOK || body != "about" {
		t.Fatalf("app route under tide's prefix: %d %q", resp.StatusCode, body)
	}
	resp = s.do(b, http.MethodGet, "/origin", nil, http.Header{middleware.ClientOriginHeader: {"device-1"}})
	if body := readBody(t, resp); body != "device-1" {
		t.Fatalf("the app's write origin is %q, want device-1", body)
	}

	resp = s.do(b, http.MethodGet, "/nowhere", nil, nil)
	want := readBody(t, resp)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the app's 404: %d", resp.StatusCode)
	}
	for _, path := range []string{"/tide/nowhere", "/tide/ws/more", "/tide"} {
		resp := s.do(b, http.MethodGet, path, nil, nil)
		if body := readBody(t, resp); resp.StatusCode != http.StatusNotFound || body != want {
			t.Fatalf("%s: %d %q, want the app's own 404 %q", path, resp.StatusCode, body, want)
		}
	}

	// tide's routes answer and go no further down the app's chain.
	for _, r := range []struct {
		method, path string
		status       int
	}{
		{http.MethodPost, "/tide/token", http.StatusUnauthorized},
		{http.MethodGet, "/tide/ws", http.StatusBadRequest}, // not an upgrade
		{http.MethodGet, "/tide/changes", http.StatusMethodNotAllowed},
	} {
		resp := s.do(b, r.method, r.path, nil, nil)
		if f := errorFrame(t, resp); resp.StatusCode != r.status {
			t.Fatalf("%s %s: %d %+v, want %d", r.method, r.path, resp.StatusCode, f, r.status)
		}
		if s.app.sawPath(r.path) {
			t.Fatalf("%s %s went on past tide", r.method, r.path)
		}
	}
	for _, path := range []string{"/teapot", "/tide/about", "/nowhere", "/tide/nowhere"} {
		if !s.app.sawPath(path) {
			t.Fatalf("%s did not reach the app's last middleware", path)
		}
	}
}

// testBanned: middleware the app placed before tide still refuses tide's
// routes.
func testBanned(t *testing.T, s *server) {
	alice := s.browser("alice")
	banned := http.Header{RealIPHeader: {BannedIP}}
	_, resp, err := s.dialer(alice).Dial(s.ws, banned)
	if err == nil {
		t.Fatal("a banned address opened a socket")
	}
	if body := readBody(t, resp); resp.StatusCode != http.StatusForbidden || strings.TrimSpace(body) != "banned" {
		t.Fatalf("banned upgrade: %d %q", resp.StatusCode, body)
	}
	for _, path := range []string{"/tide/token", "/tide/changes"} {
		resp := s.do(alice, http.MethodPost, path, strings.NewReader("{}"), banned)
		if body := readBody(t, resp); resp.StatusCode != http.StatusForbidden || strings.TrimSpace(body) != "banned" {
			t.Fatalf("banned %s: %d %q", path, resp.StatusCode, body)
		}
	}
	if tok := s.token(alice); tok == "" { // the same session from an address that is not banned
		t.Fatal("no token")
	}
}

// testPrincipalFixedAtUpgrade: a socket speaks for the user who opened it,
// however many requests of other users the framework served since (with the
// pooled contexts its upgrade ran on).
func testPrincipalFixed(t *testing.T, s *server) {
	alice, bob := s.browser("alice"), s.browser("bob")
	wsA := s.dial(alice, nil)
	wsA.hello("")
	for range 20 {
		_ = s.token(bob)
		readBody(t, s.do(bob, http.MethodGet, "/teapot", nil, nil))
	}
	wsB := s.dial(bob, nil)
	wsB.hello("")
	if entries, _ := wsA.subscribe("a", "p7", ""); !sameKeys(entries, "upsert t1") {
		t.Fatalf("alice: %v", entries)
	}
	if f := wsA.subscribeErr("b", "p8"); f.Code != protocol.CodeForbidden {
		t.Fatalf("alice subscribing to bob's project: %+v", f)
	}
	if entries, _ := wsB.subscribe("b", "p8", ""); !sameKeys(entries, "upsert b1") {
		t.Fatalf("bob: %v", entries)
	}
}

// testCrossOrigin: another site cannot use the user's cookie; the origin
// the app lists can (options pass through the adapter).
func testCrossOrigin(t *testing.T, s *server) {
	alice := s.browser("alice")
	_, resp, err := s.dialer(alice).Dial(s.ws, http.Header{"Origin": {"https://evil.example"}})
	if err == nil {
		t.Fatal("a cross-site page opened a socket with the user's cookie")
	}
	if f := errorFrame(t, resp); resp.StatusCode != http.StatusForbidden || f.Code != protocol.CodeForbidden {
		t.Fatalf("cross-site upgrade: %d %+v", resp.StatusCode, f)
	}
	resp = s.do(alice, http.MethodPost, "/tide/token", nil, http.Header{"Origin": {"https://evil.example"}})
	if f := errorFrame(t, resp); resp.StatusCode != http.StatusForbidden || f.Code != protocol.CodeForbidden {
		t.Fatalf("cross-site token request: %d %+v", resp.StatusCode, f)
	}
	ws := s.dial(alice, http.Header{"Origin": {AllowedOrigin}})
	ws.hello("")
	if entries, _ := ws.subscribe("a", "p7", ""); !sameKeys(entries, "upsert t1") {
		t.Fatalf("allowed origin: %v", entries)
	}
}

// testNotHijackable: behind a writer that cannot be hijacked (the app is
// wrapped in http.TimeoutHandler), the upgrade
// is answered with an error naming the cause, and the rest of the app
// works.
func testNotHijackable(t *testing.T, s *server) {
	alice := s.browser("alice")
	_, resp, err := s.dialer(alice).Dial(s.ws, nil)
	if err == nil {
		t.Fatal("upgraded through http.TimeoutHandler")
	}
	f := errorFrame(t, resp)
	if resp.StatusCode != http.StatusInternalServerError || f.Code != protocol.CodeInternal || !strings.Contains(f.Message, "cannot be hijacked") {
		t.Fatalf("upgrade through a writer that cannot hijack: %d %+v", resp.StatusCode, f)
	}
	if tok := s.token(alice); tok == "" {
		t.Fatal("no token")
	}
	resp = s.do(alice, http.MethodGet, "/teapot", nil, nil)
	if readBody(t, resp); resp.StatusCode != http.StatusTeapot {
		t.Fatalf("app route: %d", resp.StatusCode)
	}
}

// token gets a token from the endpoint with b's session, as a same-origin
// page would.
func (s *server) token(b *http.Client) string {
	s.t.Helper()
	resp := s.do(b, http.MethodPost, "/tide/token", nil, http.Header{"Origin": {s.url}})
	body := readBody(s.t, resp)
	var tr middleware.TokenResponse
	if err := json.Unmarshal([]byte(body), &tr); resp.StatusCode != http.StatusOK || err != nil || tr.Token == "" {
		s.t.Fatalf("token for a session: %d %s (%v)", resp.StatusCode, body, err)
	}
	return tr.Token
}

func (s *server) upsert(t *testing.T, rows ...todo) {
	t.Helper()
	if err := s.app.todos.Upsert(context.Background(), rows...); err != nil {
		t.Fatal(err)
	}
}

// errorFrame reads resp's body as a tide error frame.
func errorFrame(t *testing.T, resp *http.Response) protocol.ServerFrame {
	t.Helper()
	body := readBody(t, resp)
	f, err := protocol.DecodeServerFrame([]byte(body))
	if err != nil || f.Type != protocol.FrameError {
		t.Fatalf("%d %q is not an error frame (%v)", resp.StatusCode, body, err)
	}
	return f
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameKeys reports whether entries are exactly want, each "op key", in order.
func sameKeys(entries []protocol.Entry, want ...string) bool {
	got := make([]string, len(entries))
	for i, e := range entries {
		got[i] = e.Op + " " + e.Key
	}
	return slices.Equal(got, want)
}
