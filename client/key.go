package client

import (
	"fmt"

	"github.com/tidesync/tide/core/protocol"
)

// Key returns the text that identifies a row by its primary key's parts,
// in the resource's declared key order, as the server sends it and the
// local copy stores it (see protocol.EncodeKey): Key("t1") is "t1",
// Key(42) is "42", and a composite key such as Key("u1", "b7") is
// ["u1","b7"]. Use it wherever a row's key is passed (LocalTx.Get, Upsert
// and Delete, the keys of Subscription.Rows).
//
// A part is a string, a bool or an integer; any other value is written as
// fmt.Sprint writes it, which matches no row, since key columns have no
// other type. Key() is "".
func Key(parts ...any) string {
	if len(parts) == 0 {
		return ""
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		t, ok := protocol.KeyPartText(p)
		if !ok {
			t = fmt.Sprint(p)
		}
		texts[i] = t
	}
	return protocol.EncodeKey(texts...)
}

// KeyParts returns the n parts of a row's key text, as Key made it: the
// text itself for n = 1. It fails for a text that is not a key of n parts.
func KeyParts(key string, n int) ([]string, error) { return protocol.DecodeKey(key, n) }
