package middleware

import (
	"net/http"
	"unicode/utf8"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
)

// OriginHeader is the request header a client sets to its origin id so the
// app's writes made for that request carry it (see core.WithOrigin). On
// POST <prefix>/mutate it scopes the mutation's key (an anonymous caller
// must send it), and on POST <prefix>/changes it names the poller's device:
// only entries of that device's writes carry their origin.
const OriginHeader = "Tide-Origin"

// PrincipalHeader is the response header of POST <prefix>/changes and POST
// <prefix>/mutate that names the caller's principal, as welcome does on a
// WebSocket, so a polling client can tell whose data it holds. It is
// absent for an anonymous caller. An id of printable ASCII characters
// other than "%" and space is sent as it is; any other id is sent
// percent-encoded (every byte outside that set as %XX), so that percent-
// decoding the value (decodeURIComponent, url.PathUnescape) always gives
// the id back. An id that is not valid UTF-8 is not sent.
const PrincipalHeader = "Tide-Principal"

// setPrincipalHeader sets PrincipalHeader for p (see its rule).
func setPrincipalHeader(h http.Header, p authz.Principal) {
	if v, ok := principalHeaderValue(p.ID); ok && !p.IsAnonymous() {
		h.Set(PrincipalHeader, v)
	}
}

// principalHeaderValue returns id as PrincipalHeader carries it, and
// false when it is not sent.
func principalHeaderValue(id string) (string, bool) {
	if id == "" || !utf8.ValidString(id) {
		return "", false
	}
	plain := func(c byte) bool { return c > ' ' && c < 0x7f && c != '%' }
	n := 0
	for i := 0; i < len(id); i++ {
		if !plain(id[i]) {
			n++
		}
	}
	if n == 0 {
		return id, true
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(id)+2*n)
	for i := 0; i < len(id); i++ {
		if c := id[i]; plain(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b), true
}

// Middleware returns net/http middleware that serves tide's routes and
// passes every other request to next untouched (apart from the origin, see
// OriginHeader). It is the one line an app adds:
//
//	handler = middleware.Middleware(engine, middleware.WithPrincipal(currentUser))(handler)
func Middleware(e *core.Engine, opts ...Option) func(http.Handler) http.Handler {
	h := newHandler(e, buildOptions(opts))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h.owns(r) {
				h.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, WithOrigin(r))
		})
	}
}

// WithOrigin returns r with the origin from its Tide-Origin header, if any,
// in its context, so core.Table writes made while serving it carry the
// origin. Middleware applies it to every request it passes through.
func WithOrigin(r *http.Request) *http.Request {
	origin := r.Header.Get(OriginHeader)
	if origin == "" || len(origin) > 128 {
		return r
	}
	return r.WithContext(core.WithOrigin(r.Context(), origin))
}
