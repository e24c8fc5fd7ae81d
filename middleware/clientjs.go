package middleware

import (
	"net/http"
	"strconv"
	"strings"

	tidejs "github.com/tidesync/tide/client/js"
)

// ClientJSPath returns the path of the browser client's module under the
// prefix with its content hash as ?v=, the form a page should import: the
// response may then be cached for a year.
func ClientJSPath(prefix string) string {
	if prefix == "" {
		prefix = "/tide"
	}
	return "/" + strings.Trim(prefix, "/") + "/client.js?v=" + tidejs.Hash
}

// serveClientJS serves the embedded browser client. Its ETag is its content
// hash; requested with ?v=<that hash> it is immutable, otherwise it is
// revalidated after a minute.
func serveClientJS(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the client module takes GET", http.StatusMethodNotAllowed)
		return
	}
	etag := `"` + tidejs.Hash + `"`
	hdr := w.Header()
	hdr.Set("ETag", etag)
	hdr.Set("Content-Type", "text/javascript; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	if r.URL.Query().Get("v") == tidejs.Hash {
		hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hdr.Set("Cache-Control", "public, max-age=60, must-revalidate")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatch(inm, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr.Set("Content-Length", strconv.Itoa(len(tidejs.Module)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(tidejs.Module)
}

// etagMatch reports whether an If-None-Match header names etag (or *).
func etagMatch(header, etag string) bool {
	for _, tag := range strings.Split(header, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if tag == "*" || tag == etag {
			return true
		}
	}
	return false
}
