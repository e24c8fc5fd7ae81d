// Package authz decides who may see what: the principal an app's auth hook
// produces, and the scope policies every subscription must pass.
//
// tide denies by default. A resource without a policy cannot be subscribed
// to, and a policy that returns any error denies. Policies see the
// subscription's conditions already validated against the resource's scope
// columns, as canonical text, so a policy compares strings, never parses
// client input.
//
//	authorize := func(ctx context.Context, r authz.Request) error {
//		if r.Principal.IsAnonymous() {
//			return authz.ErrUnauthenticated
//		}
//		return nil
//	}
//
// Package authz depends on nothing else in tide; core calls into it.
package authz
