package middleware_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	tidejs "github.com/tidesync/tide/client/js"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// TestClientJS: the browser client is served at <prefix>/client.js as
// JavaScript with its content hash as ETag, immutable under ?v=<hash>,
// revalidated otherwise, 304 on a matching If-None-Match; the middleware
// owns the route.
func TestClientJS(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "app", http.StatusTeapot) })
	h := middleware.Middleware(e, middleware.WithPrefix("/sync"))(app)
	get := func(target string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	etag := `"` + tidejs.Hash + `"`

	w := get("/sync/client.js", nil)
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), tidejs.Module) || len(tidejs.Module) < 1000 {
		t.Fatalf("GET /sync/client.js: %d, %d bytes, want 200 with the %d-byte module", w.Code, w.Body.Len(), len(tidejs.Module))
	}
	if ct := w.Header().Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if got := w.Header().Get("ETag"); got != etag {
		t.Errorf("ETag %q, want %q", got, etag)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "public, max-age=60, must-revalidate" {
		t.Errorf("Cache-Control without ?v= %q", cc)
	}
	if !bytes.Contains(tidejs.Module, []byte("createClient")) {
		t.Error("the embedded module does not export createClient")
	}

	path := middleware.ClientJSPath("/sync")
	if path != "/sync/client.js?v="+tidejs.Hash {
		t.Errorf("ClientJSPath = %q", path)
	}
	w = get(path, nil)
	if cc := w.Header().Get("Cache-Control"); w.Code != http.StatusOK || cc != "public, max-age=31536000, immutable" {
		t.Errorf("GET %s: %d, Cache-Control %q, want 200 immutable", path, w.Code, cc)
	}
	w = get("/sync/client.js?v=stale", nil)
	if cc := w.Header().Get("Cache-Control"); cc != "public, max-age=60, must-revalidate" {
		t.Errorf("another ?v= must not be immutable: %q", cc)
	}

	for _, inm := range []string{etag, `W/` + etag, `"other", ` + etag, "*"} {
		w = get("/sync/client.js", map[string]string{"If-None-Match": inm})
		if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
			t.Errorf("If-None-Match %s: %d with %d bytes, want 304 and no body", inm, w.Code, w.Body.Len())
		}
	}
	if w = get("/sync/client.js", map[string]string{"If-None-Match": `"other"`}); w.Code != http.StatusOK {
		t.Errorf("a stale If-None-Match: %d, want 200", w.Code)
	}
	r := httptest.NewRequest(http.MethodPost, "/sync/client.js", nil)
	pw := httptest.NewRecorder()
	h.ServeHTTP(pw, r)
	if pw.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", pw.Code)
	}
	if w = get("/client.js", nil); w.Code != http.StatusTeapot {
		t.Errorf("/client.js outside the prefix: %d, want the app's answer", w.Code)
	}

	reached := false
	mw := middleware.Middleware(e)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	if mw.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/tide/client.js", nil)); reached {
		t.Error("Middleware passes /tide/client.js to the app")
	}
}
