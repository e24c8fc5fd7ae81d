package authz

import (
	"context"
	"encoding/json"
	"strconv"
)

// Principal is who the caller is, as the app's auth hook says: an id plus
// claims. The zero Principal is anonymous.
//
// Claims hold what policies compare against: strings, numbers, booleans, or
// lists of them (as decoded from JSON, so []any as well as []string).
//
// Grants, when not empty, restrict the principal to the listed scopes on top
// of every resource's policy: a subscription no grant covers is refused with
// ErrScopeNotAllowed. Channel tokens carry them (see Keyring); a principal
// from the app's session usually has none.
type Principal struct {
	ID     string         // the app's id for the caller; "" is anonymous
	Claims map[string]any // what policies and filters compare against; read-only once built
	Grants []Grant        // scopes the principal is restricted to; empty: no restriction
}

// Anonymous is the principal of a caller the app did not authenticate.
var Anonymous = Principal{}

// IsAnonymous reports whether p has no id.
func (p Principal) IsAnonymous() bool { return p.ID == "" }

// Strings returns the claim as a list of strings: a string claim is a list of
// one, a list claim keeps its string, number and boolean elements in their
// canonical text form. A missing claim is nil.
func (p Principal) Strings(claim string) []string {
	switch v := p.Claims[claim].(type) {
	case nil:
		return nil
	case string:
		return []string{v}
	case []string:
		return v
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := scalarText(e); ok {
				out = append(out, s)
			}
		}
		return out
	default:
		if s, ok := scalarText(v); ok {
			return []string{s}
		}
		return nil
	}
}

// scalarText renders a scalar claim the way core renders condition values:
// integers in decimal, booleans as "true"/"false". Numbers that are not
// integers have no canonical text and are left out.
func scalarText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case float64:
		// Exactly representable integers only: beyond 2^53 a float64 claim
		// has already lost digits, so it matches nothing rather than the
		// wrong id.
		if v == float64(int64(v)) && v >= -(1<<53) && v <= 1<<53 {
			return strconv.FormatInt(int64(v), 10), true
		}
		return "", false
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return strconv.FormatInt(n, 10), true
		}
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return strconv.FormatUint(n, 10), true
		}
		return "", false
	case int:
		return strconv.FormatInt(int64(v), 10), true
	case int32:
		return strconv.FormatInt(int64(v), 10), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case uint:
		return strconv.FormatUint(uint64(v), 10), true
	case uint32:
		return strconv.FormatUint(uint64(v), 10), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	}
	return "", false
}

type principalKey struct{}

// NewContext returns a copy of ctx carrying p. Session middleware uses it so
// tide's hooks can find the user the app already authenticated.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal stored by NewContext, or Anonymous and
// false if there is none.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
