package middleware_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// failingHijacker has a Hijack method that fails, like a framework's
// writer around an http.TimeoutHandler.
type failingHijacker struct{ *httptest.ResponseRecorder }

func (failingHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("feature not supported")
}

// TestUpgradeErrors: every refused upgrade is answered with an error frame;
// a Hijack that fails names the cause.
func TestUpgradeErrors(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	h := middleware.Middleware(e)(http.NotFoundHandler())
	upgrade := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/tide/ws", nil)
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Sec-WebSocket-Version", "13")
		r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		return r
	}
	for _, c := range []struct {
		name   string
		w      *httptest.ResponseRecorder
		serve  func(w *httptest.ResponseRecorder)
		status int
		code   protocol.Code
		msg    string
	}{
		{"hijack fails", httptest.NewRecorder(), func(w *httptest.ResponseRecorder) { h.ServeHTTP(failingHijacker{w}, upgrade()) },
			http.StatusInternalServerError, protocol.CodeInternal, "cannot be hijacked for a WebSocket upgrade: remove timeout, gzip"},
		{"no Hijack method", httptest.NewRecorder(), func(w *httptest.ResponseRecorder) { h.ServeHTTP(w, upgrade()) },
			http.StatusInternalServerError, protocol.CodeInternal, "cannot be hijacked"},
		{"not an upgrade", httptest.NewRecorder(), func(w *httptest.ResponseRecorder) {
			h.ServeHTTP(failingHijacker{w}, httptest.NewRequest(http.MethodGet, "/tide/ws", nil))
		}, http.StatusBadRequest, protocol.CodeBadFrame, "websocket"},
	} {
		c.serve(c.w)
		f, err := protocol.DecodeServerFrame(c.w.Body.Bytes())
		if c.w.Code != c.status || err != nil || f.Code != c.code || !strings.Contains(f.Message, c.msg) {
			t.Errorf("%s: %d %s", c.name, c.w.Code, c.w.Body)
		}
	}
}

// TestRoutes: Middleware serves exactly its routes and passes every other
// path to the app.
func TestRoutes(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	var reached bool
	h := middleware.Middleware(e, middleware.WithPrefix("/sync/"))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	for path, tide := range map[string]bool{"/sync/ws": true, "/sync/changes": true, "/sync/mutate": true, "/sync/client.js": true,
		"/sync/token": false, "/sync/status": false, "/tide/ws": false, "/sync": false, "/sync/": false} {
		reached = false
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
		if reached == tide {
			t.Errorf("%s: reached the app = %v", path, reached)
		}
	}
}
