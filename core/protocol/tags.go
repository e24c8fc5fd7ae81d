package protocol

import (
	"fmt"
	"strings"
)

// tagSpec is a parsed `tide:"…"` struct tag.
type tagSpec struct {
	Column string
	PK     bool
	Scope  bool
	Skip   bool // tide:"-"
}

// maxColumnLen matches Postgres's identifier limit.
const maxColumnLen = 63

// parseTag parses a tide struct tag: a column name followed by options,
// `tide:"project_id,scope"`. Options are "pk" and "scope"; "-" alone skips the
// field. The column name must be a plain lower-case SQL identifier (letters,
// digits and underscores, not starting with a digit): it is then the same
// name quoted or unquoted in Postgres, and matches condition names exactly.
func parseTag(tag string) (tagSpec, error) {
	if tag == "-" {
		return tagSpec{Skip: true}, nil
	}
	parts := strings.Split(tag, ",")
	spec := tagSpec{Column: parts[0]}
	if err := ValidIdent(spec.Column); err != nil {
		return tagSpec{}, err
	}
	for _, opt := range parts[1:] {
		switch opt {
		case "pk":
			if spec.PK {
				return tagSpec{}, fmt.Errorf("option %q repeated", opt)
			}
			spec.PK = true
		case "scope":
			if spec.Scope {
				return tagSpec{}, fmt.Errorf("option %q repeated", opt)
			}
			spec.Scope = true
		default:
			return tagSpec{}, fmt.Errorf("unknown tag option %q (want pk or scope)", opt)
		}
	}
	return spec, nil
}

// ValidIdent checks a column, table or resource name: a plain lower-case
// SQL identifier of letters, digits and underscores, not starting with a
// digit, at most 63 bytes.
func ValidIdent(s string) error {
	if s == "" {
		return fmt.Errorf("empty column name")
	}
	if len(s) > maxColumnLen {
		return fmt.Errorf("column name %q is longer than %d bytes", Truncate(s, 16), maxColumnLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c == '_'
		digit := c >= '0' && c <= '9'
		if !letter && !(digit && i > 0) {
			return fmt.Errorf("column name %q must be lower-case letters, digits and underscores, not starting with a digit", Truncate(s, 32))
		}
	}
	return nil
}
