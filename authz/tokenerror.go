package authz

// TokenCode is a stable reason a token or a token's scope is refused. Codes
// never change meaning; new ones may be added. On the wire every token
// refusal is the error code "unauthenticated" (ErrScopeNotAllowed:
// "forbidden"); the TokenCode is for the app's logs, metrics and tests.
type TokenCode string

// Token refusal reasons.
const (
	CodeTokenMalformed   TokenCode = "token_malformed"     // empty, not tide's format, undecodable, or missing required fields
	CodeTokenTooLarge    TokenCode = "token_too_large"     // longer than the keyring's MaxTokenBytes; refused before any decoding
	CodeTokenUnknownKey  TokenCode = "token_unknown_key"   // signed with a key id the keyring does not hold (never issued, or retired)
	CodeTokenSignature   TokenCode = "token_bad_signature" // the MAC does not match: forged or tampered with
	CodeTokenExpired     TokenCode = "token_expired"       // now is at or after its expiry
	CodeTokenNotYetValid TokenCode = "token_not_yet_valid" // now is before its not-before time
	CodeTokenRevoked     TokenCode = "token_revoked"       // issued to a principal before its access was revoked
	CodeTokenFromFuture  TokenCode = "token_from_future"   // its issue time is more than the keyring's ClockSkew ahead of now
	CodeScopeNotAllowed  TokenCode = "scope_not_allowed"   // a subscription, poll, topic or mutation outside the token's grants
)

// TokenError is a token refusal with a stable code. It wraps
// ErrUnauthenticated (ErrScopeNotAllowed wraps ErrForbidden), so policies
// and core map it to the right wire code; errors.As recovers the code.
//
// The exported Err… values are the sentinels: errors returned by the
// keyring wrap one of them with detail, so test with errors.Is.
type TokenError struct {
	Code TokenCode // the stable reason
	msg  string
	deny error
}

// Error returns the code and a human-readable reason.
func (e *TokenError) Error() string { return "authz: " + string(e.Code) + ": " + e.msg }

// Unwrap returns ErrUnauthenticated or ErrForbidden.
func (e *TokenError) Unwrap() error { return e.deny }

func tokenErr(code TokenCode, msg string) *TokenError {
	return &TokenError{Code: code, msg: msg, deny: ErrUnauthenticated}
}

// Token refusals. Each wraps ErrUnauthenticated.
var (
	ErrTokenMalformed   = tokenErr(CodeTokenMalformed, "malformed token")
	ErrTokenTooLarge    = tokenErr(CodeTokenTooLarge, "token too large")
	ErrTokenUnknownKey  = tokenErr(CodeTokenUnknownKey, "token signed with an unknown key")
	ErrTokenSignature   = tokenErr(CodeTokenSignature, "token signature does not match")
	ErrTokenExpired     = tokenErr(CodeTokenExpired, "token expired")
	ErrTokenNotYetValid = tokenErr(CodeTokenNotYetValid, "token not yet valid")
	ErrTokenRevoked     = tokenErr(CodeTokenRevoked, "token revoked")
	// ErrTokenIssuedInFuture refuses a token whose issue time is more than
	// the keyring's ClockSkew ahead of its clock: a revocation made now
	// could not be told to cover it.
	ErrTokenIssuedInFuture = tokenErr(CodeTokenFromFuture, "token issued in the future")
)
