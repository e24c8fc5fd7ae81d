package middleware_test

// The Go example of "What a token exposes, and narrower tokens" in
// docs/authorization.md, compiled: the region below (between
// "authorization.md begins" and "authorization.md ends", one tab in) is a
// go block of the page, which TestTokenDocExample checks, and it runs as a
// test.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/internal/docsample"
	"github.com/tidesync/tide/middleware"
)

// shareTokens mounts the share-link token endpoint of the docs on mux.
func shareTokens(mux *http.ServeMux, keyring *authz.Keyring, currentUser middleware.PrincipalFunc) {
	// authorization.md begins
	// POST /share/token?project=p7: a token for one project, carrying only
	// the claim the todos policy (authz.RequireClaim("project_id",
	// "projects")) reads, and none of the user's other claims.
	mux.Handle("POST /share/token", middleware.TokenHandler(keyring,
		middleware.WithPrincipal(currentUser),
		middleware.WithTokenGrants(func(r *http.Request, p authz.Principal) ([]authz.Grant, error) {
			project := r.URL.Query().Get("project")
			if !slices.Contains(p.Strings("projects"), project) {
				return nil, fmt.Errorf("not a member of project %q", project)
			}
			return []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": {project}}}}, nil
		}),
		middleware.WithTokenClaims(func(r *http.Request, p authz.Principal) (map[string]any, error) {
			return map[string]any{"projects": []string{r.URL.Query().Get("project")}}, nil
		}),
	))
	// authorization.md ends
}

// TestTokenDocExample: the share-link endpoint of the docs mints a token
// whose readable payload holds the grant and the one claim, and nothing
// else of the user's claims; a project the user is not a member of is
// refused with 403.
func TestTokenDocExample(t *testing.T) {
	docsample.Contained(t, "authorization.md")

	kr, _ := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k", Secret: bytes.Repeat([]byte{3}, 32)}})
	user := func(*http.Request) (authz.Principal, error) {
		return authz.Principal{ID: "bob", Claims: map[string]any{"projects": []string{"p7", "p8"}, "email": "bob@example.com"}}, nil
	}
	mux := http.NewServeMux()
	shareTokens(mux, kr, user)
	post := func(project string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/share/token?project="+project, nil))
		return rec
	}
	if rec := post("p9"); rec.Code != http.StatusForbidden {
		t.Fatalf("a project bob is not in: %d %s", rec.Code, rec.Body)
	}
	rec := post("p7")
	var tr middleware.TokenResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &tr); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	// What anyone holding the token reads, without the key.
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(tr.Token, ".")[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, hidden := range []string{"email", "bob@example.com", "p8"} {
		if bytes.Contains(payload, []byte(hidden)) {
			t.Fatalf("the token exposes %q: %s", hidden, payload)
		}
	}
	tok, err := kr.Parse(tr.Token)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Principal.Strings("projects"); len(got) != 1 || got[0] != "p7" || len(tok.Principal.Claims) != 1 ||
		len(tok.Principal.Grants) != 1 || tok.Principal.Grants[0].Conditions["project_id"][0] != "p7" {
		t.Fatalf("token %+v", tok.Principal)
	}
}
