// Package authz decides who may see what: the principal an app's auth hook
// produces, the scope policies every subscription must pass, the row
// filters that narrow what a principal sees inside a scope, and the channel
// tokens that carry a principal to a WebSocket without a cookie.
//
// tide denies by default. A resource without a policy cannot be subscribed
// to, and a policy that returns any error denies. Policies see the
// subscription's conditions already validated against the resource's scope
// columns, as canonical text, so a policy compares strings, never parses
// client input. The helpers cover the usual rules and combine:
//
//	authz.Any(
//		authz.HasClaim("role", "admin"),
//		authz.All(authz.RequireClaim("project_id", "projects"), isMemberInDB),
//	)
//
// A RowFilter (core.Resource.Filter) decides row by row, for every change,
// what a principal sees of the scopes its policy allowed.
//
// A Keyring signs and verifies channel tokens (HMAC-SHA256, with key ids for
// rotation, an expiry, and optional grants restricting the token to some
// scopes); it is the core.TokenVerifier an engine uses for hello and
// refresh, and package middleware's token endpoint mints with it:
//
//	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: key})
//	tok, t, err := kr.Mint(principal, 10*time.Minute)
//
// Guarantees: every refusal wraps ErrUnauthenticated or ErrForbidden, so it
// maps to a stable wire code; token refusals also carry a stable TokenCode.
// Token verification checks the size before decoding anything and compares
// MACs in constant time. Policies, filters and keyrings are safe for
// concurrent use.
//
// Package authz depends on nothing else in tide; core calls into it.
// docs/authorization.md has the recipes.
package authz
