package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/jsontext"
)

type subState uint8

const (
	// subCatchingUp: registered with the hub; live changes are buffered
	// while a replay runs.
	subCatchingUp subState = iota
	// subLive: live changes go straight to the socket.
	subLive
	// subDesynced: a live change did not fit the socket's queue; live
	// changes are dropped until the queue drains and a replay from the
	// delivered cursor starts.
	subDesynced
)

// subscription is one client's live interest in one scope on one
// connection.
type subscription struct {
	c      *conn
	id     string
	idJSON []byte
	res    *resource  // the first of targets
	scope  feed.Scope // the first of targets
	// targets are the subscription's resources and their scopes: one, or
	// several under one cursor (targets.go).
	targets targets
	limit   int
	ctx     context.Context
	cancel  context.CancelFunc
	closed  atomic.Bool

	mu        sync.Mutex
	state     subState
	buf       []liveBatch // live entries held while catching up
	bufBytes  int         // bytes of entries in buf, bounded by SendBuffer
	overflow  bool        // buf overflowed: replay another round
	delivered feed.Position
	// advanceTo is a position the client's own mutation was acknowledged
	// at: the subscription's cursor is moved there once it is live (see
	// advance).
	advanceTo feed.Position

	followGen uint64 // scopes().followGen() when the policy ran (follower.go)

	// desyncs and resyncs count the times a live change did not fit the
	// socket's queue and the replays that followed (inspect.go).
	desyncs, resyncs uint64

	// Owned by the goroutine that runs catch-up (observer.go).
	trace      context.Context // carries the span of the subscribe or resync
	roundStart time.Time
	roundPages int
}

func newSubscription(c *conn, id string, r *resource, sc feed.Scope, limit int) *subscription {
	ctx, cancel := context.WithCancel(c.e.ctx)
	return &subscription{
		c: c, id: id, idJSON: jsontext.AppendString(nil, id), res: r, scope: sc, targets: targets{{r, sc}}, limit: limit,
		ctx: ctx, cancel: cancel, state: subCatchingUp,
	}
}

func (s *subscription) principal() authz.Principal { return s.c.currentPrincipal() }

// start authorizes the subscription, registers it with the hub and catches
// it up. It runs on its own goroutine, counted in the engine's WaitGroup.
func (s *subscription) start(req request) {
	e := s.c.e
	defer e.wg.Done()
	var span Span
	s.trace, span = e.startSpan(s.ctx, "tide.subscribe", StrAttr("tide.resource", s.res.schema.Name))
	err := s.authorizeTraced()
	defer func() { span.End(err) }()
	if err == nil {
		err = e.awaitReady(s.ctx)
	}
	if err == nil {
		err = e.checkCaptures(s.ctx, s.scopes())
	}
	if err == nil {
		// Live interest first (in the hub, and in the bus: bus.go), then
		// the replay high-water: see hub.
		err = e.joinHub(s)
	}
	if err == nil {
		if s.ctx.Err() != nil {
			e.hub.remove(s)
			return
		}
		sp, perr := e.startOf(req, s.principal())
		if perr != nil {
			err = perr // failSub below ends the subscription, and its place in the hub
		} else {
			err = s.catchUp(sp)
		}
	}
	if err != nil && s.ctx.Err() == nil && !errors.Is(err, errConnClosing) {
		s.c.failSub(s, err)
	}
}

func (s *subscription) authorize() error {
	s.followGen = s.scopes().followGen()
	return s.scopes().authorize(s.ctx, s.principal())
}

// push offers live changes to the subscription. It runs on the tailer's
// goroutine, in position order.
func (s *subscription) push(b liveBatch, kicks *[]*conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case subCatchingUp:
		if s.overflow {
			return
		}
		if s.bufBytes+b.bytes > s.c.e.cfg.SendBuffer {
			s.overflow = true
			s.buf, s.bufBytes = nil, 0
			return
		}
		s.buf = append(s.buf, b)
		s.bufBytes += b.bytes
	case subLive:
		// The high-water of the last catch-up came from the feed's head,
		// which the tailer may not have reached yet: changes at or below it
		// were replayed already and must not be sent twice.
		if b = b.after(s.delivered); b.len() > 0 {
			s.deliverLocked(b, kicks)
		}
	case subDesynced:
		// Dropped: the replay after the queue drains covers it.
	}
}

// deliverLocked queues live entries, or marks the subscription desynced if
// the socket's queue is full. The caller holds s.mu.
func (s *subscription) deliverLocked(b liveBatch, kicks *[]*conn) {
	if s.c.trySendBatch(s, b, kicks) {
		s.delivered = b.last()
		return
	}
	s.state = subDesynced
	s.desyncs++
	s.c.noteDrop(s)
}

// desync forces a replay from the delivered cursor.
func (s *subscription) desync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case subCatchingUp:
		s.overflow = true
		s.buf, s.bufBytes = nil, 0
	case subLive:
		s.state = subDesynced
		s.desyncs++
		s.c.mu.Lock()
		s.c.out.resyncDue = true
		s.c.kickLocked()
		s.c.mu.Unlock()
	}
}

// resync starts the replay of a desynced subscription from its delivered
// cursor. The socket's writer calls it once the queue has drained.
func (s *subscription) resync() {
	s.mu.Lock()
	if s.closed.Load() || s.state != subDesynced {
		s.mu.Unlock()
		return
	}
	s.state = subCatchingUp
	s.resyncs++
	s.buf, s.bufBytes, s.overflow = nil, 0, false
	from := s.delivered
	s.mu.Unlock()
	e := s.c.e
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		var span Span
		s.trace, span = e.startSpan(s.ctx, "tide.resync", StrAttr("tide.resource", s.res.schema.Name))
		err := s.catchUp(startPoint{pos: from})
		span.End(err)
		if err != nil && s.ctx.Err() == nil && !errors.Is(err, errConnClosing) {
			s.c.failSub(s, err)
		}
	}()
}

func (s *subscription) isClosed() bool { return s.closed.Load() }

// close ends the subscription: its goroutines stop and the hub forgets it.
func (s *subscription) close() {
	if s.closed.Swap(true) {
		return
	}
	s.cancel()
	s.c.e.hub.remove(s)
	s.mu.Lock()
	s.buf, s.bufBytes = nil, 0
	s.mu.Unlock()
}

// behind reports whether the subscription has delivered less than pos.
func (s *subscription) behind(pos feed.Position) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered < pos
}

// advance moves the subscription's cursor to pos, every change up to which
// the fan-out has dispatched: at once if it is live, at the end of its
// catch-up otherwise.
func (s *subscription) advance(pos feed.Position) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == subLive && s.delivered < pos {
		s.advanceLocked(pos)
		return
	}
	s.advanceTo = max(s.advanceTo, pos)
}

// advanceLocked queues an empty changes frame at pos, after every live
// entry already queued. The caller holds s.mu.
func (s *subscription) advanceLocked(pos feed.Position) {
	frame := protocol.AppendLiveChangesStart(nil, s.idJSON, s.c.e.epoch, uint64(pos))
	s.c.sendFrame(protocol.AppendChangesEnd(frame))
	s.delivered = pos
}
