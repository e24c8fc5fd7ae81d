package authz

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Token is the content of a channel token: who it speaks for, for how long,
// and optionally which scopes it is restricted to (Principal.Grants).
//
// On the wire a token is
//
//	tide1.<key id>.<base64url(payload JSON)>.<base64url(HMAC-SHA256)>
//
// where the MAC covers everything before its dot. Times are whole seconds,
// except the issue time, which also travels in nanoseconds, and the latest
// revocation of the principal the signer knew of (so a token minted just
// after a revocation is told apart from the tokens it revoked).
// The payload is signed, not encrypted: the claims are readable by whoever
// holds the token, so do not put secrets in them.
type Token struct {
	Principal Principal // who the token speaks for: id, claims and grants
	IssuedAt  time.Time // zero when signing: now
	NotBefore time.Time // zero: valid from IssuedAt on, without a not-before check
	Expiry    time.Time // required: the token is valid strictly before it
	KeyID     string    // the key that signed it; set by Parse, ignored by Sign
}

// tokenPrefix names the format and its version; a new format gets a new
// prefix, so a verifier never misreads a token of another version.
const tokenPrefix = "tide1."

// Limits of the token format.
const (
	maxSubjectLen = 256
	maxKeyIDLen   = 32
	macLen        = sha256.Size
)

// payload is the signed JSON of a token.
type payload struct {
	Sub    string         `json:"sub"`
	Claims map[string]any `json:"claims,omitempty"`
	Grants []Grant        `json:"scopes,omitempty"`
	Iat    int64          `json:"iat"`
	IatNS  int64          `json:"iat_ns,omitempty"` // the issue time in Unix nanoseconds; iat is its second
	Nbf    int64          `json:"nbf,omitempty"`
	Exp    int64          `json:"exp"`
	// Rev is the latest revocation of Sub, Unix ns, the signing keyring
	// had recorded: that revocation and the earlier ones do not cover the
	// token (see Keyring.revokedBy). 0: none.
	Rev int64 `json:"rev,omitempty"`
}

// encodeToken signs p with key and returns the token.
func encodeToken(key *Key, p *payload) (string, error) {
	js, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("authz: token claims cannot be encoded as JSON: %w", err)
	}
	b64 := base64.RawURLEncoding
	buf := make([]byte, 0, len(tokenPrefix)+len(key.ID)+2+b64.EncodedLen(len(js))+b64.EncodedLen(macLen))
	buf = append(buf, tokenPrefix...)
	buf = append(buf, key.ID...)
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, js)
	mac := key.mac(buf)
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, mac)
	return string(buf), nil
}

// splitToken checks the token's shape and returns its key id, the signed
// part and the encoded payload and MAC. It does no decoding.
func splitToken(tok string) (kid, signed, payloadB64, macB64 string, err error) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return "", "", "", "", fmt.Errorf("%w: not a tide1 token", ErrTokenMalformed)
	}
	kid, rest, ok1 := strings.Cut(rest, ".")
	payloadB64, macB64, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(macB64, ".") {
		return "", "", "", "", fmt.Errorf("%w: want 4 dot-separated parts", ErrTokenMalformed)
	}
	if validKeyID(kid) != nil {
		return "", "", "", "", fmt.Errorf("%w: bad key id", ErrTokenMalformed)
	}
	if payloadB64 == "" {
		return "", "", "", "", fmt.Errorf("%w: empty payload", ErrTokenMalformed)
	}
	return kid, tok[:len(tok)-len(macB64)-1], payloadB64, macB64, nil
}

// checkMAC verifies the token's MAC in constant time.
func checkMAC(key *Key, signed, macB64 string) error {
	got, err := base64.RawURLEncoding.DecodeString(macB64)
	if err != nil {
		return fmt.Errorf("%w: signature is not base64url", ErrTokenMalformed)
	}
	if !hmac.Equal(got, key.mac([]byte(signed))) {
		return ErrTokenSignature
	}
	return nil
}

// decodePayload decodes and checks a payload whose MAC has been verified.
func decodePayload(payloadB64 string) (*payload, error) {
	js, err := base64.RawURLEncoding.DecodeString(payloadB64)
	if err != nil {
		return nil, fmt.Errorf("%w: payload is not base64url", ErrTokenMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // integer claims keep every digit
	var p payload
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: payload is not a JSON object", ErrTokenMalformed)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the payload", ErrTokenMalformed)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return &p, nil
}

// check validates the fields every token must have.
func (p *payload) check() error {
	switch {
	case p.Sub == "":
		return fmt.Errorf("%w: no subject", ErrTokenMalformed)
	case len(p.Sub) > maxSubjectLen || !printable(p.Sub):
		return fmt.Errorf("%w: the subject is longer than %d bytes or not printable UTF-8", ErrTokenMalformed, maxSubjectLen)
	case p.Iat <= 0 || p.Exp <= 0 || p.Nbf < 0 || p.Rev < 0:
		return fmt.Errorf("%w: iat and exp are required, nbf and rev are not negative", ErrTokenMalformed)
	case p.Exp <= p.Iat || (p.Nbf != 0 && p.Exp <= p.Nbf):
		return fmt.Errorf("%w: exp must be after iat and nbf", ErrTokenMalformed)
	case p.IatNS != 0 && floorDiv(p.IatNS, int64(time.Second)) != p.Iat:
		return fmt.Errorf("%w: iat_ns is not within iat's second", ErrTokenMalformed)
	}
	for _, g := range p.Grants {
		if g.Resource == "" {
			return fmt.Errorf("%w: a scope without resource", ErrTokenMalformed)
		}
		for col, vals := range g.Conditions {
			if col == "" || len(vals) == 0 {
				return fmt.Errorf("%w: a scope condition without column or values", ErrTokenMalformed)
			}
		}
	}
	return nil
}

func (p *payload) token(kid string) Token {
	t := Token{
		Principal: Principal{ID: p.Sub, Claims: p.Claims, Grants: p.Grants},
		IssuedAt:  time.Unix(0, p.issuedNS()),
		Expiry:    time.Unix(p.Exp, 0),
		KeyID:     kid,
	}
	if p.Nbf != 0 {
		t.NotBefore = time.Unix(p.Nbf, 0)
	}
	return t
}

// issuedNS returns the issue time in Unix nanoseconds: iat_ns, or the start
// of iat's second for a token signed without it.
func (p *payload) issuedNS() int64 {
	if p.IatNS != 0 {
		return p.IatNS
	}
	return p.Iat * int64(time.Second)
}

// floorDiv divides rounding towards negative infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// newPayload builds the payload of t, defaulting IssuedAt to now.
func newPayload(t Token, now time.Time) (*payload, error) {
	if t.IssuedAt.IsZero() {
		t.IssuedAt = now
	}
	p := &payload{
		Sub:    t.Principal.ID,
		Claims: t.Principal.Claims,
		Grants: t.Principal.Grants,
		Iat:    t.IssuedAt.Unix(),
		IatNS:  t.IssuedAt.UnixNano(),
		Exp:    t.Expiry.Unix(),
	}
	if !t.NotBefore.IsZero() {
		p.Nbf = t.NotBefore.Unix()
	}
	if t.Expiry.IsZero() {
		return nil, errors.New("authz: a token needs an expiry")
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("authz: cannot sign: %w", err)
	}
	return p, nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}
