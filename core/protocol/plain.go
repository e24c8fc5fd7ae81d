package protocol

import "encoding/binary"

// Bytes repeated in every lane of a word, for plainBytes.
const (
	lanes1    = 0x0101010101010101
	lanesHigh = 0x8080808080808080
)

// plainBytes reports whether s, the inside of a JSON string, holds no
// escape and no control character (no '\\', no byte below 0x20), so that
// it is the string's value as it is; and whether it is all ASCII, so that
// it needs no UTF-8 check. It looks at eight bytes at a time: a row's text
// values are what the scanners of row filters and clients spend most of
// their time in.
func plainBytes(s []byte) (plain, ascii bool) {
	var high uint64
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		// A lane below 0x20, or equal to '\\' (zero once xored with it),
		// sets its high bit here; a lane of 0x80 or more cannot, and no
		// lane sets it when none is either (the borrows start only at
		// such a lane).
		y := x ^ ('\\' * lanes1)
		if ((x-0x20*lanes1)&^x|(y-lanes1)&^y)&lanesHigh != 0 {
			return false, false
		}
		high |= x
	}
	for ; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '\\' {
			return false, false
		}
		high |= uint64(c)
	}
	return true, high&lanesHigh == 0
}
