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
// paged: some of the scope's rows have been delivered, and once the
// snapshot ends, replay continues from Pos (the position of its first page).
//
// Where a snapshot stands within the scope is sealed by the server: Sealed
// is opaque outside it (package core seals and opens it), so a cursor
// reveals positions of the change log only, never a row's key. This package
// parses the structure and knows no secret.
//
// Clients never parse cursors; the Go client compares them only to enforce
// that its applied cursor never moves backwards, which is what Seq is for.
type Cursor struct {
	Epoch    string // the feed's epoch; a cursor of another epoch is unusable
	Pos      uint64 // replay resumes after this position
	Snapshot bool   // a snapshot is in progress
	// Seq numbers the snapshot cursors of one snapshot from 1, in the order
	// they were handed out: of two snapshot cursors at one position, the
	// one with the larger Seq is ahead.
	Seq uint64
	// Sealed is the snapshot's place within the scope, as the server sealed
	// it: opaque bytes, never empty in a snapshot cursor.
	Sealed string
}

// MaxCursorLen bounds a cursor string so a hostile one costs nothing to reject.
// Snapshot cursors past row keys of up to 650 bytes always fit; one past a
// longer key may not, and is then refused with CodeInvalidCursor when sent
// back (the snapshot starts over). A poll never hands one out.
const MaxCursorLen = 1024

// ErrBadCursor reports a cursor string that is not one tide produced.
var ErrBadCursor = errors.New("tide: malformed cursor")

// String encodes the cursor: "1.<epoch>.<pos>" for a change cursor,
// "2s.<epoch>.<pos>.<seq>.<base64url sealed>" for a snapshot cursor.
func (c Cursor) String() string {
	if !c.Snapshot {
		return string(AppendCursor(nil, c.Epoch, c.Pos))
	}
	b := make([]byte, 0, 3+len(c.Epoch)+2*21+base64.RawURLEncoding.EncodedLen(len(c.Sealed)))
	b = append(b, "2s."...)
	b = append(b, c.Epoch...)
	b = append(b, '.')
	b = strconv.AppendUint(b, c.Pos, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, c.Seq, 10)
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, []byte(c.Sealed))
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
// callers treat it as "no cursor" before calling ParseCursor. Snapshot
// cursors of protocol 1 ("1s."), which carried a row's key in the clear,
// are no longer accepted: a client holding one starts its snapshot over.
func ParseCursor(s string) (Cursor, error) {
	if s == "" || len(s) > MaxCursorLen {
		return Cursor{}, ErrBadCursor
	}
	parts := strings.Split(s, ".")
	var c Cursor
	switch {
	case parts[0] == "1" && len(parts) == 3:
	case parts[0] == "2s" && len(parts) == 5:
		c.Snapshot = true
		seq, ok := cursorUint(parts[3])
		if !ok || seq == 0 {
			return Cursor{}, ErrBadCursor
		}
		// The decoder skips CR and LF: a cursor has one spelling, so they
		// are refused first.
		if strings.ContainsAny(parts[4], "\r\n") {
			return Cursor{}, ErrBadCursor
		}
		sealed, err := base64.RawURLEncoding.Strict().DecodeString(parts[4])
		if err != nil || len(sealed) == 0 {
			return Cursor{}, ErrBadCursor
		}
		c.Seq, c.Sealed = seq, string(sealed)
	default:
		return Cursor{}, ErrBadCursor
	}
	if !ValidEpoch(parts[1]) {
		return Cursor{}, ErrBadCursor
	}
	c.Epoch = parts[1]
	pos, ok := cursorUint(parts[2])
	if !ok {
		return Cursor{}, ErrBadCursor
	}
	c.Pos = pos
	return c, nil
}

// cursorUint parses a decimal in its one spelling: digits, no sign, no
// leading zero.
func cursorUint(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	return n, true
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
