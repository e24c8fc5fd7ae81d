package protocol

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// Cursor is the decoded form of the opaque cursor string a client stores and
// sends back. A change cursor says "every change of the scope up to Pos has
// been delivered". A snapshot cursor is handed out while a snapshot is being
// paged: the rows with keys up to After have been delivered, and once the
// snapshot ends, replay continues from Pos (the position of its first page).
//
// Clients never parse cursors; the Go client compares them only to enforce
// that its applied cursor never moves backwards.
type Cursor struct {
	Epoch    string // the feed's epoch; a cursor of another epoch is unusable
	Pos      uint64 // replay resumes after this position
	Snapshot bool   // a snapshot is in progress
	After    string // snapshot cursors: key of the last row delivered
}

// MaxCursorLen bounds a cursor string so a hostile one costs nothing to reject.
const MaxCursorLen = 1024

// ErrBadCursor reports a cursor string that is not one tide produced.
var ErrBadCursor = errors.New("tide: malformed cursor")

// String encodes the cursor: "1.<epoch>.<pos>" for a change cursor,
// "1s.<epoch>.<pos>.<base64url key>" for a snapshot cursor.
func (c Cursor) String() string {
	var b []byte
	if c.Snapshot {
		b = append(b, "1s."...)
		b = append(b, c.Epoch...)
		b = append(b, '.')
		b = strconv.AppendUint(b, uint64(c.Pos), 10)
	} else {
		b = AppendCursor(b, c.Epoch, c.Pos)
	}
	if c.Snapshot {
		b = append(b, '.')
		b = base64.RawURLEncoding.AppendEncode(b, []byte(c.After))
	}
	return string(b)
}

// AppendCursor appends the change cursor of pos (no JSON escaping is needed:
// epochs are letters, digits, '-' and '_').
func AppendCursor(b []byte, epoch string, pos uint64) []byte {
	b = append(b, "1."...)
	b = append(b, epoch...)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(pos), 10)
}

// ParseCursor decodes a cursor string. The empty string is not a cursor;
// callers treat it as "no cursor" before calling ParseCursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" || len(s) > MaxCursorLen {
		return Cursor{}, ErrBadCursor
	}
	parts := strings.Split(s, ".")
	var c Cursor
	switch {
	case parts[0] == "1" && len(parts) == 3:
	case parts[0] == "1s" && len(parts) == 4:
		c.Snapshot = true
		key, err := base64.RawURLEncoding.Strict().DecodeString(parts[3])
		if err != nil {
			return Cursor{}, ErrBadCursor
		}
		c.After = string(key)
	default:
		return Cursor{}, ErrBadCursor
	}
	if !ValidEpoch(parts[1]) {
		return Cursor{}, ErrBadCursor
	}
	c.Epoch = parts[1]
	pos, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil || (len(parts[2]) > 1 && parts[2][0] == '0') {
		return Cursor{}, ErrBadCursor
	}
	c.Pos = pos
	return c, nil
}

// ValidEpoch reports whether s is a valid feed epoch: 1 to 64 ASCII letters,
// digits, '-' or '_'. Feeds produce only such epochs, so a cursor carries its
// epoch with no escaping.
func ValidEpoch(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			return false
		}
	}
	return true
}
