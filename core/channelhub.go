package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// chanHub holds the engine's app channels: the registered channels, the
// topics this node's connections subscribe to, their presence lists, and
// the traffic to and from the other nodes through the feed's (or bus's)
// feed.Broadcaster. One mutex guards it all; frames are queued on the
// connections under it (lock order: hub, then connection).
type chanHub struct {
	e    *Engine
	src  feed.Broadcaster // nil: this node only
	node string           // prefix of this node's member ids, and its id in broadcasts

	mu       sync.Mutex
	channels []*channel
	shapes   map[string]bool
	topics   map[string]*topicState
	conns    map[*conn]*connTopics
	// byPrincipal counts the topic subscriptions of each named principal
	// (ChannelConfig.MaxTopicsPerPrincipal); an entry exists while it is
	// not zero.
	byPrincipal map[string]int
	seq         uint64        // member ids
	kicks       []*conn       // connections with queued messages for the flusher (flushLoop)
	flush       chan struct{} // wakes flushLoop; buffered 1

	out      chan feed.Broadcast // to the sender goroutine
	started  bool                // guarded by mu
	watching atomic.Bool
	stats    chanCounters
}

// topicState is one topic with subscribers on this node.
type topicState struct {
	name  string
	ch    *channel
	subs  map[*topicSub]struct{}
	local map[string]*topicSub // presence: this node's members by id
	// members counts this node's members of each named principal
	// (ChannelConfig.MaxPresencePerPrincipal); an entry exists while it is
	// not zero.
	members map[string]int
	remote  map[string]*remoteMember // presence: other nodes' members by id
}

// topicSub is one connection's subscription to one topic.
type topicSub struct {
	c      *conn
	t      *topicState
	member protocol.Member // presence topics
	// stale: a presence frame to this subscriber was dropped; it is sent the
	// full list instead of the next diff.
	stale bool
}

// remoteMember is a member of another node, kept until expires unless a
// newer announcement or join extends it.
type remoteMember struct {
	m       protocol.Member
	node    string
	expires time.Time
}

// connTopics is a connection's channel state.
type connTopics struct {
	subs    map[string]*topicSub
	limiter frameLimiter // publishes and presence updates
	joins   frameLimiter // presence joins and leaves (ChannelConfig.PresenceJoinRate)
}

// newConnTopics returns a connection's channel state with full buckets.
func newConnTopics(cfg *ChannelConfig) *connTopics {
	now := time.Now()
	return &connTopics{
		subs:    map[string]*topicSub{},
		limiter: newFrameLimiter(cfg.PublishRate, cfg.PublishBurst, now),
		joins:   newFrameLimiter(cfg.PresenceJoinRate, cfg.PresenceJoinBurst, now),
	}
}

// chanCounters are the channel counters (ChannelStats).
type chanCounters struct {
	published, delivered, dropped             atomic.Int64
	sent, received, broadcastDropped, sendErr atomic.Int64
	expired                                   atomic.Int64
}

// ChannelStats are counters of the engine's app channels since it started.
type ChannelStats struct {
	Topics      int   // topics with subscribers on this node
	Subscribers int   // topic subscriptions on this node
	Published   int64 // messages published on this node (server and clients)
	Delivered   int64 // message frames queued to this node's subscribers
	Dropped     int64 // message and presence frames dropped for a full send queue
	// Broadcasts sent to and received from the other nodes, those dropped
	// because the queue to the bus was full, and sends the bus refused.
	BroadcastsSent, BroadcastsReceived, BroadcastsDropped, BroadcastErrors int64
	Expired                                                                int64 // other nodes' members removed because their node stopped announcing them
}

func newChanHub(e *Engine) *chanHub {
	h := &chanHub{
		e:      e,
		node:   e.revs.node,
		shapes: map[string]bool{},
		topics: map[string]*topicState{},
		conns:  map[*conn]*connTopics{},

		byPrincipal: map[string]int{},
		flush:       make(chan struct{}, 1),
	}
	if b, ok := e.bus.src.(feed.Broadcaster); ok {
		h.src = b
	} else if b, ok := e.feed.(feed.Broadcaster); ok {
		h.src = b
	}
	return h
}

// ChannelStats returns the channel counters. Safe for concurrent use.
func (e *Engine) ChannelStats() ChannelStats {
	h := e.chans
	h.mu.Lock()
	st := ChannelStats{Topics: len(h.topics)}
	for _, ct := range h.conns {
		st.Subscribers += len(ct.subs)
	}
	h.mu.Unlock()
	st.Published, st.Delivered, st.Dropped = h.stats.published.Load(), h.stats.delivered.Load(), h.stats.dropped.Load()
	st.BroadcastsSent, st.BroadcastsReceived = h.stats.sent.Load(), h.stats.received.Load()
	st.BroadcastsDropped, st.BroadcastErrors = h.stats.broadcastDropped.Load(), h.stats.sendErr.Load()
	st.Expired = h.stats.expired.Load()
	return st
}

func (h *chanHub) add(c *channel) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shapes[c.shape()] {
		return fmt.Errorf("%w: register channel %q", ErrDuplicateChannel, c.pattern)
	}
	h.shapes[c.shape()] = true
	h.channels = append(h.channels, c)
	return nil
}

// lookup returns the first registered channel whose pattern topic matches.
func (h *chanHub) lookup(topic string) (*channel, map[string][]string) {
	segs := strings.Split(topic, ":")
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.channels {
		if params, ok := c.match(segs); ok {
			return c, params
		}
	}
	return nil, nil
}

// ensureStarted starts listening to the other nodes (waiting, up to a few
// seconds, until the bus listens, so a subscriber accepted afterwards
// receives every message published after it), the sender of this node's
// broadcasts and the presence ticker, once per engine. It reports false
// once Shutdown has begun.
func (h *chanHub) ensureStarted() bool {
	e := h.e
	h.mu.Lock()
	if h.started {
		h.mu.Unlock()
		return true
	}
	e.mu.Lock()
	if e.draining {
		e.mu.Unlock()
		h.mu.Unlock()
		return false
	}
	h.started = true
	h.out = make(chan feed.Broadcast, e.cfg.Channels.BroadcastQueue)
	e.wg.Add(3)
	e.mu.Unlock()
	h.mu.Unlock()
	go h.sendLoop()
	go h.tickLoop()
	go h.flushLoop()
	if h.src == nil {
		return true
	}
	err := h.src.WatchBroadcasts(e.ctx, h.receive)
	if err == nil {
		h.watching.Store(true)
		return true
	}
	e.mu.Lock()
	if !e.draining {
		e.wg.Add(1)
		go h.watchLater(err)
	}
	e.mu.Unlock()
	return true
}

// watchLater retries WatchBroadcasts with backoff until it succeeds or the
// engine shuts down; meanwhile topics reach this node's subscribers only.
func (h *chanHub) watchLater(err error) {
	defer h.e.wg.Done()
	for attempt := 1; h.e.backoff(h.e.ctx, attempt, "watch channels", err); attempt++ {
		if err = h.src.WatchBroadcasts(h.e.ctx, h.receive); err == nil {
			h.watching.Store(true)
			h.mu.Lock()
			for name, t := range h.topics {
				if t.ch.presence {
					h.broadcastLocked(feed.Broadcast{Kind: feed.BroadcastSync, Topic: name})
				}
			}
			h.mu.Unlock()
			return
		}
	}
}

// broadcastLocked queues b for the other nodes, dropping it if the queue
// is full. The caller holds h.mu.
func (h *chanHub) broadcastLocked(b feed.Broadcast) {
	if h.src == nil || h.out == nil {
		return
	}
	b.Node = h.node
	select {
	case h.out <- b:
	default:
		h.stats.broadcastDropped.Add(1)
	}
}

// sendLoop sends this node's broadcasts one at a time, in order.
func (h *chanHub) sendLoop() {
	defer h.e.wg.Done()
	for {
		select {
		case <-h.e.ctx.Done():
			return
		case b := <-h.out:
			h.send(b)
		}
	}
}

// send sends b, halving its member list while it is too large for the bus.
func (h *chanHub) send(b feed.Broadcast) {
	if h.src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.e.ctx, 5*time.Second)
	err := h.src.Broadcast(ctx, b)
	cancel()
	switch {
	case err == nil:
		h.stats.sent.Add(1)
	case errors.Is(err, feed.ErrBroadcastTooLarge) && len(b.Members) > 1:
		half := len(b.Members) / 2
		first, second := b, b
		first.Members, second.Members = b.Members[:half], b.Members[half:]
		h.send(first)
		h.send(second)
	default:
		h.stats.sendErr.Add(1)
		if h.e.ctx.Err() == nil {
			h.e.cfg.Logger.Warn("tide: channel broadcast failed", "topic", b.Topic, "err", err)
		}
	}
}

// tickLoop announces this node's members every PresenceInterval and
// removes the other nodes' members that expired, twice as often.
func (h *chanHub) tickLoop() {
	defer h.e.wg.Done()
	cfg := h.e.cfg.Channels
	t := time.NewTicker(cfg.PresenceInterval / 2)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-h.e.ctx.Done():
			return
		case now := <-t.C:
			h.mu.Lock()
			for _, ts := range h.topics {
				if !ts.ch.presence {
					continue
				}
				h.expireLocked(ts, now)
				if n%2 == 1 {
					h.announceLocked(ts)
				}
				for s := range ts.subs {
					if s.stale {
						h.sendPresenceLocked(s, nil, nil)
					}
				}
			}
			h.mu.Unlock()
		}
	}
}

// announceLocked broadcasts this node's members of t, in chunks that fit
// a broadcast (send halves those that do not).
func (h *chanHub) announceLocked(t *topicState) {
	if len(t.local) == 0 {
		return
	}
	ttl := h.e.cfg.Channels.PresenceTTL.Milliseconds()
	const budget = feed.MaxBroadcastBytes / 2
	var chunk []protocol.Member
	size := 0
	for _, s := range t.local {
		n := len(s.member.ID) + 2*len(s.member.Principal) + len(s.member.State) + 40
		if len(chunk) > 0 && size+n > budget {
			h.broadcastLocked(feed.Broadcast{Kind: feed.BroadcastAnnounce, Topic: t.name, Members: chunk, TTL: ttl})
			chunk, size = nil, 0
		}
		chunk = append(chunk, s.member)
		size += n
	}
	h.broadcastLocked(feed.Broadcast{Kind: feed.BroadcastAnnounce, Topic: t.name, Members: chunk, TTL: ttl})
}

// expireLocked removes the remote members of t that expired at now.
func (h *chanHub) expireLocked(t *topicState, now time.Time) {
	var leaves []protocol.Member
	for id, rm := range t.remote {
		if now.After(rm.expires) {
			delete(t.remote, id)
			leaves = append(leaves, leaveOf(rm.m))
		}
	}
	if len(leaves) > 0 {
		h.stats.expired.Add(int64(len(leaves)))
		h.diffLocked(t, nil, leaves)
	}
}

func leaveOf(m protocol.Member) protocol.Member {
	return protocol.Member{ID: m.ID, Principal: m.Principal}
}

// receive handles a broadcast of another node, on the bus's goroutine.
func (h *chanHub) receive(b feed.Broadcast) {
	if b.Node == h.node {
		return
	}
	h.stats.received.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[b.Topic]
	if t == nil {
		return // no subscriber here
	}
	switch b.Kind {
	case feed.BroadcastMessage:
		h.deliverLocked(t, protocol.Message(b.Topic, b.Data, b.From))
	case feed.BroadcastJoin, feed.BroadcastAnnounce:
		if !t.ch.presence {
			return
		}
		ttl := h.e.cfg.Channels.PresenceTTL
		if b.TTL > 0 {
			ttl = time.Duration(b.TTL) * time.Millisecond
		}
		expires := time.Now().Add(ttl)
		var joins []protocol.Member
		for _, m := range b.Members {
			rm := t.remote[m.ID]
			if rm == nil {
				if len(t.local)+len(t.remote) >= h.e.cfg.Channels.MaxPresence {
					continue // the list is full as this node knows it
				}
				rm = &remoteMember{node: b.Node}
				t.remote[m.ID] = rm
			} else if rm.m.Principal == m.Principal && bytes.Equal(rm.m.State, m.State) {
				rm.expires = expires
				continue
			}
			rm.m, rm.expires = m, expires
			joins = append(joins, m)
		}
		h.diffLocked(t, joins, nil)
	case feed.BroadcastLeave:
		var leaves []protocol.Member
		for _, m := range b.Members {
			if rm := t.remote[m.ID]; rm != nil {
				delete(t.remote, m.ID)
				leaves = append(leaves, leaveOf(rm.m))
			}
		}
		h.diffLocked(t, nil, leaves)
	case feed.BroadcastSync:
		if t.ch.presence {
			h.announceLocked(t)
		}
	}
}

// publish delivers a message to this node's subscribers of topic and sends
// it to the other nodes.
func (h *chanHub) publish(topic string, data []byte, from string) {
	h.ensureStarted()
	h.stats.published.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[topic]; t != nil {
		h.deliverLocked(t, protocol.Message(topic, data, from))
	}
	h.broadcastLocked(feed.Broadcast{Kind: feed.BroadcastMessage, Topic: topic, Data: data, From: from})
}

// deliverLocked queues a message frame to every subscriber of t, in
// publish order, and leaves the writing to flushLoop: messages published
// while it writes are queued meanwhile and go out together, one write per
// connection for all of them.
func (h *chanHub) deliverLocked(t *topicState, frame []byte) {
	n := int64(0)
	for s := range t.subs {
		if s.c.sendChannelKick(frame, &h.kicks) {
			n++
		} else {
			h.stats.dropped.Add(1)
		}
	}
	h.stats.delivered.Add(n)
	if len(h.kicks) > 0 {
		select {
		case h.flush <- struct{}{}:
		default: // already signalled
		}
	}
}

// flushLoop writes the connections deliverLocked queued messages for,
// outside the hub's lock, until the engine stops.
func (h *chanHub) flushLoop() {
	defer h.e.wg.Done()
	var kicks []*conn
	for {
		select {
		case <-h.flush:
		case <-h.e.ctx.Done():
			return
		}
		h.mu.Lock()
		kicks, h.kicks = h.kicks, kicks[:0]
		h.mu.Unlock()
		h.e.hub.flushKicked(kicks)
		clear(kicks)
	}
}

// presenceListLocked returns t's members, this node's and the others'.
func presenceListLocked(t *topicState) []protocol.Member {
	ms := make([]protocol.Member, 0, len(t.local)+len(t.remote))
	for _, s := range t.local {
		ms = append(ms, s.member)
	}
	for _, rm := range t.remote {
		ms = append(ms, rm.m)
	}
	return ms
}

// diffLocked sends a presence diff to every subscriber of t.
func (h *chanHub) diffLocked(t *topicState, joins, leaves []protocol.Member) {
	if len(joins) == 0 && len(leaves) == 0 {
		return
	}
	frame := protocol.PresenceDiff(t.name, joins, leaves)
	for s := range t.subs {
		h.sendPresenceLocked(s, frame, nil)
	}
}

// sendPresenceLocked queues diff to s, or the full list when s missed a
// presence frame (or diff is nil). A frame that does not fit marks s
// stale: the ticker, or the next change, sends it the full list.
func (h *chanHub) sendPresenceLocked(s *topicSub, diff, full []byte) {
	frame := diff
	if s.stale || frame == nil {
		if full == nil {
			full = protocol.Presence(s.t.name, presenceListLocked(s.t))
		}
		frame = full
	}
	if s.c.sendChannel(frame) {
		s.stale = false
	} else {
		s.stale = true
		h.stats.dropped.Add(1)
	}
}

// nextMemberID returns a member id unique across the cluster. The caller
// holds h.mu.
func (h *chanHub) nextMemberIDLocked() string {
	h.seq++
	return h.node + "." + strconv.FormatUint(h.seq, 36)
}
