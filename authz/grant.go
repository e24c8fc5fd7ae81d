package authz

import (
	"fmt"
	"slices"
)

// Grant is a scope a principal is restricted to, usually carried by a
// channel token: a resource, and for some of its scope columns the values
// allowed. A subscription is inside the grant if it is for the resource and,
// for every column the grant names, it has a condition on that column whose
// values are all among the allowed ones. Columns the grant does not name are
// unrestricted (the resource's policy still applies).
//
// Values are canonical text, as in Request.Conditions: integers in decimal,
// booleans as "true" and "false".
type Grant struct {
	Resource   string              `json:"resource"`             // the resource's wire name
	Conditions map[string][]string `json:"conditions,omitempty"` // scope column → allowed values; nil: the whole resource
}

// Covers reports whether a subscription to resource with the given
// (validated, canonical) conditions is inside the grant.
func (g Grant) Covers(resource string, conditions map[string][]string) bool {
	if g.Resource != resource {
		return false
	}
	for col, allowed := range g.Conditions {
		got := conditions[col]
		if len(got) == 0 {
			return false
		}
		for _, v := range got {
			if !slices.Contains(allowed, v) {
				return false
			}
		}
	}
	return true
}

// ErrScopeNotAllowed denies a subscription, poll, topic or mutation outside
// the grants of the principal's token. It wraps ErrForbidden, so clients
// see "forbidden".
var ErrScopeNotAllowed = &TokenError{Code: CodeScopeNotAllowed, msg: "the token does not allow this scope", deny: ErrForbidden}

// CheckGrants returns nil if the principal has no grants or one of them
// covers the request, and an error wrapping ErrScopeNotAllowed otherwise.
// core runs it before every resource policy, so a token's restriction holds
// whatever the policy says.
func CheckGrants(r Request) error {
	if len(r.Principal.Grants) == 0 {
		return nil
	}
	for _, g := range r.Principal.Grants {
		if g.Covers(r.Resource, r.Conditions) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrScopeNotAllowed, r.Resource)
}
