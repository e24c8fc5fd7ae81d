package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tidesync/tide/core/protocol"
)

// Message is one message received on an app channel topic. Messages are
// ephemeral: those published while the client was disconnected are not
// delivered later.
type Message struct {
	Topic string
	From  string          // the publishing principal's id; "" when the server published
	Data  json.RawMessage // the message, valid JSON
}

// TopicOptions configure Client.JoinTopic. Callbacks run on the client's
// frame-handling goroutine, in arrival order: they must not block for long.
type TopicOptions struct {
	// State is the presence state to join with (encoded as JSON), on topics
	// that track presence. Zero value: no state.
	State any
	// OnMessage is called with every message of the topic.
	OnMessage func(Message)
	// OnPresence is called with the topic's full presence list whenever it
	// changes (the server's list on every (re)subscribe, then each diff
	// applied to it).
	OnPresence func(members []protocol.Member)
	// OnError is called when the server refuses a frame about the topic
	// (its code says why: forbidden, invalid_message...). A refused
	// subscribe leaves the topic unsubscribed until the next connection.
	OnError func(err *protocol.Error)
}

// ErrNotConnected is returned by Topic.Publish when the client has no
// welcomed connection: a message is never queued for later.
var ErrNotConnected = errors.New("client: not connected")

// ErrTopicLeft is returned by the methods of a Topic after Leave.
var ErrTopicLeft = errors.New("client: topic left")

// Topic is the client's subscription to one app channel topic. It is
// subscribed on every connection of the client, with its latest presence
// state, until Leave. Safe for concurrent use.
type Topic struct {
	c    *Client
	name string
	opts TopicOptions

	mu      sync.Mutex
	state   json.RawMessage
	members map[string]protocol.Member
	left    bool
}

// topics are a client's joined topics (Client.topics).
type topics struct {
	mu     sync.Mutex
	byName map[string]*Topic
}

// JoinTopic subscribes to an app channel topic, now if the client is
// connected and on every later connection. It returns an error if the
// topic is already joined or State does not encode.
func (c *Client) JoinTopic(name string, opts TopicOptions) (*Topic, error) {
	t := &Topic{c: c, name: name, opts: opts, members: map[string]protocol.Member{}}
	if opts.State != nil {
		b, err := json.Marshal(opts.State)
		if err != nil {
			return nil, fmt.Errorf("client: topic %s state: %w", name, err)
		}
		t.state = b
	}
	c.topics.mu.Lock()
	if c.topics.byName == nil {
		c.topics.byName = map[string]*Topic{}
	}
	if c.topics.byName[name] != nil {
		c.topics.mu.Unlock()
		return nil, fmt.Errorf("client: topic %s is already joined", name)
	}
	c.topics.byName[name] = t
	c.topics.mu.Unlock()
	if s := c.welcomedSession(); s != nil {
		_ = s.write(t.subscribeFrame())
	}
	return t, nil
}

// Name returns the topic's name.
func (t *Topic) Name() string { return t.name }

func (t *Topic) subscribeFrame() protocol.ClientFrame {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameTopicSubscribe}
	f.Topic, f.State = t.name, t.state
	return f
}

// Publish sends data (encoded as JSON) to every subscriber of the topic.
// It returns ErrNotConnected without a welcomed connection; a refusal by
// the server arrives later through OnError.
func (t *Topic) Publish(ctx context.Context, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("client: publish on %s: %w", t.name, err)
	}
	return t.send(ctx, protocol.FramePublish, b)
}

// SetState replaces the client's presence state on the topic (encoded as
// JSON): sent now if connected, and used on every later subscribe.
func (t *Topic) SetState(ctx context.Context, state any) error {
	b, err := json.Marshal(state)
	if err != nil {
		return fmt.Errorf("client: presence state of %s: %w", t.name, err)
	}
	t.mu.Lock()
	t.state = b
	t.mu.Unlock()
	err = t.send(ctx, protocol.FramePresenceUpdate, b)
	if errors.Is(err, ErrNotConnected) {
		return nil // the next subscribe carries it
	}
	return err
}

func (t *Topic) send(ctx context.Context, typ string, payload json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	left := t.left
	t.mu.Unlock()
	if left {
		return ErrTopicLeft
	}
	s := t.c.welcomedSession()
	if s == nil {
		return ErrNotConnected
	}
	f := protocol.ClientFrame{V: protocol.Version, Type: typ}
	f.Topic = t.name
	if typ == protocol.FramePublish {
		f.Data = payload
	} else {
		f.State = payload
	}
	return s.write(f)
}

// Members returns the topic's presence list as last received, sorted by
// member id.
func (t *Topic) Members() []protocol.Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.membersLocked()
}

func (t *Topic) membersLocked() []protocol.Member {
	out := make([]protocol.Member, 0, len(t.members))
	for _, m := range t.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b protocol.Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Leave unsubscribes from the topic and forgets it.
func (t *Topic) Leave() error {
	t.mu.Lock()
	if t.left {
		t.mu.Unlock()
		return nil
	}
	t.left = true
	t.mu.Unlock()
	c := t.c
	c.topics.mu.Lock()
	if c.topics.byName[t.name] == t {
		delete(c.topics.byName, t.name)
	}
	c.topics.mu.Unlock()
	if s := c.welcomedSession(); s != nil {
		f := protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameTopicUnsubscribe}
		f.Topic = t.name
		return s.write(f)
	}
	return nil
}

// welcomedSession returns the current connection if it was welcomed.
func (c *Client) welcomedSession() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil || !c.sess.ready {
		return nil
	}
	return c.sess
}

// subscribeTopics subscribes every joined topic on a welcomed connection.
func (s *session) subscribeTopics() {
	c := s.c
	c.topics.mu.Lock()
	ts := make([]*Topic, 0, len(c.topics.byName))
	for _, t := range c.topics.byName {
		ts = append(ts, t)
	}
	c.topics.mu.Unlock()
	for _, t := range ts {
		t.mu.Lock()
		clear(t.members) // the new connection's presence frame replaces them
		t.mu.Unlock()
		_ = s.write(t.subscribeFrame())
	}
}

// channelFrame handles a channel frame, or an error frame about a topic.
// It reports whether f was one.
func (s *session) channelFrame(f protocol.ServerFrame) bool {
	switch f.Type {
	case protocol.FrameMessage, protocol.FramePresence, protocol.FramePresenceDiff, protocol.FrameTopicSubscribed:
	case protocol.FrameError:
		if f.Topic == "" {
			return false
		}
	default:
		return false
	}
	c := s.c
	c.topics.mu.Lock()
	t := c.topics.byName[f.Topic]
	c.topics.mu.Unlock()
	if t == nil {
		return true // a topic left meanwhile
	}
	switch f.Type {
	case protocol.FrameMessage:
		if t.opts.OnMessage != nil {
			t.opts.OnMessage(Message{Topic: f.Topic, From: f.From, Data: f.Data})
		}
	case protocol.FramePresence, protocol.FramePresenceDiff:
		t.mu.Lock()
		if f.Type == protocol.FramePresence {
			clear(t.members)
		}
		for _, m := range f.Leaves {
			delete(t.members, m.ID)
		}
		for _, m := range append(f.Members, f.Joins...) {
			t.members[m.ID] = m
		}
		list := t.membersLocked()
		t.mu.Unlock()
		if t.opts.OnPresence != nil {
			t.opts.OnPresence(list)
		}
	case protocol.FrameError:
		if f.Code == protocol.CodeDuplicateSub {
			return true // a join racing the connection's own resubscribe: subscribed once all the same
		}
		c.log.Warn("tide client: topic frame refused", "topic", f.Topic, "code", f.Code, "message", f.Message)
		if t.opts.OnError != nil {
			t.opts.OnError(&protocol.Error{Code: f.Code, Message: f.Message})
		}
	}
	return true
}
