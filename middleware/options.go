package middleware

import (
	"net/http"
	"strings"

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
	prefix      string
	principal   PrincipalFunc
	checkOrigin func(*http.Request) bool
}

func buildOptions(opts []Option) options {
	o := options{prefix: "/tide"}
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

// WithCheckOrigin sets the WebSocket origin check. Zero value: the Origin
// header, when present, must name the request's own host, which blocks
// cross-site WebSocket hijacking of cookie sessions.
func WithCheckOrigin(fn func(*http.Request) bool) Option {
	return func(o *options) { o.checkOrigin = fn }
}
