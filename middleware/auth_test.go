package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
}

// sessionPrincipal stands in for an app's session middleware: the cookie
// "session" names the user, who belongs to project p7.
func sessionPrincipal(r *http.Request) (authz.Principal, error) {
	c, err := r.Cookie("session")
	if err != nil {
		return authz.Anonymous, nil
	}
	return authz.Principal{ID: c.Value, Claims: map[string]any{"projects": []string{"p7"}}}, nil
}

type env struct {
	e   *core.Engine
	kr  *authz.Keyring
	srv *httptest.Server
	ws  string // ws:// URL of the WebSocket endpoint
}

func newEnv(t *testing.T, opts ...middleware.Option) *env {
	t.Helper()
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Tokens: kr})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Upsert(context.Background(), todo{"t1", "p7", "secret"}); err != nil {
		t.Fatal(err)
	}
	app := http.NewServeMux()
	app.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "app") })
	opts = append([]middleware.Option{middleware.WithPrincipal(sessionPrincipal), middleware.WithTokenEndpoint(kr)}, opts...)
	srv := httptest.NewServer(middleware.Middleware(e, opts...)(app))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		srv.Close()
	})
	return &env{e: e, kr: kr, srv: srv, ws: "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"}
}

// dial upgrades with the session cookie and the given Origin ("" for none).
func (v *env) dial(t *testing.T, origin string) (*tidetest.Conn, *http.Response, error) {
	t.Helper()
	opts := []tidetest.Option{tidetest.WithHeader("Cookie", "session=alice")}
	if origin != "" {
		opts = append(opts, tidetest.WithHeader("Origin", origin))
	}
	return tidetest.TryDial(t, v.ws, opts...)
}

// subscribeP7 proves the connection speaks for alice: her project's row
// arrives.
func subscribeP7(t *testing.T, c *tidetest.Conn, hello protocol.ClientFrame) {
	t.Helper()
	c.Send(tidetest.HelloFrame(hello))
	c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
	c.Expect(protocol.FrameWelcome)
	if f := c.Expect(protocol.FrameChanges); len(f.Entries) != 1 || f.Entries[0].Key != "t1" {
		t.Fatalf("got %+v", f)
	}
}

func errorBody(t *testing.T, resp *http.Response) protocol.ServerFrame {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f, err := protocol.DecodeServerFrame(body)
	if err != nil || f.Type != protocol.FrameError {
		t.Fatalf("body %q is not an error frame (%v)", body, err)
	}
	return f
}

// TestCrossOriginUpgrade: a page on another site cannot open a socket with
// the user's cookie (cross-site WebSocket hijacking), unless the app lists
// its origin.
func TestCrossOriginUpgrade(t *testing.T) {
	v := newEnv(t)
	host := strings.TrimPrefix(v.srv.URL, "http://")

	_, resp, err := v.dial(t, "https://evil.example")
	if err == nil {
		t.Fatal("a cross-origin upgrade with the session cookie was accepted")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("got %v, %v", resp, err)
	}
	if f := errorBody(t, resp); f.Code != protocol.CodeForbidden {
		t.Fatalf("error %+v", f)
	}
	for _, origin := range []string{"null", "http://" + host + ".evil.example", "http://evil.example/" + host} {
		if _, resp, err := v.dial(t, origin); err == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("origin %q: %v", origin, err)
		}
	}

	// Same origin, and non-browser clients (no Origin header), are served.
	for _, origin := range []string{"http://" + host, "HTTP://" + strings.ToUpper(host), ""} {
		c, _, err := v.dial(t, origin)
		if err != nil {
			t.Fatalf("origin %q refused: %v", origin, err)
		}
		subscribeP7(t, c, protocol.ClientFrame{})
		c.Close()
	}

	// The app allows its front end's origin.
	v = newEnv(t, middleware.WithAllowedOrigins("https://app.example", "http://localhost:5173/"))
	for _, origin := range []string{"https://app.example", "https://APP.example:443", "http://localhost:5173"} {
		c, _, err := v.dial(t, origin)
		if err != nil {
			t.Fatalf("allowed origin %q refused: %v", origin, err)
		}
		subscribeP7(t, c, protocol.ClientFrame{})
		c.Close()
	}
	for _, origin := range []string{"http://app.example", "https://app.example:8443", "https://evil.example"} {
		if _, resp, err := v.dial(t, origin); err == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("origin %q: %v", origin, err)
		}
	}
}

func TestWithAllowedOriginsPanicsOnMalformed(t *testing.T) {
	for _, bad := range []string{"app.example", "https://app.example/path", "https://u@app.example", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q accepted", bad)
				}
			}()
			middleware.Middleware(nil, middleware.WithAllowedOrigins(bad))(http.NotFoundHandler())
		}()
	}
}

// TestCrossOriginPoll: the polling endpoint is as safe as the socket.
func TestCrossOriginPoll(t *testing.T) {
	v := newEnv(t)
	poll := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, v.srv.URL+"/tide/changes",
			strings.NewReader(`{"v":1,"resource":"todos","conditions":{"project_id":"p7"}}`))
		req.Header.Set("Cookie", "session=alice")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := poll("https://evil.example")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin poll: %d", resp.StatusCode)
	}
	if f := errorBody(t, resp); f.Code != protocol.CodeForbidden {
		t.Fatalf("error %+v", f)
	}
	for _, origin := range []string{"", v.srv.URL} {
		resp := poll(origin)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"t1"`) {
			t.Fatalf("origin %q: %d %s", origin, resp.StatusCode, body)
		}
	}
}

// TestTokenEndpoint: the endpoint mints a token for the session's user;
// the token opens a socket with no cookie at all.
func TestTokenEndpoint(t *testing.T) {
	v := newEnv(t, middleware.WithTokenTTL(2*time.Minute))
	post := func(cookie, origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, v.srv.URL+"/tide/token", nil)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	resp := post("", "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous: %d", resp.StatusCode)
	}
	if f := errorBody(t, resp); f.Code != protocol.CodeUnauthenticated {
		t.Fatalf("anonymous: %+v", f)
	}
	if resp := post("session=alice", "https://evil.example"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin: %d", resp.StatusCode)
	}
	get, err := http.Get(v.srv.URL + "/tide/token")
	if err != nil {
		t.Fatal(err)
	}
	if get.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", get.StatusCode)
	}

	resp = post("session=alice", v.srv.URL)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("status %d, Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	var tr middleware.TokenResponse
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if tr.ExpiresIn != 120 || tr.Token == "" {
		t.Fatalf("response %+v", tr)
	}
	tok, err := v.kr.Parse(tr.Token)
	if err != nil || tok.Principal.ID != "alice" || !tok.Expiry.Equal(tr.ExpiresAt) {
		t.Fatalf("token %+v (%v)", tok, err)
	}

	c := tidetest.Dial(t, v.ws) // no cookie
	subscribeP7(t, c, protocol.ClientFrame{Token: tr.Token})

	// The app's own routes are untouched.
	r, err := http.Get(v.srv.URL + "/tide/elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(body) != "app" {
		t.Fatalf("app route answered %q", body)
	}
}

// TestTokenHandlerGrants: a standalone token handler restricts its tokens
// with WithTokenGrants.
func TestTokenHandlerGrants(t *testing.T) {
	kr, _ := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k", Secret: bytes.Repeat([]byte{9}, 32)}})
	h := middleware.TokenHandler(kr, middleware.WithPrincipal(sessionPrincipal),
		middleware.WithTokenGrants(func(r *http.Request, p authz.Principal) ([]authz.Grant, error) {
			return []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": {"p7"}}}}, nil
		}))
	req := httptest.NewRequest(http.MethodPost, "/anywhere", nil)
	req.Header.Set("Cookie", "session=bob")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var tr middleware.TokenResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &tr); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if tr.ExpiresIn != int(middleware.DefaultTokenTTL/time.Second) {
		t.Fatalf("default TTL: %d", tr.ExpiresIn)
	}
	tok, err := kr.Parse(tr.Token)
	if err != nil || tok.Principal.ID != "bob" || len(tok.Principal.Grants) != 1 || tok.Principal.Grants[0].Resource != "todos" {
		t.Fatalf("%+v %v", tok, err)
	}
}

// TestTokenHandlerClaims: WithTokenClaims replaces the claims a token
// carries (nil: none) and may refuse with 403; the grants hook still sees
// the session's full claims; without it a token carries them all.
func TestTokenHandlerClaims(t *testing.T) {
	kr, _ := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k", Secret: bytes.Repeat([]byte{9}, 32)}})
	var grantsSaw []string
	grants := middleware.WithTokenGrants(func(r *http.Request, p authz.Principal) ([]authz.Grant, error) {
		grantsSaw = p.Strings("projects")
		return nil, nil
	})
	cases := []struct {
		name   string
		claims middleware.ClaimsFunc // nil: no WithTokenClaims
		status int
		want   string // the token's claims as JSON
	}{
		{"all claims by default", nil, http.StatusOK, `{"projects":["p7"]}`},
		{"narrowed", func(*http.Request, authz.Principal) (map[string]any, error) {
			return map[string]any{"role": "viewer"}, nil
		}, http.StatusOK, `{"role":"viewer"}`},
		{"none", func(*http.Request, authz.Principal) (map[string]any, error) { return nil, nil }, http.StatusOK, `null`},
		{"refused", func(*http.Request, authz.Principal) (map[string]any, error) {
			return nil, errors.New("no share links for this user")
		}, http.StatusForbidden, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := []middleware.Option{middleware.WithPrincipal(sessionPrincipal), grants}
			if tc.claims != nil {
				opts = append(opts, middleware.WithTokenClaims(tc.claims))
			}
			grantsSaw = nil
			req := httptest.NewRequest(http.MethodPost, "/anywhere", nil)
			req.Header.Set("Cookie", "session=bob")
			rec := httptest.NewRecorder()
			middleware.TokenHandler(kr, opts...).ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if len(grantsSaw) != 1 || grantsSaw[0] != "p7" {
				t.Fatalf("the grants hook saw projects %v", grantsSaw)
			}
			if tc.status != http.StatusOK {
				if !strings.Contains(rec.Body.String(), "no share links") {
					t.Fatalf("body %s", rec.Body)
				}
				return
			}
			var tr middleware.TokenResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &tr); err != nil {
				t.Fatal(err)
			}
			tok, err := kr.Parse(tr.Token)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(tok.Principal.Claims); string(got) != tc.want || tok.Principal.ID != "bob" {
				t.Fatalf("token %s claims %s, want %s", tok.Principal.ID, got, tc.want)
			}
		})
	}
}
