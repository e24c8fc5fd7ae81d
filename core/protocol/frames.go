package protocol

import "encoding/json"

// Version is the wire protocol version this package speaks. Every frame
// carries it in its "v" field.
const Version = 1

// Frame types. docs/protocol.md specifies every frame and field.
const (
	// Client to server.
	FrameHello       = "hello"
	FrameSubscribe   = "subscribe"
	FrameUnsubscribe = "unsubscribe"
	FrameRefresh     = "refresh"
	FrameMutate      = "mutate"
	FramePong        = "pong" // the answer to a server ping

	// Server to client.
	FrameWelcome         = "welcome"
	FrameChanges         = "changes"
	FrameCaughtUp        = "caught-up"
	FrameReset           = "reset"
	FrameError           = "error"
	FrameUpdateAvailable = "update-available"
	FrameRefreshToken    = "refresh-token"
	FrameAck             = "ack"
	FrameReject          = "reject"
	FramePing            = "ping" // the server's heartbeat; clients answer pong
)

// Field limits of client frames, checked by DecodeClientFrame.
const (
	MaxIDLen       = 128  // subscription ids
	MaxNameLen     = 128  // resource names
	MaxBuildLen    = 128  // build ids
	MaxOriginLen   = 128  // origins
	MaxTokenLen    = 8192 // channel tokens
	MaxConditionsN = 64   // conditions of one subscribe, before the server's own (lower) limit
	MaxResourcesN  = 16   // resources of one subscribe
	MaxKeyLen      = 128  // mutation idempotency keys
)

// MaxTraceParentLen bounds a mutate frame's traceparent.
const MaxTraceParentLen = 128

// ClientFrame is a decoded client-to-server frame. Fields not used by a frame
// type are zero.
type ClientFrame struct {
	V    int    `json:"v"`
	Type string `json:"type"`

	// hello
	Build  string `json:"build,omitempty"`
	Origin string `json:"origin,omitempty"`
	Token  string `json:"token,omitempty"` // also refresh

	// subscribe, unsubscribe
	ID         string                     `json:"id,omitempty"`
	Resource   string                     `json:"resource,omitempty"`
	Resources  []string                   `json:"resources,omitempty"` // subscribe: several resources under one cursor
	Conditions map[string]json.RawMessage `json:"conditions,omitempty"`
	Cursor     string                     `json:"cursor,omitempty"`
	Limit      int                        `json:"limit,omitempty"`

	// mutate (Resource names the mutator's resource)
	Key  string          `json:"key,omitempty"`  // idempotency key, unique per principal and origin
	Seq  int64           `json:"seq,omitempty"`  // the client's sequence number of the mutation
	Name string          `json:"name,omitempty"` // the mutator
	Args json.RawMessage `json:"args,omitempty"` // the mutator's arguments, a JSON object
	At   int64           `json:"at,omitempty"`   // when the client made the mutation, Unix milliseconds
	// TraceParent is the W3C trace context of the client's span for the
	// mutation (a traceparent header value), "" if it has none.
	TraceParent string `json:"traceparent,omitempty"`

	ChannelFields // topic-subscribe, topic-unsubscribe, publish, presence-update (channel.go)
}

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

	ChannelLimits // app channels (channel.go)
}

// ServerFrame is a decoded server-to-client frame, for clients written in Go.
// Fields not used by a frame type are zero.
type ServerFrame struct {
	V    int    `json:"v"`
	Type string `json:"type"`

	Build  string  `json:"build,omitempty"`  // welcome, update-available
	Limits *Limits `json:"limits,omitempty"` // welcome
	// Principal is the connection's principal id (welcome); "" when the
	// connection is anonymous. Clients bind their local data to it.
	Principal string `json:"principal,omitempty"`
	// HeartbeatMS is how often, in milliseconds, the server sends a ping
	// frame on the connection (welcome); 0 from a server without heartbeat.
	// A client that receives no frame for two heartbeats treats the
	// connection as dead.
	HeartbeatMS int `json:"heartbeat_ms,omitempty"`

	ID      string  `json:"id,omitempty"`      // changes, caught-up, reset, error (if about a subscription); absent in polling responses
	Cursor  string  `json:"cursor,omitempty"`  // changes, caught-up, ack
	More    bool    `json:"more,omitempty"`    // polling responses: another page is ready now
	Entries []Entry `json:"entries,omitempty"` // changes, ack

	Key      string `json:"key,omitempty"`      // ack, reject: the mutation's idempotency key
	Replayed bool   `json:"replayed,omitempty"` // ack: the key was applied before; this is its recorded result

	Reason    ResetReason `json:"reason,omitempty"`     // reset
	Code      Code        `json:"code,omitempty"`       // error, reject
	Message   string      `json:"message,omitempty"`    // error, reject: short, fit to show a person
	Detail    string      `json:"detail,omitempty"`     // error, reject: for developers and logs; not stable
	ExpiresIn int         `json:"expires_in,omitempty"` // refresh-token: seconds until the token expires

	ChannelServerFields // topic-subscribed, message, presence, presence-diff, and errors about a topic (channel.go)
}
