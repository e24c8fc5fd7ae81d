package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/tidesync/tide/internal/jsontext"
)

// App channel frame types: authorized broadcast topics with presence,
// beside synced resources. Messages on a topic are ephemeral: the server
// stores none and replays none after a reconnect.
const (
	// Client to server.
	FrameTopicSubscribe   = "topic-subscribe"   // topic, state (optional: the presence state to join with)
	FrameTopicUnsubscribe = "topic-unsubscribe" // topic
	FramePublish          = "publish"           // topic, data
	FramePresenceUpdate   = "presence-update"   // topic, state

	// Server to client.
	FrameTopicSubscribed = "topic-subscribed" // topic, presence (whether the topic tracks presence)
	FrameMessage         = "message"          // topic, data, from
	FramePresence        = "presence"         // topic, members: the full presence list
	FramePresenceDiff    = "presence-diff"    // topic, joins, leaves
)

// Field limits of channel frames, checked by DecodeClientFrame before the
// server's own (lower) limits.
const (
	MaxTopicLen   = 256       // topic names
	MaxStateBytes = 4 << 10   // a presence state
	MaxDataBytes  = 256 << 10 // a published message, before the server's MaxMessageBytes
)

// Channel refusal codes, sent in error frames that carry the topic.
const (
	CodeUnknownTopic     Code = "unknown_topic"        // no channel of the server matches the topic name
	CodeInvalidMessage   Code = "invalid_message"      // the published data does not match the channel's message schema
	CodeMessageTooLarge  Code = "message_too_large"    // the published data or presence state exceeds the server's limit
	CodeTooManyTopics    Code = "too_many_topics"      // the connection, or its principal across its connections, holds the maximum number of topic subscriptions
	CodePresenceFull     Code = "presence_full"        // the topic's presence list holds the maximum number of members
	CodeTooManyPresences Code = "too_many_presences"   // the principal holds the maximum number of members of the topic's presence list (one per connection)
	CodeNoPresence       Code = "no_presence"          // presence-update on a topic that does not track presence
	CodeNotTopicMember   Code = "not_subscribed"       // unsubscribe or presence-update of a topic the connection is not subscribed to
	CodePublishRateLimit Code = "publish_rate_limited" // the connection publishes, updates its presence or joins presence topics faster than the server allows; the frame was dropped
)

// ChannelFields are the fields of channel client frames, embedded in
// ClientFrame.
type ChannelFields struct {
	Topic string          `json:"topic,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`  // publish: the message, any JSON value
	State json.RawMessage `json:"state,omitempty"` // topic-subscribe, presence-update: the presence state, any JSON value
}

// Member is one entry of a topic's presence list: one subscribed
// connection. A principal with several connections is several members.
type Member struct {
	ID        string          `json:"id"`              // the member's id, unique across the cluster
	Principal string          `json:"principal"`       // the principal's id; "" for the anonymous principal
	State     json.RawMessage `json:"state,omitempty"` // the app's state of the member (a cursor, "typing"...)
}

// ChannelServerFields are the fields of channel server frames, embedded in
// ServerFrame.
type ChannelServerFields struct {
	Topic    string          `json:"topic,omitempty"`    // every channel frame, and errors about a topic
	Data     json.RawMessage `json:"data,omitempty"`     // message
	From     string          `json:"from,omitempty"`     // message: the publishing principal; absent when the server published
	Presence bool            `json:"presence,omitempty"` // topic-subscribed: the topic tracks presence (a presence frame follows)
	Members  []Member        `json:"members,omitempty"`  // presence
	Joins    []Member        `json:"joins,omitempty"`    // presence-diff: members that joined or changed state
	Leaves   []Member        `json:"leaves,omitempty"`   // presence-diff: members that left (id and principal only)
}

// ChannelLimits are the channel limits announced in the welcome frame,
// embedded in Limits. Zero fields are not announced.
type ChannelLimits struct {
	MaxMessageBytes int `json:"max_message_bytes,omitempty"` // published data, encoded
	MaxStateBytes   int `json:"max_state_bytes,omitempty"`   // a presence state, encoded
	PublishRate     int `json:"publish_rate,omitempty"`      // sustained publishes (and presence updates) per second per connection
	PublishBurst    int `json:"publish_burst,omitempty"`     // publishes allowed at once above the rate
	MaxTopics       int `json:"max_topics,omitempty"`        // topic subscriptions per connection
	MaxPresence     int `json:"max_presence,omitempty"`      // members of one topic's presence list
}

// appendChannelLimits appends the channel limits of l to a welcome frame's
// limits object.
func appendChannelLimits(b []byte, l ChannelLimits) []byte {
	for _, f := range [...]struct {
		name string
		v    int
	}{
		{"max_message_bytes", l.MaxMessageBytes},
		{"max_state_bytes", l.MaxStateBytes},
		{"publish_rate", l.PublishRate},
		{"publish_burst", l.PublishBurst},
		{"max_topics", l.MaxTopics},
		{"max_presence", l.MaxPresence},
	} {
		if f.v == 0 {
			continue
		}
		b = append(b, ',', '"')
		b = append(b, f.name...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, int64(f.v), 10)
	}
	return b
}

// validateChannel checks a channel client frame; Validate calls it.
func (f *ClientFrame) validateChannel() *Error {
	if err := checkRequired("topic", f.Topic, MaxTopicLen); err != nil {
		return err
	}
	switch f.Type {
	case FramePublish:
		if len(bytes.TrimSpace(f.Data)) == 0 {
			return Errorf(CodeBadFrame, "publish needs data")
		}
		if len(f.Data) > MaxDataBytes {
			return Errorf(CodeMessageTooLarge, "data is larger than %d bytes", MaxDataBytes)
		}
	case FramePresenceUpdate:
		if len(bytes.TrimSpace(f.State)) == 0 {
			return Errorf(CodeBadFrame, "presence-update needs a state")
		}
	}
	if len(f.State) > MaxStateBytes {
		return Errorf(CodeMessageTooLarge, "state is larger than %d bytes", MaxStateBytes)
	}
	return nil
}

// checkChannelServerFrame checks the fields a channel server frame needs;
// DecodeServerFrame calls it.
func checkChannelServerFrame(f *ServerFrame) error {
	switch f.Type {
	case FrameTopicSubscribed, FramePresence:
		if f.Topic == "" {
			return fmt.Errorf("%w: %s without topic", ErrBadServerFrame, f.Type)
		}
	case FrameMessage:
		if f.Topic == "" || len(f.Data) == 0 {
			return fmt.Errorf("%w: message needs topic and data", ErrBadServerFrame)
		}
	case FramePresenceDiff:
		if f.Topic == "" {
			return fmt.Errorf("%w: presence-diff without topic", ErrBadServerFrame)
		}
	default:
		return nil
	}
	for _, list := range [][]Member{f.Members, f.Joins, f.Leaves} {
		for _, m := range list {
			if m.ID == "" {
				return fmt.Errorf("%w: presence member without id", ErrBadServerFrame)
			}
		}
	}
	return nil
}

// TopicSubscribed encodes the server's acceptance of a topic subscription.
// presence says a presence frame with the full list follows.
func TopicSubscribed(topic string, presence bool) []byte {
	b := appendFrameStart(nil, FrameTopicSubscribed)
	b = appendField(b, "topic", topic)
	if presence {
		b = append(b, `,"presence":true`...)
	}
	return append(b, '}')
}

// Message encodes one message of a topic. data is valid JSON (the server
// checked it when it was published); from is the publishing principal, or
// "" when the server published it.
func Message(topic string, data json.RawMessage, from string) []byte {
	b := appendFrameStart(make([]byte, 0, len(data)+len(topic)+len(from)+64), FrameMessage)
	b = appendField(b, "topic", topic)
	if from != "" {
		b = appendField(b, "from", from)
	}
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// Presence encodes a topic's full presence list.
func Presence(topic string, members []Member) []byte {
	b := appendFrameStart(nil, FramePresence)
	b = appendField(b, "topic", topic)
	b = appendMembers(b, "members", members, true)
	return append(b, '}')
}

// PresenceDiff encodes the members that joined (or changed state) and left
// a topic since the last presence or presence-diff frame.
func PresenceDiff(topic string, joins, leaves []Member) []byte {
	b := appendFrameStart(nil, FramePresenceDiff)
	b = appendField(b, "topic", topic)
	if len(joins) > 0 {
		b = appendMembers(b, "joins", joins, false)
	}
	if len(leaves) > 0 {
		b = appendMembers(b, "leaves", leaves, false)
	}
	return append(b, '}')
}

func appendMembers(b []byte, name string, ms []Member, always bool) []byte {
	if len(ms) == 0 && !always {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, `":[`...)
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = jsontext.AppendString(b, m.ID)
		b = appendField(b, "principal", m.Principal)
		if len(m.State) > 0 {
			b = append(b, `,"state":`...)
			b = append(b, m.State...)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// TopicError encodes e as an error frame about a topic.
func TopicError(topic string, e *Error) []byte {
	b := appendFrameStart(nil, FrameError)
	b = appendField(b, "topic", topic)
	b = appendField(b, "code", string(e.Code))
	b = appendField(b, "message", e.Message)
	return append(b, '}')
}
