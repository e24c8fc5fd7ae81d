package feed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tidesync/tide/core/protocol"
)

// BroadcastKind says what a Broadcast carries.
type BroadcastKind uint8

// Broadcast kinds.
const (
	// BroadcastMessage is a message published on Topic (Data, From).
	BroadcastMessage BroadcastKind = iota + 1
	// BroadcastJoin says Members joined Topic on Node, or changed state.
	BroadcastJoin
	// BroadcastLeave says Members left Topic on Node.
	BroadcastLeave
	// BroadcastAnnounce lists members Node still has on Topic (a node's
	// list may take several announcements). Receivers keep each listed
	// member for TTL milliseconds, so the members of a node that stops
	// announcing, because it died, expire.
	BroadcastAnnounce
	// BroadcastSync asks every node with members on Topic to announce them
	// now: a node sends it when Topic gets its first subscriber there.
	BroadcastSync
)

// MaxBroadcastBytes bounds the encoding of one Broadcast (EncodeBroadcast).
// Every Broadcaster carries broadcasts up to this size (it fits in a
// Postgres NOTIFY payload); senders split what is larger.
const MaxBroadcastBytes = 7600

// Broadcast is one ephemeral event of an app channel, sent to every node of
// a cluster: a message, or a change of a topic's presence. Broadcasts are
// not stored: a node that is not listening when one is sent never sees it.
type Broadcast struct {
	Kind    BroadcastKind     `json:"k"`
	Node    string            `json:"n"`             // the sending engine, which skips its own broadcasts
	Topic   string            `json:"t"`             // the topic name
	From    string            `json:"f,omitempty"`   // message: the publishing principal; "" when the server published
	Data    json.RawMessage   `json:"d,omitempty"`   // message: the payload, valid JSON
	Members []protocol.Member `json:"m,omitempty"`   // join, leave, announce
	TTL     int64             `json:"ttl,omitempty"` // announce: milliseconds the members are kept without a newer announcement
}

// ErrBroadcastTooLarge is returned by EncodeBroadcast for a broadcast whose
// encoding exceeds MaxBroadcastBytes.
var ErrBroadcastTooLarge = errors.New("feed: broadcast larger than MaxBroadcastBytes")

// EncodeBroadcast returns the wire form of b shared by the Broadcaster
// implementations (JSON), or ErrBroadcastTooLarge.
func EncodeBroadcast(b Broadcast) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "<" stays one byte: a payload's size is what the app sent
	if err := enc.Encode(b); err != nil {
		return nil, fmt.Errorf("feed: encode broadcast: %w", err)
	}
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(data) > MaxBroadcastBytes {
		return nil, ErrBroadcastTooLarge
	}
	return data, nil
}

// DecodeBroadcast parses what EncodeBroadcast produced. It never panics; a
// payload that is not a well-formed broadcast is an error.
func DecodeBroadcast(data []byte) (Broadcast, error) {
	var b Broadcast
	if len(data) > MaxBroadcastBytes {
		return b, ErrBroadcastTooLarge
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return b, errors.New("feed: a broadcast is a JSON object")
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return Broadcast{}, fmt.Errorf("feed: decode broadcast: %w", err)
	}
	if b.Kind < BroadcastMessage || b.Kind > BroadcastSync {
		return Broadcast{}, fmt.Errorf("feed: broadcast kind %d", b.Kind)
	}
	if b.Node == "" || b.Topic == "" {
		return Broadcast{}, errors.New("feed: a broadcast needs a node and a topic")
	}
	if b.Kind == BroadcastMessage && len(b.Data) == 0 {
		return Broadcast{}, errors.New("feed: a message broadcast needs data")
	}
	for _, m := range b.Members {
		if m.ID == "" {
			return Broadcast{}, errors.New("feed: a broadcast member needs an id")
		}
	}
	if b.TTL < 0 {
		return Broadcast{}, errors.New("feed: negative broadcast ttl")
	}
	return b, nil
}

// Broadcaster is implemented by feeds (or buses) that carry the ephemeral
// events of app channels between the nodes of a cluster: messages and
// presence. Nothing is stored: delivery is at most once, to the nodes
// listening when it is sent. The engine sends every broadcast of a node
// from one goroutine, one at a time, and relies on a sender's broadcasts
// arriving in the order they were sent.
//
// The in-memory feed delivers them in process, to the engines sharing it;
// the Postgres feed with NOTIFY on a channel of its own (no table); the
// NATS bus on a core NATS subject (no JetStream storage).
type Broadcaster interface {
	// Broadcast sends b to the watchers of every node, this one included,
	// outside any transaction of the app. It returns an error, and nothing
	// is sent, when b's encoding exceeds MaxBroadcastBytes or the transport
	// refused it.
	Broadcast(ctx context.Context, b Broadcast) error

	// WatchBroadcasts returns once the watcher listens: every broadcast
	// sent after it returned reaches fn, on a goroutine of the
	// implementation, one call at a time, in the order each sender sent
	// them, until ctx ends or the feed closes. Broadcasts sent while a
	// watcher reconnects are lost. fn must not block for long.
	WatchBroadcasts(ctx context.Context, fn func(Broadcast)) error
}
