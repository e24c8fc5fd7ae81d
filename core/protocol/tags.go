package protocol

import (
	"fmt"
	"strings"

	"github.com/tidesync/tide/internal/text"
)

// tagSpec is a parsed `tide:"…"` struct tag.
type tagSpec struct {
	Column string
	PK     bool
	Scope  bool
	Skip   bool // tide:"-"
}

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
	if err := text.ValidIdent(spec.Column); err != nil {
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
