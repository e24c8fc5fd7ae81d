package feed

import "context"

// CursorKeySize is the length of the secret a CursorKeyer returns: an
// AES-256 key.
const CursorKeySize = 32

// CursorKeyer is implemented by feeds that hold a secret known to every node
// reading the same change log. The engine seals the snapshot cursors it hands
// out with it (AES-256-GCM), so that a cursor reveals no row key, and any node
// of the log can resume a snapshot another node paged.
//
// An engine whose feed does not implement it seals with a random key of its
// own process: its snapshot cursors then do not survive a restart and are
// not accepted by another node; a client holding one gets invalid_cursor and
// starts the snapshot over.
type CursorKeyer interface {
	// CursorKey returns CursorKeySize random bytes, the same for the
	// change log's lifetime on every node that reads it. The engine calls
	// it once, when it starts; the error of a feed that is not installed
	// wraps ErrNotInstalled.
	CursorKey(ctx context.Context) ([]byte, error)
}
