package middleware

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tidesync/tide/authz"
)

// PrincipalFunc returns the principal of a request, from the app's existing
// session. Return authz.Anonymous and a nil error for a caller who is not
// logged in; return an error only when the session cannot be read, which
// refuses the request with 401.
type PrincipalFunc func(*http.Request) (authz.Principal, error)

// Option configures Handler and Middleware.
type Option func(*options)

type options struct {
	prefix         string
	principal      PrincipalFunc
	checkOrigin    func(*http.Request) bool
	allowedOrigins map[string]bool // normalized "scheme://host[:port]"
	keyring        *authz.Keyring  // non-nil: serve the token endpoint
	tokenTTL       time.Duration
	tokenGrants    GrantsFunc
	tokenClaims    ClaimsFunc
	status         *statusPage // non-nil: serve <prefix>/status (status.go)
}

func buildOptions(opts []Option) options {
	o := options{prefix: "/tide", tokenTTL: DefaultTokenTTL}
	for _, opt := range opts {
		opt(&o)
	}
	o.prefix = "/" + strings.Trim(o.prefix, "/")
	if o.principal == nil {
		o.principal = func(r *http.Request) (authz.Principal, error) {
			p, _ := authz.FromContext(r.Context())
			return p, nil
		}
	}
	return o
}

// WithPrefix sets the path under which tide's routes live. Zero value:
// "/tide".
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithPrincipal sets the hook that identifies the caller. Zero value: the
// principal stored in the request context with authz.NewContext, or
// anonymous.
func WithPrincipal(fn PrincipalFunc) Option { return func(o *options) { o.principal = fn } }

// WithCheckOrigin replaces the origin check of every tide endpoint (the
// WebSocket upgrade, polling, the token endpoint) with fn, which decides
// for every request, with or without an Origin header. Prefer
// WithAllowedOrigins: a check that lets any origin through with cookie
// sessions opens cross-site WebSocket hijacking. Zero value: see
// WithAllowedOrigins.
func WithCheckOrigin(fn func(*http.Request) bool) Option {
	return func(o *options) { o.checkOrigin = fn }
}

// WithAllowedOrigins lets browser pages from these origins, besides the
// app's own, use tide's endpoints with the caller's cookies. An origin is a
// scheme and host with an optional port, exactly as browsers send it:
// "https://app.example", "http://localhost:5173". Calling it again adds
// origins. A malformed origin panics when the handler is built, like a bad
// regexp in regexp.MustCompile.
//
// Zero value: same origin only. A request whose Origin header names the
// request's own host (compared case-insensitively, like gorilla/websocket's
// default) is allowed, any other Origin is refused with 403 "forbidden",
// and a request without an Origin header (a non-browser client, which
// carries no ambient cookies) is allowed. Behind a proxy that rewrites
// Host, list the public origin here.
func WithAllowedOrigins(origins ...string) Option {
	return func(o *options) {
		if o.allowedOrigins == nil {
			o.allowedOrigins = map[string]bool{}
		}
		for _, origin := range origins {
			n, err := normalizeOrigin(origin)
			if err != nil {
				panic(fmt.Sprintf("middleware: WithAllowedOrigins(%q): %v", origin, err))
			}
			o.allowedOrigins[n] = true
		}
	}
}

// DefaultTokenTTL is the lifetime of the tokens the token endpoint mints
// when WithTokenTTL is not given.
const DefaultTokenTTL = 10 * time.Minute

// WithTokenEndpoint serves POST <prefix>/token, which mints a channel
// token signed by kr for the caller's principal (see TokenHandler). Use the
// same keyring as the engine's Config.Tokens so the tokens verify. Zero
// value: no token endpoint.
func WithTokenEndpoint(kr *authz.Keyring) Option { return func(o *options) { o.keyring = kr } }

// WithTokenTTL sets the lifetime of minted tokens. Keep it short: a token
// cannot be taken back before it expires except by Engine.Revoke on every
// node. Zero value: DefaultTokenTTL (10 minutes).
func WithTokenTTL(ttl time.Duration) Option {
	return func(o *options) {
		if ttl > 0 {
			o.tokenTTL = ttl
		}
	}
}

// GrantsFunc returns the scopes a minted token is restricted to, for the
// request and its principal; nil or empty means unrestricted (the resource
// policies alone decide). An error refuses the request with 403.
type GrantsFunc func(r *http.Request, p authz.Principal) ([]authz.Grant, error)

// WithTokenGrants restricts the tokens the token endpoint mints (see
// GrantsFunc). Zero value: tokens carry no grants.
func WithTokenGrants(fn GrantsFunc) Option { return func(o *options) { o.tokenGrants = fn } }

// ClaimsFunc returns the claims a minted token carries, for the request and
// its principal (the session's, with all its claims), in place of the
// principal's own claims; nil or empty carries none. An error refuses the
// request with 403.
type ClaimsFunc func(r *http.Request, p authz.Principal) (map[string]any, error)

// WithTokenClaims narrows the claims of the tokens the token endpoint mints
// (see ClaimsFunc). A token is signed, not encrypted: whoever holds it can
// read its claims and grants, so a token given to someone else (a share
// link) should carry only the claims its grants' policies read. Zero
// value: tokens carry all the principal's claims.
func WithTokenClaims(fn ClaimsFunc) Option { return func(o *options) { o.tokenClaims = fn } }
