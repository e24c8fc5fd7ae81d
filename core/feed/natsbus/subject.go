package natsbus

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// maxTokenLen is the longest subject token that token produces by
// escaping; a value whose escaped form would be longer is hashed instead.
const maxTokenLen = 128

// token maps a resource name or a tenant value (arbitrary text) to one valid
// NATS subject token, injectively for every value whose escaped form fits in
// maxTokenLen bytes:
//
//   - ASCII letters, digits, '-' and '_' stand for themselves, so the common
//     tenant ids (slugs, numbers, UUIDs) stay readable: "p7" → "p7";
//   - every other byte is '%' followed by two upper-case hex digits:
//     "acme.com" → "acme%2Ecom", "a b" → "a%20b", "é" → "%C3%A9";
//   - the empty string is "%" alone (never produced otherwise);
//   - a value whose (escaped) form exceeds maxTokenLen is '#' followed by the
//     first 32 hex digits of its SHA-256 ("#3a7bd3e2360a3d29eea436fcfb7e44c7"),
//     keeping subjects short; fan-out still matches the full value from the
//     message body, so a collision could only over-deliver to the engine,
//     which filters again.
//
// Its tokens therefore never contain '.', '*', '>', whitespace or non-ASCII
// bytes.
func token(s string) string {
	if s == "" {
		return "%"
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if plain(s[i]) {
			n++
		} else {
			n += 3
		}
	}
	if n > maxTokenLen {
		h := sha256.Sum256([]byte(s))
		return "#" + hex.EncodeToString(h[:16])
	}
	if n == len(s) {
		return s
	}
	const hexdig = "0123456789ABCDEF"
	b := make([]byte, 0, n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hexdig[c>>4], hexdig[c&15])
		}
	}
	return string(b)
}

func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// errHashedToken is returned by parseToken for a hashed token, which cannot
// be reversed.
var errHashedToken = errors.New("natsbus: token is a hash of a long value")

// parseToken reverses token. It fails for hashed tokens (errHashedToken)
// and for anything token does not produce.
func parseToken(tok string) (string, error) {
	switch {
	case tok == "%":
		return "", nil
	case tok == "":
		return "", errors.New("natsbus: empty token")
	case tok[0] == '#':
		return "", errHashedToken
	case len(tok) > maxTokenLen:
		return "", fmt.Errorf("natsbus: token longer than %d bytes", maxTokenLen)
	}
	if strings.IndexByte(tok, '%') < 0 {
		for i := 0; i < len(tok); i++ {
			if !plain(tok[i]) {
				return "", fmt.Errorf("natsbus: invalid byte %q in token", tok[i])
			}
		}
		return tok, nil
	}
	b := make([]byte, 0, len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case plain(c):
			b = append(b, c)
		case c == '%' && i+2 < len(tok) && upperHex(tok[i+1]) >= 0 && upperHex(tok[i+2]) >= 0:
			v := byte(upperHex(tok[i+1])<<4 | upperHex(tok[i+2]))
			if plain(v) {
				return "", fmt.Errorf("natsbus: %q is escaped but need not be", v)
			}
			b = append(b, v)
			i += 2
		default:
			return "", fmt.Errorf("natsbus: invalid escape in token %q", tok)
		}
	}
	return string(b), nil
}

func upperHex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// subject returns the subject a change of resource for tenant is published
// under: "<prefix>.change.<token(resource)>.<token(tenant)>". The tenant of a
// change is its first scope value (Change.Scope[0]), "" for a resource
// without scope columns.
func subject(prefix, resource, tenant string) string {
	return prefix + ".change." + token(resource) + "." + token(tenant)
}

// resourceSubject returns the subject filter matching every tenant of a
// resource: "<prefix>.change.<token(resource)>.*".
func resourceSubject(prefix, resource string) string {
	return prefix + ".change." + token(resource) + ".*"
}

// validPrefix checks a subject prefix: one or more tokens of ASCII letters,
// digits, '-' and '_', separated by dots, at most 64 bytes.
func validPrefix(p string) error {
	if p == "" || len(p) > 64 {
		return fmt.Errorf("natsbus: prefix %q must be 1 to 64 bytes", p)
	}
	for _, tok := range strings.Split(p, ".") {
		if tok == "" {
			return fmt.Errorf("natsbus: prefix %q has an empty token", p)
		}
		for i := 0; i < len(tok); i++ {
			if !plain(tok[i]) {
				return fmt.Errorf("natsbus: prefix %q: tokens are ASCII letters, digits, '-' and '_'", p)
			}
		}
	}
	return nil
}

// validStream checks a JetStream stream name.
func validStream(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("natsbus: stream name %q must be 1 to 64 bytes", s)
	}
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			return fmt.Errorf("natsbus: stream name %q: use ASCII letters, digits, '-' and '_'", s)
		}
	}
	return nil
}

// defaultStream derives the stream name from the prefix: "tide" →
// "TIDE_CHANGES", "app.tide" → "APP_TIDE_CHANGES".
func defaultStream(prefix string) string {
	return strings.ToUpper(strings.ReplaceAll(prefix, ".", "_")) + "_CHANGES"
}
