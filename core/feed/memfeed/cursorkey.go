package memfeed

import "context"

// CursorKey implements feed.CursorKeyer: the feed's own random key, drawn
// by New. Engines sharing the feed share it; like the feed's epoch, it does
// not outlive the process.
func (f *Feed) CursorKey(context.Context) ([]byte, error) {
	return append([]byte(nil), f.cursorKey[:]...), nil
}
