package jsontext

import "encoding/binary"

// Bytes repeated in every lane of a word, for scanPlain.
const (
	lanes1    = 0x0101010101010101
	lanesHigh = 0x8080808080808080
)

// EscapeIndex returns the index of the first byte of s that a JSON string
// must escape (a '"', a '\\' or a control character below 0x20), or len(s)
// if there is none: the run before it can be copied into a JSON string as
// it is. ascii reports that the run is all ASCII, so valid UTF-8 with no
// further check. It looks at eight bytes at a time.
func EscapeIndex(s []byte) (i int, ascii bool) {
	i, high := scanPlain(s)
	return i, !high
}

// scanPlain returns EscapeIndex(s), and whether a byte before it is 0x80 or
// more.
func scanPlain(s []byte) (int, bool) {
	var high uint64
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		// A lane below 0x20, or equal to '"' or '\\' (zero once xored with
		// it), sets its high bit here; a lane of 0x80 or more cannot, and
		// no lane sets it when none is one of those (the borrows start
		// only at such a lane).
		q := x ^ ('"' * lanes1)
		b := x ^ ('\\' * lanes1)
		if ((x-0x20*lanes1)&^x|(q-lanes1)&^q|(b-lanes1)&^b)&lanesHigh != 0 {
			break // the escape is in this word: found below
		}
		high |= x
	}
	for ; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' {
			break
		}
		high |= uint64(c)
	}
	return i, high&lanesHigh != 0
}
