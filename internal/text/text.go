// Package text holds tide's checks and cuts of names and client text:
// the identifiers of columns, tables and resources, and quoting client
// input in error messages.
package text

import "fmt"

// MaxIdentLen is Postgres's identifier limit, in bytes.
const MaxIdentLen = 63

// Truncate shortens s to at most n bytes plus an ellipsis, for quoting
// client input in error messages.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ValidIdent checks a column, table or resource name: a plain lower-case
// SQL identifier of letters, digits and underscores, not starting with a
// digit, at most 63 bytes.
func ValidIdent(s string) error {
	if s == "" {
		return fmt.Errorf("empty column name")
	}
	if len(s) > MaxIdentLen {
		return fmt.Errorf("column name %q is longer than %d bytes", Truncate(s, 16), MaxIdentLen)
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
