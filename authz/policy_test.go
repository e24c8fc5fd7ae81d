package authz_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tidesync/tide/authz"
)

var errDB = errors.New("db down")

func failing(context.Context, authz.Request) error { return errDB }

func TestPolicies(t *testing.T) {
	alice := authz.Principal{ID: "alice", Claims: map[string]any{
		"projects": []any{"p1", "p2", float64(7)},
		"user_id":  "alice",
		"org":      "o1",
		"role":     []string{"member", "admin"},
		"teams":    []string{"t1"},
	}}
	bob := authz.Principal{ID: "bob", Claims: map[string]any{"projects": []string{"p3"}, "org": []any{"o1", "o2"}}}
	anon := authz.Anonymous
	conds := func(kv ...any) map[string][]string {
		m := map[string][]string{}
		for i := 0; i < len(kv); i += 2 {
			switch v := kv[i+1].(type) {
			case string:
				m[kv[i].(string)] = []string{v}
			case []string:
				m[kv[i].(string)] = v
			}
		}
		return m
	}
	const (
		allow  = ""
		unauth = "unauthenticated"
		forbid = "forbidden"
		other  = "other"
	)
	tests := []struct {
		name   string
		policy authz.Policy
		p      authz.Principal
		conds  map[string][]string
		want   string
	}{
		{"allow anon", authz.Allow, anon, nil, allow},
		{"authenticated", authz.Authenticated, alice, nil, allow},
		{"authenticated anon", authz.Authenticated, anon, nil, unauth},

		{"require conditions present", authz.RequireConditions("org", "team"), anon, conds("org", "o1", "team", "x"), allow},
		{"require conditions missing", authz.RequireConditions("org", "team"), alice, conds("org", "o1"), forbid},
		{"require conditions none", authz.RequireConditions(), anon, nil, allow},

		{"claim list eq", authz.RequireClaim("project_id", "projects"), alice, conds("project_id", "p2"), allow},
		{"claim list in", authz.RequireClaim("project_id", "projects"), alice, conds("project_id", []string{"p1", "p2"}), allow},
		{"claim number", authz.RequireClaim("project_id", "projects"), alice, conds("project_id", "7"), allow},
		{"claim in with outsider", authz.RequireClaim("project_id", "projects"), alice, conds("project_id", []string{"p1", "p3"}), forbid},
		{"claim other value", authz.RequireClaim("project_id", "projects"), alice, conds("project_id", "p3"), forbid},
		{"claim without condition", authz.RequireClaim("project_id", "projects"), alice, nil, forbid},
		{"claim missing", authz.RequireClaim("project_id", "nope"), alice, conds("project_id", "p1"), forbid},
		{"claim anon", authz.RequireClaim("project_id", "projects"), anon, conds("project_id", "p1"), unauth},

		{"equals", authz.ClaimEquals("owner", "user_id"), alice, conds("owner", "alice"), allow},
		{"equals in all same", authz.ClaimEquals("owner", "user_id"), alice, conds("owner", []string{"alice"}), allow},
		{"equals in other", authz.ClaimEquals("owner", "user_id"), alice, conds("owner", []string{"alice", "bob"}), forbid},
		{"equals other", authz.ClaimEquals("owner", "user_id"), alice, conds("owner", "bob"), forbid},
		{"equals list claim", authz.ClaimEquals("org_id", "org"), bob, conds("org_id", "o1"), forbid},
		{"equals no condition", authz.ClaimEquals("owner", "user_id"), alice, nil, forbid},
		{"equals anon", authz.ClaimEquals("owner", "user_id"), anon, conds("owner", ""), unauth},

		{"has claim", authz.HasClaim("role", "admin"), alice, nil, allow},
		{"has claim no", authz.HasClaim("role", "admin"), bob, nil, forbid},
		{"has claim anon", authz.HasClaim("role", "admin"), anon, nil, unauth},

		{"all", authz.All(authz.Authenticated, authz.RequireClaim("project_id", "projects")), alice, conds("project_id", "p1"), allow},
		{"all first denial", authz.All(authz.Authenticated, authz.RequireClaim("project_id", "projects")), anon, conds("project_id", "p1"), unauth},
		{"all short-circuits", authz.All(authz.HasClaim("role", "admin"), failing), bob, nil, forbid},
		{"all error", authz.All(authz.Allow, failing), alice, nil, other},
		{"all empty", authz.All(), alice, nil, forbid},
		{"all nil", authz.All(authz.Allow, nil), alice, nil, forbid},

		{"any admin", authz.Any(authz.HasClaim("role", "admin"), authz.RequireClaim("project_id", "projects")), alice, conds("project_id", "p9"), allow},
		{"any member", authz.Any(authz.HasClaim("role", "admin"), authz.RequireClaim("project_id", "projects")), bob, conds("project_id", "p3"), allow},
		{"any none", authz.Any(authz.HasClaim("role", "admin"), authz.RequireClaim("project_id", "projects")), bob, conds("project_id", "p1"), forbid},
		{"any anon", authz.Any(authz.HasClaim("role", "admin"), authz.Authenticated), anon, nil, unauth},
		{"any unauth beats forbidden", authz.Any(authz.RequireConditions("x"), authz.Authenticated), anon, nil, unauth},
		{"any error beats forbidden", authz.Any(failing, authz.HasClaim("role", "admin")), bob, nil, other},
		{"any error then allow", authz.Any(failing, authz.Allow), bob, nil, allow},
		{"any empty", authz.Any(), alice, nil, forbid},
		{"any nil", authz.Any(nil), alice, nil, forbid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy(context.Background(), authz.Request{Principal: tt.p, Resource: "r", Conditions: tt.conds})
			got := allow
			switch {
			case err == nil:
			case errors.Is(err, authz.ErrUnauthenticated):
				got = unauth
			case errors.Is(err, authz.ErrForbidden):
				got = forbid
			default:
				got = other
			}
			if got != tt.want {
				t.Fatalf("got %q (%v), want %q", got, err, tt.want)
			}
		})
	}
}

func TestGrants(t *testing.T) {
	p := authz.Principal{ID: "u", Grants: []authz.Grant{
		{Resource: "todos", Conditions: map[string][]string{"project_id": {"p1", "p2"}}},
		{Resource: "users"},
	}}
	for _, tt := range []struct {
		resource string
		conds    map[string][]string
		ok       bool
	}{
		{"todos", map[string][]string{"project_id": {"p1"}}, true},
		{"todos", map[string][]string{"project_id": {"p1", "p2"}, "done": {"true"}}, true},
		{"todos", map[string][]string{"project_id": {"p1", "p3"}}, false},
		{"todos", nil, false},
		{"todos", map[string][]string{"done": {"true"}}, false},
		{"users", nil, true},
		{"users", map[string][]string{"org": {"x"}}, true},
		{"orgs", nil, false},
	} {
		err := authz.CheckGrants(authz.Request{Principal: p, Resource: tt.resource, Conditions: tt.conds})
		if (err == nil) != tt.ok {
			t.Errorf("%s %v: %v", tt.resource, tt.conds, err)
		}
		if err != nil && (!errors.Is(err, authz.ErrScopeNotAllowed) || !errors.Is(err, authz.ErrForbidden)) {
			t.Errorf("%s: %v does not wrap ErrScopeNotAllowed and ErrForbidden", tt.resource, err)
		}
	}
	if err := authz.CheckGrants(authz.Request{Principal: authz.Principal{ID: "u"}, Resource: "x"}); err != nil {
		t.Fatalf("no grants restrict nothing: %v", err)
	}
}

func TestPrincipalStrings(t *testing.T) {
	p := authz.Principal{ID: "u", Claims: map[string]any{
		"s": "x", "b": true, "f": float64(42), "frac": 1.5, "big": float64(1 << 60),
		"list": []any{"a", float64(2), false, 2.5, nil}, "strs": []string{"q"},
		"n": int64(-3),
	}}
	for claim, want := range map[string][]string{
		"s": {"x"}, "b": {"true"}, "f": {"42"}, "frac": nil, "big": nil,
		"list": {"a", "2", "false"}, "strs": {"q"}, "n": {"-3"}, "missing": nil,
	} {
		got := p.Strings(claim)
		if len(got) != len(want) {
			t.Errorf("%s: %q, want %q", claim, got, want)
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: %q, want %q", claim, got, want)
			}
		}
	}
}
