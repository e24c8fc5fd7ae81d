package client

import "github.com/tidesync/tide/core/protocol"

// newer reports whether cursor a is strictly ahead of cursor b, the stored
// one. It is how the client keeps its applied cursor monotonic: a changes
// frame whose cursor is not newer than the stored one is a duplicate or
// older delivery and is dropped.
//
// Rules, in order:
//   - "" is no cursor: nothing is newer than a, when a is ""; any cursor is
//     newer than "".
//   - equal strings are not newer.
//   - if either does not parse (a cursor format this client does not know),
//     or the epochs differ (another change log: the server has reset the
//     scope), the server's word wins: a is newer.
//   - otherwise positions compare first; at the same position a change
//     cursor is newer than a snapshot cursor (the snapshot comes first),
//     and of two snapshot cursors the one with the larger number (Seq) is
//     newer: the server numbers a snapshot's cursors in the order it hands
//     them out, and seals where the snapshot stands.
func newer(a, b string) bool {
	if a == "" || a == b {
		return false
	}
	if b == "" {
		return true
	}
	ca, errA := protocol.ParseCursor(a)
	cb, errB := protocol.ParseCursor(b)
	if errA != nil || errB != nil || ca.Epoch != cb.Epoch {
		return true
	}
	if ca.Pos != cb.Pos {
		return ca.Pos > cb.Pos
	}
	switch {
	case ca.Snapshot && cb.Snapshot:
		return ca.Seq > cb.Seq
	case cb.Snapshot:
		return true // a change cursor at the snapshot's position: the snapshot is done
	default:
		return false // a snapshot at the position of a change cursor, or the same change cursor
	}
}
