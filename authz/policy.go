package authz

import (
	"context"
	"errors"
)

// Request is what a policy decides on: who asks for which scope.
type Request struct {
	Principal Principal
	Resource  string
	// Conditions maps each conditioned scope column to its allowed values in
	// canonical text (one value for equality, several for "in"). Columns
	// without a condition are absent: the subscription covers all their
	// values.
	Conditions map[string][]string
}

// Policy decides whether a subscription may proceed. It returns nil to allow.
// Any error denies; ErrUnauthenticated and ErrForbidden (or errors wrapping
// them) select the wire error code, any other error is reported as an internal
// error and still denies. A policy may block (for a database lookup) and must
// honour ctx.
type Policy func(ctx context.Context, r Request) error

// Errors a policy returns to deny.
var (
	// ErrUnauthenticated denies because the caller is anonymous or its
	// credentials are not valid. Clients see the code "unauthenticated".
	ErrUnauthenticated = errors.New("authz: authentication required")
	// ErrForbidden denies an authenticated caller. Clients see "forbidden".
	ErrForbidden = errors.New("authz: forbidden")
)

// Allow is a policy that allows every subscription, anonymous ones included.
// It suits demos and public data; it is never a default.
func Allow(context.Context, Request) error { return nil }

// Authenticated allows any principal that is not anonymous.
func Authenticated(_ context.Context, r Request) error {
	if r.Principal.IsAnonymous() {
		return ErrUnauthenticated
	}
	return nil
}
