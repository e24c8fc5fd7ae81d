package authz

import (
	"context"
	"fmt"
)

// Principal is who the caller is, as the app's auth hook says: an id plus
// claims. The zero Principal is anonymous.
//
// Claims hold what policies compare against: strings, numbers, booleans, or
// lists of them (as decoded from JSON, so []any as well as []string).
type Principal struct {
	ID     string
	Claims map[string]any
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

// scalarText renders a scalar claim the way core renders condition values.
func scalarText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case bool:
		if v {
			return "true", true
		}
		return "false", true
	case float64:
		if v == float64(int64(v)) {
			return fmt.Sprintf("%d", int64(v)), true
		}
		return "", false
	case int:
		return fmt.Sprintf("%d", v), true
	case int64:
		return fmt.Sprintf("%d", v), true
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
