package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Request is what a policy decides on: who asks for which scope.
type Request struct {
	Principal Principal // who asks; authz.Anonymous if the app did not authenticate the caller
	Resource  string    // the resource's wire name
	// Conditions maps each conditioned scope column to its allowed values in
	// canonical text (one value for equality, several for "in"), sorted and
	// free of duplicates. Columns without a condition are absent: the
	// subscription covers all their values. The map is the policy's to read,
	// never to modify.
	Conditions map[string][]string
}

// Policy decides whether a subscription may proceed. It returns nil to allow.
// Any error denies; ErrUnauthenticated and ErrForbidden (or errors wrapping
// them) select the wire error code, any other error is reported to the client
// as "unavailable" (retry later) and still denies. A policy may block (for a
// database lookup) and must honour ctx.
//
// tide runs a resource's policy once per subscribe (and per poll request),
// never per change of the subscription's rows. A decision that depends on
// data which can change while a subscription lives must be re-checked: when
// that data is a synced resource, declare it (core's Resource.DependsOn) and
// tide re-runs the policy when it changes; otherwise call core's
// Engine.Reauthorize.
//
// Custom policies are plain functions; the helpers below build the common
// ones and combine them.
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

// RequireConditions allows a subscription only if it has a condition on each
// of the named scope columns, so a client cannot subscribe to a whole
// resource, or to every value of a tenant column. It checks nothing about the
// values; combine it with RequireClaim or ClaimEquals for that. Anonymous
// callers are not denied by it.
func RequireConditions(columns ...string) Policy {
	columns = slices.Clone(columns)
	return func(_ context.Context, r Request) error {
		for _, col := range columns {
			if len(r.Conditions[col]) == 0 {
				return fmt.Errorf("%w: a condition on %s is required", ErrForbidden, col)
			}
		}
		return nil
	}
}

// RequireClaim allows a subscription whose condition on column exists and
// whose every value is in the principal's claim (a list, or a single value;
// see Principal.Strings). It is the multi-tenant rule "a user sees the
// projects it belongs to":
//
//	Authorize: authz.RequireClaim("project_id", "projects")
//
// A subscription without a condition on column is forbidden, as is one with
// an "in" list holding any value outside the claim. Anonymous callers get
// ErrUnauthenticated.
func RequireClaim(column, claim string) Policy {
	return func(_ context.Context, r Request) error {
		if r.Principal.IsAnonymous() {
			return ErrUnauthenticated
		}
		want := r.Conditions[column]
		if len(want) == 0 {
			return fmt.Errorf("%w: a condition on %s is required", ErrForbidden, column)
		}
		have := r.Principal.Strings(claim)
		for _, v := range want {
			if !slices.Contains(have, v) {
				return fmt.Errorf("%w: %s %q is not in the caller's %s", ErrForbidden, column, v, claim)
			}
		}
		return nil
	}
}

// ClaimEquals allows a subscription whose condition on column exists and
// whose every value equals the principal's claim, which must be a single
// value (per-user scopes: ClaimEquals("owner_id", "user_id")). An "in" list
// passes only if all its values are that one value. A missing or list-valued
// claim forbids. Anonymous callers get ErrUnauthenticated.
func ClaimEquals(column, claim string) Policy {
	return func(_ context.Context, r Request) error {
		if r.Principal.IsAnonymous() {
			return ErrUnauthenticated
		}
		want := r.Conditions[column]
		if len(want) == 0 {
			return fmt.Errorf("%w: a condition on %s is required", ErrForbidden, column)
		}
		have := r.Principal.Strings(claim)
		if len(have) != 1 {
			return fmt.Errorf("%w: the caller has no single %s", ErrForbidden, claim)
		}
		for _, v := range want {
			if v != have[0] {
				return fmt.Errorf("%w: %s %q is not the caller's %s", ErrForbidden, column, v, claim)
			}
		}
		return nil
	}
}

// HasClaim allows a principal whose claim holds value, whatever the
// subscription's conditions: the building block for "admins see every
// scope":
//
//	authz.Any(authz.HasClaim("role", "admin"), authz.RequireClaim("org_id", "orgs"))
//
// Anonymous callers get ErrUnauthenticated.
func HasClaim(claim, value string) Policy {
	return func(_ context.Context, r Request) error {
		if r.Principal.IsAnonymous() {
			return ErrUnauthenticated
		}
		if !slices.Contains(r.Principal.Strings(claim), value) {
			return fmt.Errorf("%w: the caller's %s does not include %q", ErrForbidden, claim, value)
		}
		return nil
	}
}

// All allows a subscription only if every policy allows it. The policies run
// in order and the first denial is returned, so put cheap checks before ones
// that query a database. All() with no policies, and a nil policy among
// them, deny.
func All(policies ...Policy) Policy {
	policies = slices.Clone(policies)
	return func(ctx context.Context, r Request) error {
		if len(policies) == 0 {
			return fmt.Errorf("%w: empty All policy", ErrForbidden)
		}
		for _, p := range policies {
			if p == nil {
				return fmt.Errorf("%w: nil policy", ErrForbidden)
			}
			if err := p(ctx, r); err != nil {
				return err
			}
		}
		return nil
	}
}

// Any allows a subscription if at least one policy allows it. The policies
// run in order until one allows. When all deny, the result is chosen so the
// client does the right thing: an error that is not a denial (a database
// outage: the client retries) wins over ErrUnauthenticated (logging in may
// satisfy one of the policies), which wins over ErrForbidden. Any() with no
// policies denies; a nil policy is skipped as a denial.
func Any(policies ...Policy) Policy {
	policies = slices.Clone(policies)
	return func(ctx context.Context, r Request) error {
		var unauth, forbidden, other error
		for _, p := range policies {
			if p == nil {
				continue
			}
			err := p(ctx, r)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, ErrForbidden):
				forbidden = cmpOr(forbidden, err)
			case errors.Is(err, ErrUnauthenticated):
				unauth = cmpOr(unauth, err)
			default:
				other = cmpOr(other, err)
				if ctx.Err() != nil {
					return err
				}
			}
		}
		switch {
		case other != nil:
			return other
		case unauth != nil:
			return unauth
		case forbidden != nil:
			return forbidden
		}
		return fmt.Errorf("%w: empty Any policy", ErrForbidden)
	}
}

// cmpOr returns the first non-nil error.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
