package core

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tidesync/tide/core/feed"
)

// Entry is one change inside a changes frame, as a client sees it.
type Entry struct {
	Op       string          `json:"op"`                 // "upsert" or "delete"
	Key      string          `json:"key"`                // primary key, canonical text
	Row      json.RawMessage `json:"row,omitempty"`      // upserts: the row as a JSON object keyed by column
	Origin   string          `json:"origin,omitempty"`   // origin of the write, if it had one
	Resource string          `json:"resource,omitempty"` // absent: the subscription's resource
}

// Limits are the server limits announced in the welcome frame.
type Limits struct {
	MaxFrameBytes    int `json:"max_frame_bytes"`
	MaxSubscriptions int `json:"max_subscriptions"`
	FrameRate        int `json:"frame_rate"`  // sustained client frames per second
	FrameBurst       int `json:"frame_burst"` // client frames allowed at once above the rate
}

// ServerFrame is a decoded server-to-client frame, for clients written in Go.
// Fields not used by a frame type are zero.
type ServerFrame struct {
	V    int    `json:"v"`
	Type string `json:"type"`

	Build  string  `json:"build,omitempty"`  // welcome, update-available
	Limits *Limits `json:"limits,omitempty"` // welcome

	ID      string  `json:"id,omitempty"`      // changes, caught-up, reset, error (if about a subscription); absent in polling responses
	Cursor  string  `json:"cursor,omitempty"`  // changes, caught-up
	Entries []Entry `json:"entries,omitempty"` // changes

	Reason    string `json:"reason,omitempty"`     // reset
	Code      Code   `json:"code,omitempty"`       // error
	Message   string `json:"message,omitempty"`    // error
	ExpiresIn int    `json:"expires_in,omitempty"` // refresh-token: seconds until the token expires
}

// ErrBadServerFrame reports a server frame a client cannot use.
var ErrBadServerFrame = errors.New("tide: bad server frame")

// DecodeServerFrame parses one server frame and checks the fields its type
// requires. Unknown frame types are returned without error so that old
// clients tolerate new informational frames; callers ignore them.
//
// Entry rows of a changes frame may share data's memory: do not modify data
// while the frame is in use.
func DecodeServerFrame(data []byte) (ServerFrame, error) {
	f, ok := decodeChangesFast(data)
	if !ok {
		f = ServerFrame{}
		if err := json.Unmarshal(data, &f); err != nil {
			return ServerFrame{}, fmt.Errorf("%w: %v", ErrBadServerFrame, err)
		}
	}
	if f.V != ProtocolVersion {
		return f, fmt.Errorf("%w: protocol version %d", ErrBadServerFrame, f.V)
	}
	switch f.Type {
	case FrameChanges:
		if f.Cursor == "" {
			return f, fmt.Errorf("%w: changes without cursor", ErrBadServerFrame)
		}
		for _, e := range f.Entries {
			if e.Op != "upsert" && e.Op != "delete" {
				return f, fmt.Errorf("%w: entry op %q", ErrBadServerFrame, e.Op)
			}
			if e.Op == "upsert" && len(e.Row) == 0 {
				return f, fmt.Errorf("%w: upsert without row", ErrBadServerFrame)
			}
		}
	case FrameCaughtUp:
		if f.ID == "" || f.Cursor == "" {
			return f, fmt.Errorf("%w: caught-up needs id and cursor", ErrBadServerFrame)
		}
	case FrameReset:
		if f.ID == "" {
			return f, fmt.Errorf("%w: reset without id", ErrBadServerFrame)
		}
	case FrameError:
		if f.Code == "" {
			return f, fmt.Errorf("%w: error without code", ErrBadServerFrame)
		}
	}
	return f, nil
}

// entryBytes holds the encoded forms of one change, built once per change
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
		eb.upsert = appendEntry(make([]byte, 0, len(c.Row)+len(c.Key)+48), "upsert", c.Key, c.Row, c.Origin)
	} else {
		eb.delete = appendEntry(nil, "delete", c.Key, nil, c.Origin)
	}
	return eb
}

func appendEntry(b []byte, op, key string, row json.RawMessage, origin string) []byte {
	b = append(b, `{"op":"`...)
	b = append(b, op...)
	b = append(b, `","key":`...)
	b = appendJSONString(b, key)
	if row != nil {
		b = append(b, `,"row":`...)
		b = append(b, row...)
	}
	if origin != "" {
		b = appendField(b, "origin", origin)
	}
	return append(b, '}')
}
