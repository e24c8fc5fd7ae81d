package core

import (
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// and shared by every subscription it reaches.
type entryBytes struct {
	upsert []byte  // the change as an upsert entry (upserts only)
	delete []byte  // the change as a delete entry (deletes only; a hidden upsert gets view.hiddenDelete)
	view   rowView // what row filters need, computed on first use (pages.go)
}

// encodeEntries encodes c for the wire.
func encodeEntries(c *feed.Change) entryBytes {
	var eb entryBytes
	if c.Op == feed.OpUpsert {
		eb.upsert = protocol.AppendEntry(make([]byte, 0, len(c.Row)+len(c.Key)+48), "upsert", c.Key, c.Row, c.Origin)
	} else {
		eb.delete = protocol.AppendEntry(nil, "delete", c.Key, nil, c.Origin)
	}
	return eb
}
