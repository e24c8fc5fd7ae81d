package core

import (
	"cmp"
	"slices"
	"strings"

	"github.com/tidesync/tide/core/feed"
)

// SubscriptionLag is one subscription of this node as
// Engine.LaggingSubscriptions reports it: how far it is behind the feed's
// head and how much its connection has queued.
type SubscriptionLag struct {
	Principal string `json:"principal"` // the connection's principal id ("" anonymous)
	Origin    string `json:"origin"`    // the connection's device origin
	ID        string `json:"id"`        // the subscription's id on its connection
	Resource  string `json:"resource"`  // its resource, or resources joined by ","
	Scope     string `json:"scope"`     // e.g. "todos where project_id = p7"
	// State is catching_up, live or desynced.
	State     string `json:"state"`
	Delivered uint64 `json:"delivered"` // the delivered cursor's position
	Lag       uint64 `json:"lag"`       // head − delivered (0 when the head is not known)
	// Queued counts this subscription's live entries waiting in the send
	// queue; QueueEntries and QueueBytes are the whole queue of its
	// connection (frames and live batches not yet taken by the writer, and
	// the bytes queued or being written).
	Queued       int    `json:"queued"`
	QueueEntries int    `json:"queue_entries"`
	QueueBytes   int    `json:"queue_bytes"`
	Desyncs      uint64 `json:"desyncs"` // times a live change did not fit the send queue
	Resyncs      uint64 `json:"resyncs"` // replays from the delivered cursor that followed
}

// lagRow is a subscription read for LaggingSubscriptions, before it is
// described.
type lagRow struct {
	c                                *conn
	s                                *subscription
	origin                           string
	state                            subState
	delivered                        feed.Position
	queued, queueEntries, queueBytes int
	desyncs, resyncs                 uint64
}

// lagOrder sorts the most behind first: the lowest delivered cursor (the
// largest lag), then the most queued entries of the subscription, then
// the fullest queue, then the most desyncs.
func lagOrder(a, b lagRow) int {
	return cmp.Or(
		cmp.Compare(a.delivered, b.delivered),
		cmp.Compare(b.queued, a.queued),
		cmp.Compare(b.queueBytes, a.queueBytes),
		cmp.Compare(b.desyncs, a.desyncs),
	)
}

// LaggingSubscriptions returns at most n of this node's subscriptions, the
// most behind first: by lag (head − delivered; head is the feed's head,
// Engine.Head, or 0 if it is not known, which orders by delivered cursor
// all the same), then by the subscription's queued entries and its
// connection's queued bytes. Subscriptions of closing connections are
// left out. It holds the engine's lock only to copy its set of
// connections, then reads each connection under its own lock, briefly, and
// keeps only the n most behind as it goes, so it costs the fan-out little
// even with many subscriptions (BenchmarkLaggingSubscriptions). n ≤ 0
// returns none.
func (e *Engine) LaggingSubscriptions(head feed.Position, n int) []SubscriptionLag {
	if n <= 0 {
		return []SubscriptionLag{}
	}
	e.mu.Lock()
	conns := make([]*conn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()

	top := make([]lagRow, 0, n+1) // sorted by lagOrder, at most n
	var subs []*subscription
	var queued []int
	for _, c := range conns {
		c.mu.Lock()
		if len(c.subs) == 0 || c.closing {
			c.mu.Unlock()
			continue
		}
		subs = subs[:0]
		for _, s := range c.subs {
			subs = append(subs, s)
		}
		queued = append(queued[:0], make([]int, len(subs))...)
		for i := range c.out.items {
			it := &c.out.items[i]
			if it.sub == nil {
				continue
			}
			for j, s := range subs {
				if s == it.sub {
					queued[j] += it.live.len()
					break
				}
			}
		}
		origin, qEntries, qBytes := c.origin, len(c.out.items), c.out.bytes
		c.mu.Unlock()
		// s.mu after c.mu, never inside it: the fan-out takes s.mu, then c.mu.
		for j, s := range subs {
			s.mu.Lock()
			r := lagRow{c: c, s: s, origin: origin, state: s.state, delivered: s.delivered,
				queued: queued[j], queueEntries: qEntries, queueBytes: qBytes, desyncs: s.desyncs, resyncs: s.resyncs}
			s.mu.Unlock()
			if len(top) == n && lagOrder(r, top[n-1]) >= 0 {
				continue // not among the n most behind
			}
			i, _ := slices.BinarySearchFunc(top, r, lagOrder)
			top = slices.Insert(top, i, r)
			if len(top) > n {
				top = top[:n]
			}
		}
	}

	out := make([]SubscriptionLag, len(top))
	for i, r := range top {
		names := make([]string, len(r.s.targets))
		scopes := make([]string, len(r.s.targets))
		for k, t := range r.s.targets {
			names[k], scopes[k] = t.res.schema.Name, describeScope(t.scope)
		}
		out[i] = SubscriptionLag{
			Principal: r.c.currentPrincipal().ID, Origin: r.origin, ID: r.s.id,
			Resource: strings.Join(names, ","), Scope: strings.Join(scopes, "; "),
			State: stateName(r.state), Delivered: uint64(r.delivered),
			Queued: r.queued, QueueEntries: r.queueEntries, QueueBytes: r.queueBytes,
			Desyncs: r.desyncs, Resyncs: r.resyncs,
		}
		if head > r.delivered {
			out[i].Lag = uint64(head - r.delivered)
		}
	}
	return out
}
