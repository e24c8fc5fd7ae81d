package middleware

import (
	"net/http"
	"unicode/utf8"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

// ClientOriginHeader is the request header in which a client names its
// client origin: the id of its device (hello's origin on a WebSocket).
// Middleware puts it in the context of every request it passes to the app,
// so the app's writes made for that request carry it (tide.Begin,
// core.Table) and the device skips their echo. On POST <prefix>/mutate it
// scopes the mutation's key (an anonymous caller must send it), and on
// POST <prefix>/changes it names the poller's device: only entries of that
// device's writes carry their origin. It is unrelated to the browser's
// Origin header, which WithAllowedOrigins checks.
const ClientOriginHeader = "Tide-Origin"

// OriginHeader is the former name of ClientOriginHeader.
//
// Deprecated: use ClientOriginHeader. OriginHeader will be removed in the
// next release.
const OriginHeader = ClientOriginHeader

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

// Middleware returns net/http middleware that serves tide's routes (under
// the prefix, "/tide" unless WithPrefix says otherwise; see the package
// documentation) and passes every other request to next, with the client
// origin of its ClientOriginHeader, if any, in its context. It is the one
// line an app adds, after its session middleware:
//
//	handler = middleware.Middleware(engine, middleware.WithPrincipal(currentUser))(handler)
//
// The framework adapters (adapters/tideecho, tidegin, tidechi, tidehttp)
// are built on it. The returned middleware and the handlers it makes are
// safe for concurrent use.
func Middleware(e *core.Engine, opts ...Option) func(http.Handler) http.Handler {
	h := newHandler(e, buildOptions(opts))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h.owns(r) {
				h.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, withClientOrigin(r))
		})
	}
}

// withClientOrigin returns r with the client origin of its
// ClientOriginHeader, if any, in its context, so the app's writes made
// while serving it carry the origin.
func withClientOrigin(r *http.Request) *http.Request {
	origin := r.Header.Get(ClientOriginHeader)
	if origin == "" || len(origin) > protocol.MaxOriginLen {
		return r
	}
	return r.WithContext(core.WithOrigin(r.Context(), origin))
}
