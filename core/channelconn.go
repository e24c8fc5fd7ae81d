package core

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/text"
)

// handleChannel handles a topic-subscribe, topic-unsubscribe, publish or
// presence-update frame. Refusals are error frames carrying the topic.
func (c *conn) handleChannel(f protocol.ClientFrame) {
	var err *protocol.Error
	switch f.Type {
	case protocol.FrameTopicSubscribe:
		err = c.topicSubscribe(f.Topic, f.State)
	case protocol.FrameTopicUnsubscribe:
		err = c.e.chans.unsubscribe(c, f.Topic)
	case protocol.FramePublish:
		err = c.publish(f.Topic, f.Data)
	case protocol.FramePresenceUpdate:
		err = c.presenceUpdate(f.Topic, f.State)
	}
	if err != nil {
		c.sendFrame(protocol.TopicError(f.Topic, err))
	}
}

// checkState checks a presence state's size; an empty state, or JSON
// null, is no state (nil).
func (c *conn) checkState(state json.RawMessage) (json.RawMessage, *protocol.Error) {
	if len(bytes.TrimSpace(state)) == 0 {
		return nil, nil
	}
	state = compactJSON(state)
	if string(state) == "null" {
		return nil, nil
	}
	if n := c.e.cfg.Channels.MaxStateBytes; len(state) > n {
		return nil, protocol.Errorf(protocol.CodeMessageTooLarge, "presence states are limited to %d bytes", n)
	}
	return state, nil
}

func (c *conn) topicSubscribe(topic string, state json.RawMessage) *protocol.Error {
	e := c.e
	tr, err := e.resolveTopic(topic, c.currentPrincipal())
	if err != nil {
		return err
	}
	if state, err = c.checkState(state); err != nil {
		return err
	}
	if err := checkStateSchema(tr.ch, state); err != nil {
		return err
	}
	if err := e.authorizeTopic(tr.ch.sub, tr, "subscribing"); err != nil {
		return err
	}
	if !e.chans.ensureStarted() {
		return ErrDraining
	}
	return e.chans.subscribe(c, tr.ch, topic, state)
}

// subscribe adds c to topic and, for presence topics, to its members. It
// refuses what would take c or its principal over a bound: topics per
// connection and per principal, members per topic and per principal in a
// topic, and presence joins per second.
func (h *chanHub) subscribe(c *conn, ch *channel, topic string, state json.RawMessage) *protocol.Error {
	cfg := &h.e.cfg.Channels
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.isEnding() {
		return nil
	}
	ct := h.conns[c]
	if ct == nil {
		ct = newConnTopics(cfg)
	}
	if ct.subs[topic] != nil {
		return protocol.Errorf(protocol.CodeDuplicateSub, "topic %q is already subscribed", topic)
	}
	if len(ct.subs) >= cfg.MaxTopics {
		return protocol.Errorf(protocol.CodeTooManyTopics, "at most %d topics per connection", cfg.MaxTopics)
	}
	pid := c.pid
	if pid != "" && h.byPrincipal[pid] >= cfg.MaxTopicsPerPrincipal {
		return protocol.Errorf(protocol.CodeTooManyTopics, "at most %d topics per user on this server", cfg.MaxTopicsPerPrincipal)
	}
	t := h.topics[topic]
	first := t == nil
	if first {
		t = &topicState{name: topic, ch: ch, subs: map[*topicSub]struct{}{}, local: map[string]*topicSub{}, remote: map[string]*remoteMember{}, members: map[string]int{}}
	}
	if ch.presence {
		switch {
		case len(t.local)+len(t.remote) >= cfg.MaxPresence:
			return protocol.Errorf(protocol.CodePresenceFull, "topic %q has %d members, the most this server allows", topic, cfg.MaxPresence)
		case pid != "" && t.members[pid] >= cfg.MaxPresencePerPrincipal:
			return protocol.Errorf(protocol.CodeTooManyPresences, "this user is already %d members of topic %q, the most this server allows", cfg.MaxPresencePerPrincipal, topic)
		case !ct.joins.allow(time.Now()):
			return protocol.Errorf(protocol.CodePublishRateLimit, "more than %d presence topics joined per second; the subscription was refused, try again later", cfg.PresenceJoinRate)
		}
	}
	if pid != "" {
		h.byPrincipal[pid]++
	}
	h.conns[c] = ct
	h.topics[topic] = t
	s := &topicSub{c: c, t: t}
	ct.subs[topic] = s
	t.subs[s] = struct{}{}
	c.sendFrame(protocol.TopicSubscribed(topic, ch.presence))
	if !ch.presence {
		return nil
	}
	s.member = protocol.Member{ID: h.nextMemberIDLocked(), Principal: c.currentPrincipal().ID, State: state}
	t.local[s.member.ID] = s
	if pid != "" {
		t.members[pid]++
	}
	h.sendPresenceLocked(s, nil, nil)
	joins := []protocol.Member{s.member}
	diff := protocol.PresenceDiff(topic, joins, nil)
	for o := range t.subs {
		if o != s {
			h.sendPresenceLocked(o, diff, nil)
		}
	}
	h.broadcastLocked(feed.Broadcast{Kind: feed.BroadcastJoin, Topic: topic, Members: joins})
	if first {
		h.broadcastLocked(feed.Broadcast{Kind: feed.BroadcastSync, Topic: topic})
	}
	return nil
}

// unsubscribe removes c from topic.
func (h *chanHub) unsubscribe(c *conn, topic string) *protocol.Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ct := h.conns[c]
	if ct == nil || ct.subs[topic] == nil {
		return protocol.Errorf(protocol.CodeNotTopicMember, "topic %q is not subscribed", text.Truncate(topic, 64))
	}
	if ct.subs[topic].member.ID != "" {
		// A leave is sent to every member, as a join is: it counts.
		ct.joins.charge(time.Now())
	}
	h.leaveLocked(ct, ct.subs[topic]) // ct stays until the connection closes: it holds the buckets
	return nil
}

// leaveLocked ends s: its member leaves, and the topic is forgotten when
// it has no subscriber left on this node.
func (h *chanHub) leaveLocked(ct *connTopics, s *topicSub) {
	t := s.t
	delete(ct.subs, t.name)
	delete(t.subs, s)
	pid := s.c.pid
	if pid != "" {
		if h.byPrincipal[pid]--; h.byPrincipal[pid] <= 0 {
			delete(h.byPrincipal, pid)
		}
	}
	if t.ch.presence && s.member.ID != "" {
		delete(t.local, s.member.ID)
		if pid != "" {
			if t.members[pid]--; t.members[pid] <= 0 {
				delete(t.members, pid)
			}
		}
		leaves := []protocol.Member{leaveOf(s.member)}
		h.diffLocked(t, nil, leaves)
		h.broadcastLocked(feed.Broadcast{Kind: feed.BroadcastLeave, Topic: t.name, Members: leaves})
	}
	if len(t.subs) == 0 {
		delete(h.topics, t.name)
	}
}

// dropConn ends every topic subscription of a connection that closed: its
// members leave at once, on every node.
func (h *chanHub) dropConn(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ct := h.conns[c]
	if ct == nil {
		return
	}
	for _, s := range ct.subs {
		h.leaveLocked(ct, s)
	}
	delete(h.conns, c)
}

// allowPublish takes a token of c's publish bucket.
func (h *chanHub) allowPublish(c *conn) bool {
	cfg := &h.e.cfg.Channels
	h.mu.Lock()
	defer h.mu.Unlock()
	ct := h.conns[c]
	if ct == nil {
		// A publisher need not subscribe; its bucket lives with its topics.
		ct = newConnTopics(cfg)
		h.conns[c] = ct
	}
	return ct.limiter.allow(time.Now())
}

func (c *conn) publish(topic string, data json.RawMessage) *protocol.Error {
	e := c.e
	tr, err := e.resolveTopic(topic, c.currentPrincipal())
	if err != nil {
		return err
	}
	if !e.chans.allowPublish(c) {
		return protocol.Errorf(protocol.CodePublishRateLimit, "more than %d publishes per second; the message was dropped", e.cfg.Channels.PublishRate)
	}
	if err := e.checkMessage(tr.ch, data); err != nil {
		return err
	}
	if err := e.authorizeTopic(tr.ch.pub, tr, "publishing"); err != nil {
		return err
	}
	e.chans.publish(topic, compactJSON(data), tr.req.Principal.ID)
	return nil
}

func (c *conn) presenceUpdate(topic string, state json.RawMessage) *protocol.Error {
	h := c.e.chans
	state, err := c.checkState(state)
	if err != nil {
		return err
	}
	if ch, _ := h.lookup(topic); ch != nil {
		if err := checkStateSchema(ch, state); err != nil {
			return err
		}
	}
	if !h.allowPublish(c) {
		return protocol.Errorf(protocol.CodePublishRateLimit, "more than %d presence updates per second; the update was dropped", c.e.cfg.Channels.PublishRate)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ct := h.conns[c]
	if ct == nil || ct.subs[topic] == nil {
		return protocol.Errorf(protocol.CodeNotTopicMember, "topic %q is not subscribed", text.Truncate(topic, 64))
	}
	s := ct.subs[topic]
	if !s.t.ch.presence {
		return protocol.Errorf(protocol.CodeNoPresence, "topic %q does not track presence", topic)
	}
	if bytes.Equal(s.member.State, state) {
		return nil
	}
	s.member.State = state
	joins := []protocol.Member{s.member}
	h.diffLocked(s.t, joins, nil)
	h.broadcastLocked(feed.Broadcast{Kind: feed.BroadcastJoin, Topic: topic, Members: joins})
	return nil
}

// sendChannel queues a message or presence frame under the send queue's
// byte limit (Config.SendBuffer), the slow-consumer policy of live
// changes: a frame that does not fit is dropped and counted, and past
// Config.MaxDrops drops the connection is closed with 1013. It reports
// whether the frame was queued (or the connection is going away).
func (c *conn) sendChannel(frame []byte) bool { return c.sendChannelKick(frame, nil) }

// sendChannelKick is sendChannel for a fan-out: with kicks non-nil the
// connection's writer is not started at once but added to kicks (once), to
// be started with kickQueued after the frame is queued for every
// subscriber, so the writers do not race the fan-out loop.
func (c *conn) sendChannelKick(frame []byte, kicks *[]*conn) bool {
	c.mu.Lock()
	if c.closing || c.out.closeQueued {
		c.mu.Unlock()
		return true
	}
	if c.out.fits(len(frame)) {
		c.out.push(outItem{data: frame})
		switch {
		case kicks == nil:
			c.kickLocked()
		case !c.out.writing && !c.out.kickQueued:
			c.out.kickQueued = true
			*kicks = append(*kicks, c)
		}
		c.mu.Unlock()
		return true
	}
	c.out.drops++
	over := c.out.drops > c.e.cfg.MaxDrops
	c.mu.Unlock()
	c.e.stats.dropped.Add(1)
	c.e.cfg.Observer.Dropped()
	if over {
		go c.closeWith(protocol.CloseOverloaded, "backpressure")
	}
	return false
}

// reauthorizeTopics runs the subscribe policies of the connection's topics
// again for p (Engine.Reauthorize, a refreshed token); a topic they now
// refuse is left, with an error frame carrying the topic. It returns ended
// plus the topics it ended.
func (c *conn) reauthorizeTopics(ctx context.Context, p authz.Principal, ended int) (int, error) {
	h := c.e.chans
	h.mu.Lock()
	var subs []*topicSub
	if ct := h.conns[c]; ct != nil {
		for _, s := range ct.subs {
			subs = append(subs, s)
		}
	}
	h.mu.Unlock()
	for _, s := range subs {
		tr, perr := c.e.resolveTopic(s.t.name, p)
		if perr == nil {
			perr = c.e.authorizeTopicCtx(ctx, tr.ch.sub, tr, "subscribing")
		}
		if perr == nil {
			continue
		}
		if ctx.Err() != nil {
			return ended, ctx.Err()
		}
		h.mu.Lock()
		ct := h.conns[c]
		current := ct != nil && ct.subs[s.t.name] == s
		if current {
			h.leaveLocked(ct, s)
		}
		h.mu.Unlock()
		if current {
			c.sendFrame(protocol.TopicError(s.t.name, perr))
			ended++
		}
	}
	return ended, nil
}
