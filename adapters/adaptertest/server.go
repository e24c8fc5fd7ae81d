package adaptertest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core/protocol"
)

// server is one case's app on a loopback HTTP server.
type server struct {
	t   *testing.T
	app *App
	srv *httptest.Server
	url string // http://127.0.0.1:port
	ws  string // ws://127.0.0.1:port/tide/ws
}

// start serves the app build makes on loopback, wrapped in wrap if not nil.
//
// Every request the server handles has returned before the test ends: the
// server's Close does not wait for hijacked connections, so a WebSocket
// handler (and the framework's request logger, which calls t.Log after
// it) could otherwise still run after the test, racing with its end.
func start(t *testing.T, build Factory, wrap func(http.Handler) http.Handler) *server {
	t.Helper()
	var handlers sync.WaitGroup
	t.Cleanup(func() { // registered first, so it runs last: after the engine's shutdown has closed every socket
		done := make(chan struct{})
		go func() { handlers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute): // a real hang only
			t.Error("the app's handlers were still running a minute after the server closed")
			<-done
		}
	})
	app := newApp(t)
	h := build(t, app)
	if wrap != nil {
		h = wrap(h)
	}
	inner := h
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close) // before the engine's shutdown, which newApp registered first
	return &server{t: t, app: app, srv: srv, url: srv.URL, ws: "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"}
}

// browser returns an HTTP client with its own cookie jar, logged in as user
// through the app's login route unless user is "".
func (s *server) browser(user string) *http.Client {
	s.t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Transport: s.srv.Client().Transport, Jar: jar}
	if user == "" {
		return b
	}
	resp := s.do(b, http.MethodPost, "/login", strings.NewReader(url.Values{"user": {user}}.Encode()),
		http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})
	readBody(s.t, resp)
	u, _ := url.Parse(s.url)
	if resp.StatusCode != http.StatusNoContent || len(jar.Cookies(u)) == 0 {
		s.t.Fatalf("login as %s: %d, cookies %v", user, resp.StatusCode, jar.Cookies(u))
	}
	return b
}

// do sends a request with b and extra headers.
func (s *server) do(b *http.Client, method, path string, body io.Reader, h http.Header) *http.Response {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := b.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp
}

// dialer returns a WebSocket dialer sending b's cookies.
func (s *server) dialer(b *http.Client) *websocket.Dialer {
	return &websocket.Dialer{Jar: b.Jar, HandshakeTimeout: 30 * time.Second}
}

// dial opens a socket with b's cookies and extra headers.
func (s *server) dial(b *http.Client, h http.Header) *conn {
	s.t.Helper()
	ws, resp, err := s.dialer(b).Dial(s.ws, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		s.t.Fatalf("upgrade: %v (status %d)", err, status)
	}
	s.t.Cleanup(func() { ws.Close() })
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a broken test only
	return &conn{t: s.t, ws: ws}
}

// conn is a raw protocol connection, to check frames exactly.
type conn struct {
	t  *testing.T
	ws *websocket.Conn
}

func (c *conn) send(frame any) {
	c.t.Helper()
	b, err := json.Marshal(frame)
	if err == nil {
		err = c.ws.WriteMessage(websocket.TextMessage, b)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *conn) next() protocol.ServerFrame {
	c.t.Helper()
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	f, err := protocol.DecodeServerFrame(data)
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

func (c *conn) sendHello(token string) {
	c.t.Helper()
	frame := map[string]any{"v": protocol.Version, "type": protocol.FrameHello}
	if token != "" {
		frame["token"] = token
	}
	c.send(frame)
}

// hello sends hello, with token unless it is "", and expects welcome.
func (c *conn) hello(token string) {
	c.t.Helper()
	c.sendHello(token)
	if f := c.next(); f.Type != protocol.FrameWelcome {
		c.t.Fatalf("after hello: %+v, want welcome", f)
	}
}

func (c *conn) sendSubscribe(id, project, cursor string) {
	frame := map[string]any{"v": protocol.Version, "type": protocol.FrameSubscribe, "id": id,
		"resource": "todos", "conditions": map[string]any{"project_id": project}}
	if cursor != "" {
		frame["cursor"] = cursor
	}
	c.send(frame)
}

// subscribe subscribes and returns what arrives up to caught-up, and its
// cursor.
func (c *conn) subscribe(id, project, cursor string) ([]protocol.Entry, string) {
	c.t.Helper()
	c.sendSubscribe(id, project, cursor)
	var entries []protocol.Entry
	for {
		f := c.next()
		switch {
		case f.ID != id:
			c.t.Fatalf("subscribing %s: unexpected %+v", id, f)
		case f.Type == protocol.FrameChanges:
			entries = append(entries, f.Entries...)
		case f.Type == protocol.FrameCaughtUp:
			return entries, f.Cursor
		default:
			c.t.Fatalf("subscribing %s: %+v", id, f)
		}
	}
}

// subscribeErr subscribes and expects an error frame for the subscription.
func (c *conn) subscribeErr(id, project string) protocol.ServerFrame {
	c.t.Helper()
	c.sendSubscribe(id, project, "")
	f := c.next()
	if f.Type != protocol.FrameError || f.ID != id {
		c.t.Fatalf("subscribing %s: %+v, want an error", id, f)
	}
	return f
}
