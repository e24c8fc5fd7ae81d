package protocol

import (
	"errors"
	"fmt"
)

// Decimal is an exact decimal number held as its canonical text, the form
// Postgres prints a numeric value in (numeric's text output, value::text):
// an optional minus sign, the integer digits without leading zeros ("0"
// when there are none), then optionally a point and the fraction digits,
// trailing zeros included, for the scale is part of the value ("12.30").
// There is no exponent and no negative zero. "NaN", "Infinity" and
// "-Infinity" are the special values of Postgres 14 and later.
//
// On the wire a Decimal is a JSON string of that text, never a JSON
// number, so no value is ever rounded through a float. It is the Go type of
// a numeric column; arithmetic is left to a decimal package of the app's
// choice, which converts from and to the text. The zero Decimal, "", is
// written as "0".
type Decimal string

// ErrBadDecimal is wrapped by the errors of ParseDecimal and of decoding a
// Decimal whose text is not canonical.
var ErrBadDecimal = errors.New("not a canonical decimal")

// ParseDecimal returns s as a Decimal if it is in the canonical form, and
// an error wrapping ErrBadDecimal otherwise.
func ParseDecimal(s string) (Decimal, error) {
	if !validDecimal(s) {
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return "", fmt.Errorf("%w: %q (want Postgres numeric text such as \"-12.30\", \"0\" or \"NaN\")", ErrBadDecimal, s)
	}
	return Decimal(s), nil
}

// String returns the decimal's text; "0" for the zero Decimal.
func (d Decimal) String() string {
	if d == "" {
		return "0"
	}
	return string(d)
}

// MarshalText implements encoding.TextMarshaler: the canonical text, or an
// error wrapping ErrBadDecimal if d is not canonical.
func (d Decimal) MarshalText() ([]byte, error) {
	if d == "" {
		return []byte("0"), nil
	}
	if _, err := ParseDecimal(string(d)); err != nil {
		return nil, err
	}
	return []byte(d), nil
}

// UnmarshalText implements encoding.TextUnmarshaler: it accepts the
// canonical text only.
func (d *Decimal) UnmarshalText(b []byte) error {
	v, err := ParseDecimal(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// validDecimal reports whether s is a canonical decimal text.
func validDecimal(s string) bool {
	switch s {
	case "NaN", "Infinity", "-Infinity":
		return true
	}
	i, neg := 0, false
	if i < len(s) && s[i] == '-' {
		i, neg = i+1, true
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intDigits := s[start:i]
	if len(intDigits) == 0 || len(intDigits) > 1 && intDigits[0] == '0' {
		return false
	}
	nonzero := intDigits != "0"
	if i < len(s) {
		if s[i] != '.' {
			return false
		}
		i++
		fstart := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if s[i] != '0' {
				nonzero = true
			}
			i++
		}
		if i == fstart || i != len(s) {
			return false
		}
	}
	return !neg || nonzero // no negative zero
}
