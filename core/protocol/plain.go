package protocol

import "github.com/tidesync/tide/internal/jsontext"

// plainBytes reports whether s, the inside of a JSON string, holds no
// escape and no control character, so that it is the string's value as it
// is (a '"' cannot be inside one); and whether it is all ASCII, so that it
// needs no UTF-8 check. A row's text values are what the scanners of row
// filters and clients spend most of their time in.
func plainBytes(s []byte) (plain, ascii bool) {
	i, ascii := jsontext.EscapeIndex(s)
	return i == len(s), i == len(s) && ascii
}
