package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/jsontext"
	"github.com/tidesync/tide/internal/text"
)

// Channel declares an app channel: a family of broadcast topics whose names
// follow Pattern, with optional presence. Messages are ephemeral: they are
// delivered to the topic's subscribers on every node at the moment they
// are published, never stored in the change log, never replayed after a
// disconnect. T is the message schema: published data must decode into a
// T with no unknown fields (and pass T's Validate method, if it has one
// with the signature Validate() error). Use json.RawMessage for any JSON.
type Channel[T any] struct {
	// Pattern is the topic names of the channel: literal segments and
	// {param} segments separated by ':', such as "board:{board_id}". A topic
	// "board:b7" is of this channel, with param board_id = "b7". Required;
	// the first segment is literal.
	Pattern string
	// Name is the channel's name in policy requests (authz.Request.Resource)
	// and token grants. Zero value: the first segment of Pattern ("board").
	Name string
	// Subscribe decides who may subscribe to which topics. It is called with
	// Request.Resource set to Name and Request.Conditions mapping each param
	// to its value, so resource policies such as
	// authz.RequireClaim("board_id", "boards") apply as they are. It runs
	// after the token's grants allowed the topic, and again on
	// Engine.Reauthorize (a topic it then refuses is left). Zero value:
	// every subscription is refused (deny by default).
	Subscribe authz.Policy
	// Publish decides who may publish from a client, with the same request
	// as Subscribe; it runs for every published message. Zero value:
	// clients may not publish (the server still may, with Engine.Publish).
	Publish authz.Policy
	// Presence makes the topics track who is subscribed: each subscriber is
	// a member with a small state of the app's choosing, sent to every
	// subscriber as a full list on subscribe and as diffs afterwards.
	Presence bool
	// State is a zero value of the Go type of a member's presence state,
	// such as Cursor{}, declaring that type the way T declares the
	// messages': a state a client sends must decode into it with no
	// unknown fields (and pass its Validate method, if it has one with the
	// signature Validate() error), and Engine.TypeScript gives it as the
	// channel's presence type. A member may have no state (JSON null).
	// It requires Presence. Zero value: any JSON state (unknown in
	// TypeScript).
	State any
}

// channel is the engine's untyped view of a registered channel.
type channel struct {
	name     string
	pattern  string
	segments []string // literal text, or "{param}"
	params   []string // param names in segment order
	sub, pub authz.Policy
	presence bool
	validate func(data json.RawMessage) error // nil: any JSON
	msg      reflect.Type                     // T, for Engine.TypeScript
	// validateState checks a presence state (nil: any JSON), of type
	// state (nil: undeclared).
	validateState func(state json.RawMessage) error
	state         reflect.Type
}

// RegisterChannel declares a channel on the engine. It returns an error
// wrapping ErrInvalidChannel for a bad pattern or name, or
// ErrDuplicateChannel when a channel with the same pattern shape exists.
// Channels may be registered before or after the engine starts serving.
func RegisterChannel[T any](e *Engine, ch Channel[T]) error {
	c, err := parsePattern(ch.Pattern)
	if err != nil {
		return fmt.Errorf("%w: register channel %q: %v", ErrInvalidChannel, ch.Pattern, err)
	}
	if ch.Name != "" {
		if err := text.ValidIdent(ch.Name); err != nil {
			return fmt.Errorf("%w: register channel %q: name: %v", ErrInvalidChannel, ch.Pattern, err)
		}
		c.name = ch.Name
	}
	c.sub, c.pub, c.presence = guardPolicy(ch.Subscribe), guardPolicy(ch.Publish), ch.Presence
	c.msg = reflect.TypeFor[T]()
	c.validate = schemaCheck(c.msg)
	if ch.State != nil {
		if !ch.Presence {
			return fmt.Errorf("%w: register channel %q: State declares a presence state, but Presence is false", ErrInvalidChannel, ch.Pattern)
		}
		c.state = reflect.TypeOf(ch.State)
		c.validateState = schemaCheck(c.state)
	}
	return e.chans.add(c)
}

// schemaCheck returns the check of JSON data against Go type t (nil for
// json.RawMessage: any JSON): it must decode into a t with no unknown
// fields, hold one JSON value, and pass t's Validate method if it has one.
func schemaCheck(t reflect.Type) func(data json.RawMessage) error {
	if t == reflect.TypeFor[json.RawMessage]() {
		return nil
	}
	return func(data json.RawMessage) error {
		v := reflect.New(t)
		d := json.NewDecoder(bytes.NewReader(data))
		d.DisallowUnknownFields()
		if err := d.Decode(v.Interface()); err != nil {
			return err
		}
		if d.More() {
			return errors.New("data holds more than one JSON value")
		}
		if val, ok := v.Interface().(interface{ Validate() error }); ok {
			if err := val.Validate(); err != nil {
				return appWordsError{err}
			}
		}
		return nil
	}
}

// parsePattern parses a channel's topic pattern.
func parsePattern(p string) (*channel, error) {
	if p == "" {
		return nil, errors.New("Pattern is required")
	}
	if len(p) > protocol.MaxTopicLen {
		return nil, fmt.Errorf("longer than %d bytes", protocol.MaxTopicLen)
	}
	c := &channel{pattern: p, segments: strings.Split(p, ":")}
	seen := map[string]bool{}
	for i, s := range c.segments {
		if name, ok := strings.CutPrefix(s, "{"); ok {
			name, ok = strings.CutSuffix(name, "}")
			if !ok || i == 0 {
				return nil, fmt.Errorf("segment %q: the first segment is literal, a param is {name}", s)
			}
			if err := text.ValidIdent(name); err != nil {
				return nil, fmt.Errorf("param %q: %v", name, err)
			}
			if seen[name] {
				return nil, fmt.Errorf("param %q appears twice", name)
			}
			seen[name] = true
			c.params = append(c.params, name)
			continue
		}
		if s == "" || strings.ContainsAny(s, "{}") {
			return nil, fmt.Errorf("segment %q: literal segments are non-empty and hold no braces", s)
		}
		if err := protocol.CheckText("segment", s, protocol.MaxTopicLen); err != nil {
			return nil, err
		}
	}
	c.name = c.segments[0]
	if err := text.ValidIdent(c.name); err != nil {
		return nil, fmt.Errorf("first segment %q: %v (or set Name)", c.name, err)
	}
	return c, nil
}

// shape is the pattern with param names erased: two channels of one shape
// would claim the same topics.
func (c *channel) shape() string {
	parts := make([]string, len(c.segments))
	for i, s := range c.segments {
		if strings.HasPrefix(s, "{") {
			s = "{}"
		}
		parts[i] = s
	}
	return strings.Join(parts, ":")
}

// match returns the params of topic if it is a topic of c.
func (c *channel) match(topic []string) (map[string][]string, bool) {
	if len(topic) != len(c.segments) {
		return nil, false
	}
	var params map[string][]string
	for i, s := range c.segments {
		if !strings.HasPrefix(s, "{") {
			if topic[i] != s {
				return nil, false
			}
			continue
		}
		if topic[i] == "" {
			return nil, false
		}
		if params == nil {
			params = make(map[string][]string, len(c.params))
		}
		params[s[1:len(s)-1]] = []string{topic[i]}
	}
	return params, true
}

// topicRequest is a topic resolved to its channel.
type topicRequest struct {
	ch  *channel
	req authz.Request
}

// resolveTopic finds the channel of a topic name.
func (e *Engine) resolveTopic(topic string, p authz.Principal) (topicRequest, *protocol.Error) {
	if err := protocol.CheckText("topic", topic, protocol.MaxTopicLen); err != nil || topic == "" {
		return topicRequest{}, protocol.Errorf(protocol.CodeUnknownTopic, "no channel has topic %q", text.Truncate(topic, 64))
	}
	ch, params := e.chans.lookup(topic)
	if ch == nil {
		return topicRequest{}, protocol.Errorf(protocol.CodeUnknownTopic, "no channel has topic %q", text.Truncate(topic, 64))
	}
	return topicRequest{ch: ch, req: authz.Request{Principal: p, Resource: ch.name, Conditions: params}}, nil
}

// authorizeTopic runs policy (nil denies) for tr, bounded by 10 s and the
// engine's life.
func (e *Engine) authorizeTopic(policy authz.Policy, tr topicRequest, what string) *protocol.Error {
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	return e.authorizeTopicCtx(ctx, policy, tr, what)
}

// authorizeTopicCtx runs policy (nil denies) for tr.
func (e *Engine) authorizeTopicCtx(ctx context.Context, policy authz.Policy, tr topicRequest, what string) *protocol.Error {
	if policy == nil {
		return protocol.Errorf(protocol.CodeForbidden, "%s on channel %s is not allowed", what, tr.ch.name)
	}
	if err := policy(ctx, tr.req); err != nil {
		te := ErrorFor(err)
		if te.Code == protocol.CodeUnavailable {
			e.cfg.Logger.Error("tide: channel policy failed", "channel", tr.ch.name, "err", err)
			te = protocol.Errorf(protocol.CodeUnavailable, "the policy of channel %s failed; retry later", tr.ch.name)
		}
		return te
	}
	return nil
}

// appWordsError is an error the app wrote for a person (a message type's
// Validate).
type appWordsError struct{ err error }

func (e appWordsError) Error() string { return e.err.Error() }
func (e appWordsError) Unwrap() error { return e.err }

// mismatch says for a person why data does not decode into a channel's
// message type, in JSON's terms or the app's words, never Go's.
func mismatch(err error, what string) string {
	var aw appWordsError
	if errors.As(err, &aw) {
		return aw.Error()
	}
	if m, ok := jsontext.DescribeError(err, what); ok {
		return m
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + field
	}
	return "it does not decode"
}

// checkMessage checks a message's size and schema.
func (e *Engine) checkMessage(ch *channel, data json.RawMessage) *protocol.Error {
	if n := e.cfg.Channels.MaxMessageBytes; len(data) > n {
		return protocol.Errorf(protocol.CodeMessageTooLarge, "messages are limited to %d bytes", n)
	}
	if !json.Valid(data) {
		return protocol.Errorf(protocol.CodeInvalidMessage, "data is not valid JSON")
	}
	if ch.validate != nil {
		if err := ch.validate(data); err != nil {
			return presentedf(protocol.CodeInvalidMessage, "data does not match channel "+ch.name+": "+mismatch(err, "the message"), "data does not match channel %s: %v", ch.name, err)
		}
	}
	return nil
}

// checkStateSchema checks a presence state (not empty) against the
// channel's declared state type.
func checkStateSchema(ch *channel, state json.RawMessage) *protocol.Error {
	if ch.validateState == nil || state == nil {
		return nil
	}
	if err := ch.validateState(state); err != nil {
		return presentedf(protocol.CodeInvalidMessage, "state does not match the presence state of channel "+ch.name+": "+mismatch(err, "the state"), "state does not match the presence state of channel %s: %v", ch.name, err)
	}
	return nil
}

// Publish sends msg to every subscriber of topic, on every node. msg is
// encoded as JSON (a json.RawMessage or []byte is used as it is) and must
// match the channel's message schema. It does not wait for delivery: a
// message is ephemeral, sent to the subscribers present now and never
// stored. It returns a *protocol.Error with CodeUnknownTopic,
// CodeInvalidMessage or CodeMessageTooLarge for a message it refuses, and
// ErrDraining after Shutdown. Safe for concurrent use.
func (e *Engine) Publish(ctx context.Context, topic string, msg any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.Draining() {
		return ErrDraining
	}
	var data json.RawMessage
	switch m := msg.(type) {
	case json.RawMessage:
		data = m
	case []byte:
		data = m
	default:
		b, err := json.Marshal(msg)
		if err != nil {
			return protocol.Errorf(protocol.CodeInvalidMessage, "encode message: %v", err)
		}
		data = b
	}
	tr, perr := e.resolveTopic(topic, authz.Anonymous)
	if perr != nil {
		return perr
	}
	if perr := e.checkMessage(tr.ch, data); perr != nil {
		return perr
	}
	e.chans.publish(topic, compactJSON(data), "")
	return nil
}

// compactJSON returns data without insignificant whitespace (it is valid).
func compactJSON(data json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, data) != nil {
		return data
	}
	return b.Bytes()
}

// ChannelConfig configures app channels (Config.Channels). Every field
// documents its zero-value default.
type ChannelConfig struct {
	// MaxMessageBytes bounds one published message, encoded as JSON. It is
	// at most 6 KiB, so a message travels between nodes in one Postgres
	// NOTIFY. Zero value means 4 KiB.
	MaxMessageBytes int
	// MaxStateBytes bounds one member's presence state, encoded. Zero value
	// means 512.
	MaxStateBytes int
	// PublishRate is the sustained number of publishes and presence updates
	// per second one connection may send; beyond it they are dropped with
	// publish_rate_limited. Zero value means 20.
	PublishRate int
	// PublishBurst is how many publishes a connection may send at once above
	// PublishRate. Zero value means 2 × PublishRate.
	PublishBurst int
	// MaxTopics bounds the topic subscriptions of one connection. Zero value
	// means 64.
	MaxTopics int
	// MaxPresence bounds the members of one topic's presence list, as this
	// node knows it; a subscriber beyond it is refused with presence_full.
	// Zero value means 1000.
	MaxPresence int
	// MaxTopicsPerPrincipal bounds the topic subscriptions of one
	// principal across its connections to this node; one beyond it is
	// refused with too_many_topics. The anonymous principal has MaxTopics
	// per connection only. Zero value means 256.
	MaxTopicsPerPrincipal int
	// MaxPresencePerPrincipal bounds one principal's members of one topic's
	// presence list on this node (each of its connections subscribed to the
	// topic is a member), so that one user cannot fill the list and lock
	// the others out; one beyond it is refused with too_many_presences.
	// The anonymous principal has MaxPresence only. Zero value means 8.
	MaxPresencePerPrincipal int
	// PresenceJoinRate is the sustained number of presence topics one
	// connection may join per second; a join beyond it is refused with
	// publish_rate_limited. Each join and leave is sent to every member of
	// the topic, so this bounds what a client toggling its subscription
	// makes the server send; a leave is never refused, but takes a join's
	// token when there is one. Zero value means 2.
	PresenceJoinRate int
	// PresenceJoinBurst is how many presence topics a connection may join
	// at once above PresenceJoinRate (on connect, a client joins all its
	// topics). Zero value means 16.
	PresenceJoinBurst int
	// PresenceInterval is how often each node announces its members of
	// every topic to the other nodes. A node that stops announcing (it
	// died) has its members removed PresenceTTL after its last announcement.
	// Zero value means 10 s.
	PresenceInterval time.Duration
	// PresenceTTL is how long a node keeps another node's member without a
	// newer announcement. Zero value means 3 × PresenceInterval.
	PresenceTTL time.Duration
	// BroadcastQueue bounds the broadcasts a node has queued for the other
	// nodes; past it new ones are dropped and counted
	// (ChannelStats.BroadcastsDropped). Zero value means 4096.
	BroadcastQueue int
}

func (c ChannelConfig) withDefaults() ChannelConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxMessageBytes, 4<<10)
	def(&c.MaxStateBytes, 512)
	def(&c.PublishRate, 20)
	def(&c.PublishBurst, 2*c.PublishRate)
	def(&c.MaxTopics, 64)
	def(&c.MaxPresence, 1000)
	def(&c.MaxTopicsPerPrincipal, 256)
	def(&c.MaxPresencePerPrincipal, 8)
	def(&c.PresenceJoinRate, 2)
	def(&c.PresenceJoinBurst, 16)
	def(&c.BroadcastQueue, 4096)
	if c.PresenceInterval == 0 {
		c.PresenceInterval = 10 * time.Second
	}
	if c.PresenceTTL == 0 {
		c.PresenceTTL = 3 * c.PresenceInterval
	}
	return c
}

func (c ChannelConfig) validate() error {
	switch {
	case c.MaxMessageBytes < 0 || c.MaxMessageBytes > 6<<10:
		return errors.New("Channels.MaxMessageBytes must be between 1 and 6144")
	case c.MaxStateBytes < 0 || c.MaxStateBytes > protocol.MaxStateBytes:
		return fmt.Errorf("Channels.MaxStateBytes must be between 1 and %d", protocol.MaxStateBytes)
	case c.PublishRate < 0 || c.PublishBurst < 0 || c.MaxTopics < 0 || c.MaxPresence < 0 || c.BroadcastQueue < 0,
		c.MaxTopicsPerPrincipal < 0 || c.MaxPresencePerPrincipal < 0 || c.PresenceJoinRate < 0 || c.PresenceJoinBurst < 0:
		return errors.New("Channels limits must not be negative")
	case c.PresenceInterval < 0 || c.PresenceTTL < c.PresenceInterval:
		return errors.New("Channels.PresenceTTL must be at least PresenceInterval")
	}
	return nil
}

func (c ChannelConfig) limits() protocol.ChannelLimits {
	return protocol.ChannelLimits{
		MaxMessageBytes: c.MaxMessageBytes, MaxStateBytes: c.MaxStateBytes,
		PublishRate: c.PublishRate, PublishBurst: c.PublishBurst,
		MaxTopics: c.MaxTopics, MaxPresence: c.MaxPresence,
	}
}
