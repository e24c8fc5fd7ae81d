package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

// TestChannelRefusals checks each refusal of a channel frame and its code,
// the limits of ChannelConfig included, each case on a connection of its
// own.
func TestChannelRefusals(t *testing.T) {
	cc := core.ChannelConfig{MaxMessageBytes: 64, MaxStateBytes: 32, PublishRate: 1, PublishBurst: 2, MaxTopics: 2, MaxPresence: 2}
	node := channelCluster(t, "memory", 1, cc)[0]
	big := json.RawMessage(`{"id":"` + strings.Repeat("x", 80) + `"}`)
	cases := []struct {
		name  string
		setup func(c *chanClient) // runs first; its frames must be accepted
		typ   string
		topic string
		data  any
		code  protocol.Code
	}{
		{name: "unknown channel", typ: protocol.FrameTopicSubscribe, topic: "nope:b1", code: protocol.CodeUnknownTopic},
		{name: "wrong shape", typ: protocol.FrameTopicSubscribe, topic: "board:b1:extra", code: protocol.CodeUnknownTopic},
		{name: "empty param", typ: protocol.FrameTopicSubscribe, topic: "board:", code: protocol.CodeUnknownTopic},
		{name: "subscribe denied", typ: protocol.FrameTopicSubscribe, topic: "board:b9", code: protocol.CodeForbidden},
		{name: "state too large", typ: protocol.FrameTopicSubscribe, topic: "board:b1", data: json.RawMessage(`"` + strings.Repeat("s", 40) + `"`), code: protocol.CodeMessageTooLarge},
		{name: "publish denied by policy", typ: protocol.FramePublish, topic: "board:b9", data: cursorMsg{ID: "a"}, code: protocol.CodeForbidden},
		{name: "channel without publish policy", typ: protocol.FramePublish, topic: "chat:b1", data: "hi", code: protocol.CodeForbidden},
		{name: "message too large", typ: protocol.FramePublish, topic: "board:b1", data: big, code: protocol.CodeMessageTooLarge},
		{name: "unknown field", typ: protocol.FramePublish, topic: "board:b1", data: map[string]any{"id": "a", "z": 1}, code: protocol.CodeInvalidMessage},
		{name: "wrong type", typ: protocol.FramePublish, topic: "board:b1", data: map[string]any{"id": 5}, code: protocol.CodeInvalidMessage},
		{name: "schema's own check", typ: protocol.FramePublish, topic: "board:b1", data: cursorMsg{ID: "a", X: -1}, code: protocol.CodeInvalidMessage},
		{name: "publish on unknown channel", typ: protocol.FramePublish, topic: "nope:1", data: 1, code: protocol.CodeUnknownTopic},
		{
			name: "publish rate", typ: protocol.FramePublish, topic: "board:b1", data: cursorMsg{ID: "a"}, code: protocol.CodePublishRateLimit,
			setup: func(c *chanClient) {
				for range 8 {
					c.send(protocol.FramePublish, "board:b1", cursorMsg{ID: "a"})
				}
			},
		},
		{name: "update without subscribe", typ: protocol.FramePresenceUpdate, topic: "board:b1", data: 1, code: protocol.CodeNotTopicMember},
		{name: "unsubscribe without subscribe", typ: protocol.FrameTopicUnsubscribe, topic: "board:b1", code: protocol.CodeNotTopicMember},
		{
			name: "update without presence", typ: protocol.FramePresenceUpdate, topic: "chat:b1", data: 1, code: protocol.CodeNoPresence,
			setup: func(c *chanClient) { c.subscribeAck("chat:b1") },
		},
		{
			name: "update too large", typ: protocol.FramePresenceUpdate, topic: "board:b5", data: strings.Repeat("s", 40), code: protocol.CodeMessageTooLarge,
			setup: func(c *chanClient) { c.join("board:b5", nil) },
		},
		{
			name: "duplicate", typ: protocol.FrameTopicSubscribe, topic: "board:b6", code: protocol.CodeDuplicateSub,
			setup: func(c *chanClient) { c.join("board:b6", nil) },
		},
		{
			name: "too many topics", typ: protocol.FrameTopicSubscribe, topic: "board:b3", code: protocol.CodeTooManyTopics,
			setup: func(c *chanClient) { c.join("board:b1", nil); c.join("board:b2", nil) },
		},
		{
			name: "presence full", typ: protocol.FrameTopicSubscribe, topic: "board:b4", code: protocol.CodePresenceFull,
			setup: func(c *chanClient) {
				for _, u := range []string{"m1", "m2"} {
					dialChan(c.t, node, u, "b4").join("board:b4", nil)
				}
			},
		},
	}
	// A member leaves a board once the server has seen its connection
	// close, which can be after the next case starts: the cases that join
	// a board each join boards of their own, so that none finds another
	// case's members there (MaxPresence is 2).
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialChan(t, node, "amy", "b1", "b2", "b3", "b4", "b5", "b6")
			if tc.setup != nil {
				tc.setup(c)
			}
			c.send(tc.typ, tc.topic, tc.data)
			c.waitError(tc.topic, tc.code)
		})
	}
}

// subscribeAck subscribes to a topic and waits for the acknowledgement.
func (c *chanClient) subscribeAck(topic string) {
	c.t.Helper()
	c.send(protocol.FrameTopicSubscribe, topic, nil)
	c.waitFor("topic-subscribed "+topic, func() bool { return c.acked[topic] })
}

// TestChannelWelcomeLimits checks the limits announced in welcome.
func TestChannelWelcomeLimits(t *testing.T) {
	cc := core.ChannelConfig{MaxMessageBytes: 100, PublishRate: 3, MaxTopics: 5, MaxPresence: 7}
	node := channelCluster(t, "memory", 1, cc)[0]
	c := dialRaw(t, node.url, "amy")
	w := c.Hello(protocol.ClientFrame{})
	got := w.Limits.ChannelLimits
	want := protocol.ChannelLimits{MaxMessageBytes: 100, MaxStateBytes: 512, PublishRate: 3, PublishBurst: 6, MaxTopics: 5, MaxPresence: 7}
	if got != want {
		t.Fatalf("welcome channel limits %+v, want %+v", got, want)
	}
}

// TestChannelEnginePublishRefusals checks Engine.Publish's errors.
func TestChannelEnginePublishRefusals(t *testing.T) {
	node := channelCluster(t, "memory", 1, core.ChannelConfig{})[0]
	ctx := context.Background()
	for _, tc := range []struct {
		topic string
		msg   any
		code  protocol.Code
	}{
		{"nope:1", 1, protocol.CodeUnknownTopic},
		{"board:b1", map[string]int{"q": 1}, protocol.CodeInvalidMessage},
		{"board:b1", json.RawMessage(`{"id":`), protocol.CodeInvalidMessage},
		{"chat:b1", strings.Repeat("x", 5000), protocol.CodeMessageTooLarge},
		{"board:b1", func() {}, protocol.CodeInvalidMessage},
	} {
		var pe *protocol.Error
		err := node.e.Publish(ctx, tc.topic, tc.msg)
		if !errors.As(err, &pe) || pe.Code != tc.code {
			t.Errorf("Publish(%s, %T) = %v, want code %s", tc.topic, tc.msg, err, tc.code)
		}
	}
	if err := node.e.Publish(ctx, "chat:b1", "fine"); err != nil {
		t.Errorf("Publish: %v", err)
	}
}

// TestChannelRegistration checks channel declarations.
func TestChannelRegistration(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	for _, tc := range []struct {
		pattern, name string
		want          error
	}{
		{"room:{id}", "", nil},
		{"room:{other}", "", core.ErrDuplicateChannel},
		{"room:{id}:cursor", "", nil},
		{"team:{a}:{b}", "teams", nil},
		{"", "", core.ErrInvalidChannel},
		{"{id}", "", core.ErrInvalidChannel},
		{"x:{id}:{id}", "", core.ErrInvalidChannel},
		{"x:{bad-name}", "", core.ErrInvalidChannel},
		{"x::y", "", core.ErrInvalidChannel},
		{"x:{open", "", core.ErrInvalidChannel},
		{"9x:{id}", "", core.ErrInvalidChannel},
		{"y:{id}", "bad name", core.ErrInvalidChannel},
		{strings.Repeat("a", 300), "", core.ErrInvalidChannel},
	} {
		err := core.RegisterChannel(e, core.Channel[json.RawMessage]{Pattern: tc.pattern, Name: tc.name})
		if !errors.Is(err, tc.want) {
			t.Errorf("RegisterChannel(%q, %q) = %v, want %v", tc.pattern, tc.name, err, tc.want)
		}
	}
}

// TestChannelMembersOfADeadNodeExpire: a node that stops announcing (it
// died without saying goodbye) has its members removed after the TTL.
func TestChannelMembersOfADeadNodeExpire(t *testing.T) {
	f := memfeed.New(memfeed.Options{})
	cc := core.ChannelConfig{PresenceInterval: 20e6, PresenceTTL: 100e6} // 20 ms, 100 ms
	node := channelClusterOn(t, f, cc)
	c := dialChan(t, node, "amy", "b1")
	c.join("board:b1", nil)
	ghost := feed.Broadcast{Kind: feed.BroadcastAnnounce, Node: "ghost", Topic: "board:b1", TTL: 100,
		Members: []protocol.Member{{ID: "ghost.1", Principal: "ghost", State: json.RawMessage(`1`)}}}
	if err := f.Broadcast(context.Background(), ghost); err != nil {
		t.Fatal(err)
	}
	c.waitPresence("board:b1", "amy=", "ghost=1")
	c.waitPresence("board:b1", "amy=")
	if st := node.e.ChannelStats(); st.Expired != 1 {
		t.Errorf("Expired = %d, want 1", st.Expired)
	}
}

// TestChannelSlowSubscriberIsBounded: a subscriber that does not read a
// busy topic is held to the send buffer: frames beyond it are dropped and,
// past MaxDrops, the connection is closed with 1013.
func TestChannelSlowSubscriberIsBounded(t *testing.T) {
	f := memfeed.New(memfeed.Options{})
	node := channelClusterOnConfig(t, core.Config{Feed: f, SendBuffer: 16 << 10, MaxDrops: 4})
	slow := dialRaw(t, node.url, "sid", "b1")
	slow.Hello(protocol.ClientFrame{})
	joinRaw(slow, "chat:b1", false)
	msg := strings.Repeat("m", 3000)
	ctx := context.Background()
	for i := 0; node.e.ChannelStats().Dropped <= 4; i++ {
		if i == 200_000 {
			t.Fatal("200,000 messages published and no drop")
		}
		if err := node.e.Publish(ctx, "chat:b1", msg); err != nil {
			t.Fatal(err)
		}
	}
	for {
		_, _, err := slow.ReadFrame()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			if ce.Code != int(protocol.CloseOverloaded) {
				t.Fatalf("closed with %d, want 1013", ce.Code)
			}
			return
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
}

// TestChannelReauthorize: Engine.Reauthorize runs topic policies again; a
// topic the policy now refuses is left (its member leaves every list) with
// a forbidden error carrying the topic.
func TestChannelReauthorize(t *testing.T) {
	var revoked sync.Map // principal ids no longer allowed
	e, err := core.New(core.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	policy := func(_ context.Context, r authz.Request) error {
		if _, no := revoked.Load(r.Principal.ID); no {
			return authz.ErrForbidden
		}
		return nil
	}
	if err := core.RegisterChannel(e, core.Channel[json.RawMessage]{Pattern: "room:{id}", Subscribe: policy, Presence: true}); err != nil {
		t.Fatal(err)
	}
	node := serveChanNode(t, e)
	amy, bo := dialChan(t, node, "amy"), dialChan(t, node, "bo")
	amy.join("room:1", nil)
	bo.join("room:1", nil)
	bo.waitPresence("room:1", "amy=", "bo=")
	revoked.Store("amy", true)
	n, err := e.Reauthorize(context.Background(), "amy")
	if err != nil || n != 1 {
		t.Fatalf("Reauthorize = %d, %v; want 1 ended", n, err)
	}
	amy.waitError("room:1", protocol.CodeForbidden)
	bo.waitPresence("room:1", "bo=")
	if n, _ := e.Reauthorize(context.Background(), "bo"); n != 0 {
		t.Errorf("Reauthorize(bo) ended %d", n)
	}
}

// TestChannelDeadConnectionLeaves: a connection that stops answering (no
// close, no pongs) is swept at the idle timeout, and its member leaves.
func TestChannelDeadConnectionLeaves(t *testing.T) {
	node := channelClusterOnConfig(t, core.Config{IdleTimeout: 2 * time.Second})
	watcher := dialChan(t, node, "wes", "b1")
	watcher.join("board:b1", nil)
	zombie := dialRaw(t, node.url, "zed", "b1")
	zombie.Hello(protocol.ClientFrame{})
	joinRaw(zombie, "board:b1", true)
	watcher.waitPresence("board:b1", "wes=", "zed=")
	// zombie reads nothing more, so it answers no ping.
	watcher.waitPresence("board:b1", "wes=")
}

// viewerState is the declared presence state of TestChannelPresenceState.
type viewerState struct {
	Name   string `json:"name"`
	Typing bool   `json:"typing,omitempty"`
}

// Validate refuses an empty name, to test a state's own check.
func (v *viewerState) Validate() error {
	if v.Name == "" {
		return errors.New("name is required")
	}
	return nil
}

// TestChannelPresenceState: a channel that declares its presence state
// type refuses, on subscribe and on update, a state that does not decode
// into it or fails its Validate, with invalid_message naming the channel;
// a member may have no state; State without Presence is refused.
func TestChannelPresenceState(t *testing.T) {
	e, err := core.New(core.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := core.RegisterChannel(e, core.Channel[json.RawMessage]{Pattern: "doc:{id}", State: viewerState{}}); !errors.Is(err, core.ErrInvalidChannel) {
		t.Fatalf("State without Presence: %v, want ErrInvalidChannel", err)
	}
	if err := core.RegisterChannel(e, core.Channel[json.RawMessage]{Pattern: "room:{id}", Subscribe: authz.Allow, Presence: true, State: viewerState{}}); err != nil {
		t.Fatal(err)
	}
	node := serveChanNode(t, e)
	amy, bo := dialChan(t, node, "amy"), dialChan(t, node, "bo")
	amy.join("room:1", viewerState{Name: "Amy"})
	bo.join("room:1", nil) // no state
	bo.waitPresence("room:1", `amy={"name":"Amy"}`, "bo=")

	for i, bad := range []any{
		map[string]any{"name": "Cy", "colour": "red"}, // unknown field
		map[string]any{"name": 7},                     // wrong type
		viewerState{},                                 // fails Validate
	} {
		topic := fmt.Sprintf("room:bad%d", i)
		cy := dialChan(t, node, "cy")
		cy.send(protocol.FrameTopicSubscribe, topic, bad)
		cy.waitError(topic, protocol.CodeInvalidMessage)
		cy.mu.Lock()
		msg := cy.errors[len(cy.errors)-1].Message
		cy.mu.Unlock()
		if !strings.Contains(msg, "presence state of channel room") {
			t.Errorf("state %v: message %q does not name the channel", bad, msg)
		}
	}
	amy.send(protocol.FramePresenceUpdate, "room:1", map[string]any{"name": "Amy", "typing": "yes"})
	amy.waitError("room:1", protocol.CodeInvalidMessage)
	amy.send(protocol.FramePresenceUpdate, "room:1", viewerState{Name: "Amy", Typing: true})
	bo.waitPresence("room:1", `amy={"name":"Amy","typing":true}`, "bo=")
}
