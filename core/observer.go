package core

import (
	"context"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Observer is told of the engine's events as they happen, so that metrics
// libraries can count them without core depending on any of them (package
// core/metrics/tideprom adapts it to Prometheus). Its methods are called on
// the engine's hot paths, often with locks held: they must be fast, must
// not block and must not call back into the engine. They are called
// concurrently.
//
// Arguments carry only bounded values: resource names (those the app
// registered; "" when a client named an unknown one), error, reset and
// close codes, and counts. Scopes, principals and connections are never
// passed, so labels made from them stay few.
//
// Embed NopObserver in an implementation so that methods added to Observer
// later have a default.
type Observer interface {
	// ConnOpened: a WebSocket connection was accepted.
	ConnOpened()
	// ConnClosed: a connection ended (its subscriptions ended first).
	ConnClosed()
	// CloseSent: the engine started a close handshake with code.
	CloseSent(code protocol.CloseCode)
	// Subscribed: a subscription to resource started (before its policy
	// runs; a refusal is followed by SubscriptionEnded). A subscription
	// of several resources is reported once under each of them (and so
	// are its SubscriptionEnded and CaughtUp): a count by resource says
	// how many subscriptions follow that resource, and the sum over
	// resources may exceed the number of subscriptions (Stats has that).
	Subscribed(resource string)
	// SubscriptionEnded: a subscription to resource ended.
	SubscriptionEnded(resource string)
	// SubscribeRefused: a subscribe frame was answered with an error frame
	// of code (invalid request, policy refusal, limits, feed failure).
	SubscribeRefused(resource string, code protocol.Code)
	// CaughtUp: a catch-up round of a subscription to resource ended and the
	// subscription went live, after pages replay or snapshot pages
	// (pages from memory included) and d since the round began.
	CaughtUp(resource string, pages int, d time.Duration)
	// ResetSent: a reset frame was sent for reason.
	ResetSent(reason protocol.ResetReason)
	// TailStarted: the tailer starts (or, after falling behind the
	// retained change log, restarts) from position at: changes up to it
	// count as dispatched.
	TailStarted(at feed.Position)
	// TailBatch: the tailer dispatched n changes, the last at position last.
	TailBatch(n int, last feed.Position)
	// Delivered: a live changes frame of entries entries and bytes bytes was
	// written to a socket.
	Delivered(entries, bytes int)
	// Dropped: a live entry did not fit a connection's send queue (its
	// subscription is now desynced and replays once the queue drains), or a
	// channel message did not (it is lost to that connection).
	Dropped()
	// Desynced: every subscription of the node was made to resync because
	// the tailer fell behind the retained change log.
	Desynced()
	// Mutated: a mutation of resource's mutator ended with code ("" when it
	// was acknowledged) after d. A frame too malformed to name a known
	// resource and mutator reports "" for both.
	Mutated(resource, mutator string, code protocol.Code, d time.Duration)
	// TokenRefreshed: a refresh frame was handled; code is "" when the new
	// token was accepted, else the code of the refusal.
	TokenRefreshed(code protocol.Code)
}

// NopObserver implements Observer with methods that do nothing. Embed it to
// implement only some of the methods.
type NopObserver struct{}

// ConnOpened does nothing.
func (NopObserver) ConnOpened() {}

// ConnClosed does nothing.
func (NopObserver) ConnClosed() {}

// CloseSent does nothing.
func (NopObserver) CloseSent(protocol.CloseCode) {}

// Subscribed does nothing.
func (NopObserver) Subscribed(string) {}

// SubscriptionEnded does nothing.
func (NopObserver) SubscriptionEnded(string) {}

// SubscribeRefused does nothing.
func (NopObserver) SubscribeRefused(string, protocol.Code) {}

// CaughtUp does nothing.
func (NopObserver) CaughtUp(string, int, time.Duration) {}

// ResetSent does nothing.
func (NopObserver) ResetSent(protocol.ResetReason) {}

// TailStarted does nothing.
func (NopObserver) TailStarted(feed.Position) {}

// TailBatch does nothing.
func (NopObserver) TailBatch(int, feed.Position) {}

// Delivered does nothing.
func (NopObserver) Delivered(int, int) {}

// Dropped does nothing.
func (NopObserver) Dropped() {}

// Desynced does nothing.
func (NopObserver) Desynced() {}

// Mutated does nothing.
func (NopObserver) Mutated(string, string, protocol.Code, time.Duration) {}

// TokenRefreshed does nothing.
func (NopObserver) TokenRefreshed(protocol.Code) {}

// resourceName returns r's name, or "" for nil.
func resourceName(r *resource) string {
	if r == nil {
		return ""
	}
	return r.schema.Name
}

// mutatorLabels returns the resource and mutator names of f for the
// observer when both are declared, else "" for each: names a client made up
// must not become labels.
func (e *Engine) mutatorLabels(f protocol.ClientFrame) (string, string) {
	r := e.resource(f.Resource)
	if r == nil || e.mutatorOf(r, f.Name) == nil {
		return "", ""
	}
	return r.schema.Name, f.Name
}

// beginRound starts timing a catch-up round.
func (s *subscription) beginRound() {
	s.roundStart, s.roundPages = time.Now(), 0
}

// notePage counts a page of the round and returns its span.
func (s *subscription) notePage(pg page) Span {
	s.roundPages++
	_, span := s.c.e.startSpan(s.trace, "tide.page", IntAttr("tide.rows", int64(pg.n)))
	return span
}

// observeEnded reports the end of the subscription under each of its
// resources, as Subscribed reported its start.
func (s *subscription) observeEnded() {
	for _, t := range s.targets {
		s.c.e.cfg.Observer.SubscriptionEnded(t.res.schema.Name)
	}
}

// endRound reports a catch-up round that went live, under each of the
// subscription's resources.
func (s *subscription) endRound() {
	e := s.c.e
	d := time.Since(s.roundStart)
	for _, t := range s.targets {
		e.cfg.Observer.CaughtUp(t.res.schema.Name, s.roundPages, d)
	}
	_, span := e.startSpan(s.trace, "tide.caught_up", IntAttr("tide.pages", int64(s.roundPages)))
	span.End(nil)
}

// Head returns the feed's head: the position of its newest committed
// change. Together with the positions the Observer is told of (TailStarted,
// TailBatch) it gives how far this node's tailer is behind.
func (e *Engine) Head(ctx context.Context) (feed.Position, error) { return e.feed.Head(ctx) }

// Observers returns an Observer that tells each of obs of every event, in
// order (nil entries are skipped).
func Observers(obs ...Observer) Observer {
	var m multiObserver
	for _, o := range obs {
		if o != nil {
			m = append(m, o)
		}
	}
	if len(m) == 1 {
		return m[0]
	}
	return m
}

type multiObserver []Observer

func (m multiObserver) ConnOpened() {
	for _, o := range m {
		o.ConnOpened()
	}
}

func (m multiObserver) ConnClosed() {
	for _, o := range m {
		o.ConnClosed()
	}
}

func (m multiObserver) CloseSent(code protocol.CloseCode) {
	for _, o := range m {
		o.CloseSent(code)
	}
}

func (m multiObserver) Subscribed(r string) {
	for _, o := range m {
		o.Subscribed(r)
	}
}

func (m multiObserver) SubscriptionEnded(r string) {
	for _, o := range m {
		o.SubscriptionEnded(r)
	}
}

func (m multiObserver) SubscribeRefused(r string, code protocol.Code) {
	for _, o := range m {
		o.SubscribeRefused(r, code)
	}
}

func (m multiObserver) CaughtUp(r string, pages int, d time.Duration) {
	for _, o := range m {
		o.CaughtUp(r, pages, d)
	}
}

func (m multiObserver) ResetSent(reason protocol.ResetReason) {
	for _, o := range m {
		o.ResetSent(reason)
	}
}

func (m multiObserver) TailStarted(at feed.Position) {
	for _, o := range m {
		o.TailStarted(at)
	}
}

func (m multiObserver) TailBatch(n int, last feed.Position) {
	for _, o := range m {
		o.TailBatch(n, last)
	}
}

func (m multiObserver) Delivered(entries, bytes int) {
	for _, o := range m {
		o.Delivered(entries, bytes)
	}
}

func (m multiObserver) Dropped() {
	for _, o := range m {
		o.Dropped()
	}
}

func (m multiObserver) Desynced() {
	for _, o := range m {
		o.Desynced()
	}
}

func (m multiObserver) Mutated(r, name string, code protocol.Code, d time.Duration) {
	for _, o := range m {
		o.Mutated(r, name, code, d)
	}
}

func (m multiObserver) TokenRefreshed(code protocol.Code) {
	for _, o := range m {
		o.TokenRefreshed(code)
	}
}
