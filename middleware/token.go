package middleware

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
)

// TokenResponse is the body of a successful token request.
type TokenResponse struct {
	Token     string    `json:"token"`      // send it in hello, or in refresh when asked
	ExpiresAt time.Time `json:"expires_at"` // RFC 3339
	ExpiresIn int       `json:"expires_in"` // seconds from now
}

// TokenHandler returns a handler that mints a short-lived channel token for
// the caller, signed by kr. Mount it behind the app's own session
// middleware, so the principal hook (WithPrincipal, or authz.FromContext)
// finds the logged-in user; WithTokenEndpoint mounts it at
// POST <prefix>/token instead.
//
//	POST /tide/token  →  200 {"token":"tide1.…","expires_at":"…","expires_in":600}
//
// Only POST is served (405 otherwise), so a token is never cached or
// fetched by a link; the origin check of WithAllowedOrigins applies (403
// "forbidden"). An anonymous caller gets 401 with an error frame whose code
// is "unauthenticated". Options used: WithPrincipal, WithAllowedOrigins,
// WithCheckOrigin, WithTokenTTL, WithTokenGrants, WithTokenClaims.
//
// A token carries the principal's id, claims and grants, signed but not
// encrypted: whoever holds it can read them. Mount a handler of its own,
// with WithTokenGrants and WithTokenClaims, to mint tokens to give away.
func TokenHandler(kr *authz.Keyring, opts ...Option) http.Handler {
	o := buildOptions(opts)
	return &tokenHandler{kr: kr, o: &o}
}

type tokenHandler struct {
	kr *authz.Keyring
	o  *options
}

func (h *tokenHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, &protocol.Error{Code: protocol.CodeBadFrame, Message: "the token endpoint takes POST"})
		return
	}
	if !h.o.originAllowed(r) {
		refuseOrigin(w, r)
		return
	}
	p, err := h.o.principal(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, &protocol.Error{Code: protocol.CodeUnauthenticated, Message: err.Error()})
		return
	}
	if p.IsAnonymous() {
		writeError(w, http.StatusUnauthorized, &protocol.Error{Code: protocol.CodeUnauthenticated, Message: "log in to get a token"})
		return
	}
	// Both hooks see the session's principal, with all its claims.
	session := p
	if h.o.tokenGrants != nil {
		grants, err := h.o.tokenGrants(r, session)
		if err != nil {
			writeError(w, http.StatusForbidden, &protocol.Error{Code: protocol.CodeForbidden, Message: err.Error()})
			return
		}
		p.Grants = grants
	}
	if h.o.tokenClaims != nil {
		claims, err := h.o.tokenClaims(r, session)
		if err != nil {
			writeError(w, http.StatusForbidden, &protocol.Error{Code: protocol.CodeForbidden, Message: err.Error()})
			return
		}
		p.Claims = claims
	}
	tok, t, err := h.kr.Mint(p, h.o.tokenTTL)
	if errors.Is(err, authz.ErrUnauthenticated) { // revoked a moment ago
		writeError(w, http.StatusUnauthorized, &protocol.Error{Code: protocol.CodeUnauthenticated, Message: err.Error()})
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, &protocol.Error{Code: protocol.CodeInternal, Message: "cannot mint a token: " + err.Error()})
		return
	}
	body, _ := json.Marshal(TokenResponse{
		Token:     tok,
		ExpiresAt: t.Expiry.UTC(),
		ExpiresIn: int(t.Expiry.Sub(t.IssuedAt.Truncate(time.Second)) / time.Second), // exp − iat, both whole seconds
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}
