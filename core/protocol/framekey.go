package protocol

import (
	"bytes"
	"encoding/json"
)

// ScanFrameKey reads a client frame's top-level "type" and "key" strings
// from prefix, the first bytes of a frame that may be cut anywhere: the
// server answers a mutate frame above the size limit with a reject for its
// key when the key can be read before the limit (clients write key right
// after type for that reason). typ and key are "" when not found; keyOK
// reports whether a whole key string was read, even an empty one.
//
// On a complete JSON object it agrees with encoding/json decoding the
// frame into a ClientFrame: member names match case-insensitively, escapes
// and invalid UTF-8 decode the same way, null leaves a field as it was and
// the last of repeated members wins. A string of the wrong type for a
// field (a number for "key") is skipped. Scanning stops at the end of
// prefix or at the first byte that cannot continue a JSON object, with
// what was found before it. It never panics, does not recurse and
// allocates only for the strings it returns (and for names that contain
// escapes).
func ScanFrameKey(prefix []byte) (typ, key string, keyOK bool) {
	s := prefixScanner{b: prefix}
	s.skipSpace()
	if !s.eat('{') {
		return "", "", false
	}
	for {
		s.skipSpace()
		if s.next('}') {
			return typ, key, keyOK
		}
		name, ok := s.token()
		if !ok {
			return typ, key, keyOK
		}
		s.skipSpace()
		if !s.eat(':') {
			return typ, key, keyOK
		}
		s.skipSpace()
		field := memberOf(name)
		if field != "" && s.next('"') {
			raw, ok := s.token()
			if !ok {
				return typ, key, keyOK
			}
			v := decodeString(raw)
			if field == "key" {
				key, keyOK = v, true
			} else {
				typ = v
			}
		} else if !s.skipAny() {
			return typ, key, keyOK
		}
		s.skipSpace()
		if !s.eat(',') {
			return typ, key, keyOK
		}
	}
}

// memberOf returns "type" or "key" when a member name (a string token with
// its quotes) names that field as encoding/json matches names, else "".
func memberOf(raw []byte) string {
	name := raw[1 : len(raw)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		name = []byte(decodeString(raw))
	}
	switch {
	case bytes.EqualFold(name, []byte("key")):
		return "key"
	case bytes.EqualFold(name, []byte("type")):
		return "type"
	}
	return ""
}

// decodeString decodes a whole JSON string token, quotes included, as
// encoding/json does (escapes, invalid UTF-8 and lone surrogates become
// U+FFFD).
func decodeString(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 && isPlainASCII(raw) {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func isPlainASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// prefixScanner walks a JSON text that may end anywhere.
type prefixScanner struct {
	b []byte
	i int
}

func (s *prefixScanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *prefixScanner) next(c byte) bool { return s.i < len(s.b) && s.b[s.i] == c }

// eat consumes c if it comes next.
func (s *prefixScanner) eat(c byte) bool {
	if s.next(c) {
		s.i++
		return true
	}
	return false
}

// token consumes a whole string token and returns it with its quotes; false
// if none comes next or it is cut off or holds a control character.
func (s *prefixScanner) token() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:s.i], true
		case c == '\\':
			j++ // the escaped byte (a \u escape's digits are plain bytes)
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// skipAny consumes one value of any kind, nested ones by counting
// brackets; false if it is cut off or malformed at its top level.
func (s *prefixScanner) skipAny() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.token()
		return ok
	case c == '{' || c == '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.token(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default: // a number or a literal
		start := s.i
		for s.i < len(s.b) && isLiteralByte(s.b[s.i]) {
			s.i++
		}
		// Cut off at the end, a literal may not be whole.
		return s.i > start && s.i < len(s.b)
	}
}

func isLiteralByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.'
}
