package protocol

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrBadKey is wrapped by the error DecodeKey returns for a text that is
// not the canonical key text of a tuple of the expected size.
var ErrBadKey = errors.New("not a canonical row key")

// EncodeKey returns the canonical text of a row key from the canonical
// texts of its parts (strings as they are, integers in decimal, bools
// "true" or "false"), in the resource's declared key order. This text
// identifies the row on the wire, in cursors and in clients' stores:
//
//   - a key of one part is that part's text, unchanged: "t1", "42";
//   - a key of several parts is the JSON array of their texts as JSON
//     strings, with no spaces: ["u1","b7"], ["42","true"].
//
// A part's JSON string escapes '"' and '\' with a backslash, the control
// characters U+0008, U+0009, U+000A, U+000C and U+000D as \b, \t, \n, \f
// and \r, the other control characters below U+0020 as \u00xx (lower-case
// hex), and nothing else: this is how Postgres (to_json) and JavaScript
// (JSON.stringify) write strings, so all three produce the same text, and
// every tuple has exactly one. EncodeKey panics if parts is empty.
func EncodeKey(parts ...string) string {
	switch len(parts) {
	case 0:
		panic("protocol: EncodeKey of no parts")
	case 1:
		return parts[0]
	}
	n := 1 + len(parts)*3
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKeyPart(b, p)
	}
	return string(append(b, ']'))
}

const hexDigits = "0123456789abcdef"

// appendKeyPart appends p as a JSON string, escaped as EncodeKey says.
func appendKeyPart(b []byte, p string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, p[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, p[start:]...)
	return append(b, '"')
}

// DecodeKey returns the n parts of a row key from its canonical text (see
// EncodeKey). It fails with an error wrapping ErrBadKey unless s is
// exactly EncodeKey of n parts: a composite key with spaces, another
// escaping of a character, or another number of parts is refused. A key
// of one part is any text.
func DecodeKey(s string, n int) ([]string, error) {
	switch {
	case n < 1:
		return nil, fmt.Errorf("%w: a key has at least one part, not %d", ErrBadKey, n)
	case n == 1:
		return []string{s}, nil
	}
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, fmt.Errorf("%w: a key of %d parts is a JSON array of strings", ErrBadKey, n)
	}
	parts := make([]string, 0, n)
	i := 1
	for {
		if i >= len(s) || s[i] != '"' {
			return nil, fmt.Errorf("%w: part %d is not a JSON string at byte %d", ErrBadKey, len(parts)+1, i)
		}
		p, next, err := scanKeyPart(s, i+1)
		if err != nil {
			return nil, fmt.Errorf("%w: part %d: %v", ErrBadKey, len(parts)+1, err)
		}
		parts = append(parts, p)
		i = next
		if i >= len(s) {
			return nil, fmt.Errorf("%w: unterminated array", ErrBadKey)
		}
		if s[i] == ']' {
			if i != len(s)-1 {
				return nil, fmt.Errorf("%w: text after the array", ErrBadKey)
			}
			break
		}
		if s[i] != ',' {
			return nil, fmt.Errorf("%w: want ',' or ']' at byte %d", ErrBadKey, i)
		}
		i++
	}
	if len(parts) != n {
		return nil, fmt.Errorf("%w: %d parts, want %d", ErrBadKey, len(parts), n)
	}
	return parts, nil
}

// scanKeyPart reads a canonical JSON string whose opening quote precedes
// s[i], returning its value and the index after its closing quote.
func scanKeyPart(s string, i int) (string, int, error) {
	var b []byte // nil while the part holds no escape
	start := i
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			if b == nil {
				return s[start:i], i + 1, nil
			}
			return string(append(b, s[start:i]...)), i + 1, nil
		case c < 0x20:
			return "", 0, fmt.Errorf("unescaped control character at byte %d", i)
		case c != '\\':
			i++
			continue
		}
		if i+1 >= len(s) {
			break
		}
		b = append(b, s[start:i]...)
		var r byte
		switch e := s[i+1]; e {
		case '"', '\\':
			r = e
		case 'b':
			r = '\b'
		case 't':
			r = '\t'
		case 'n':
			r = '\n'
		case 'f':
			r = '\f'
		case 'r':
			r = '\r'
		case 'u':
			if i+6 > len(s) || s[i+2:i+4] != "00" {
				return "", 0, fmt.Errorf("escape at byte %d is not canonical", i)
			}
			v, err := strconv.ParseUint(s[i+4:i+6], 16, 8)
			if err != nil || s[i+4:i+6] != string([]byte{hexDigits[v>>4], hexDigits[v&0xf]}) || v >= 0x20 ||
				v == '\b' || v == '\t' || v == '\n' || v == '\f' || v == '\r' {
				return "", 0, fmt.Errorf("escape at byte %d is not canonical", i)
			}
			b = append(b, byte(v))
			i += 6
			start = i
			continue
		default:
			return "", 0, fmt.Errorf("escape at byte %d is not canonical", i)
		}
		b = append(b, r)
		i += 2
		start = i
	}
	return "", 0, errors.New("unterminated string")
}

// KeyPartText returns the canonical text of a key part's value: a string
// as it is, an integer in decimal, a bool "true" or "false". It reports
// false for a value of another type.
func KeyPartText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.FormatInt(int64(x), 10), true
	case int8:
		return strconv.FormatInt(int64(x), 10), true
	case int16:
		return strconv.FormatInt(int64(x), 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint:
		return strconv.FormatUint(uint64(x), 10), true
	case uint8:
		return strconv.FormatUint(uint64(x), 10), true
	case uint16:
		return strconv.FormatUint(uint64(x), 10), true
	case uint32:
		return strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	}
	return "", false
}
