package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/internal/backoff"
	"github.com/tidesync/tide/core/protocol"
)

// Engine is tide's server side: the resource registry, the tailer that reads
// the feed in commit order, the fan-out that matches each change to the
// subscriptions of its scope, and the connections. Create it with New,
// register resources, then serve it through package middleware.
//
// The engine's background work (one tailer) starts once, the first time a
// connection or poll needs it, however many handlers or servers use the
// engine. An Engine is safe for concurrent use.
type Engine struct {
	cfg      Config
	feed     feed.Feed
	bus      busState // the tailer's source of live changes
	epoch    string   // the feed's epoch; set by the tailer before ready is closed
	hub      *hub
	heads    headBatcher
	coalesce coalescer
	auth     *tokenTimers    // token expiry and revocation (tokens.go, revoke.go)
	ctx      context.Context // cancelled by Shutdown
	cancel   context.CancelFunc

	mu        sync.RWMutex
	resources map[string]*resource
	conns     map[*conn]struct{}
	draining  bool

	started bool          // guarded by mu
	ready   chan struct{} // closed once the tailer knows its start position
	wg      sync.WaitGroup
	stats   counters
}

// ErrDraining is returned once Shutdown has begun.
var ErrDraining = &protocol.Error{Code: protocol.CodeDraining, Message: "the server is shutting down"}

// New returns an engine for cfg. It validates the configuration and starts no
// goroutines.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := cfg.Feed
	if f == nil {
		f = memfeed.New(memfeed.Options{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		cfg:       cfg,
		feed:      f,
		ctx:       ctx,
		cancel:    cancel,
		resources: map[string]*resource{},
		conns:     map[*conn]struct{}{},
		ready:     make(chan struct{}),
	}
	e.bus = newBusState(cfg.Bus, f)
	e.hub = newHub(e)
	e.auth = newTokenTimers(ctx, cfg.Clock)
	return e, nil
}

// Feed returns the engine's change feed.
func (e *Engine) Feed() feed.Feed { return e.feed }

// Config returns the engine's configuration with defaults applied.

// Schemas returns the schemas of every registered resource, for feeds that
// install capture for them (such as the Postgres feed's migration).
func (e *Engine) Schemas() []*feed.Schema {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]*feed.Schema, 0, len(e.resources))
	for _, r := range e.resources {
		out = append(out, r.schema)
	}
	return out
}

func (e *Engine) addResource(r *resource) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.resources[r.schema.Name]; dup {
		return fmt.Errorf("tide: register %s: %w", r.schema.Name, ErrDuplicateResource)
	}
	e.resources[r.schema.Name] = r
	return nil
}

func (e *Engine) resource(name string) *resource {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.resources[name]
}

// start launches the tailer and the pinger exactly once per engine. It
// reports false once Shutdown has begun.
func (e *Engine) start() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.draining {
		return false
	}
	if !e.started {
		e.started = true
		e.stats.tailStarts.Add(1)
		e.wg.Add(2)
		go e.tailLoop()
		go e.pingLoop()
	}
	return true
}

// pingLoop asks every connection to ping its peer a few times per idle
// timeout; a peer that never answers is swept by its read deadline (4001).
// One ticker serves all connections so an idle connection owns no timer.
func (e *Engine) pingLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.IdleTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
		}
		e.mu.RLock()
		for c := range e.conns {
			c.requestPing()
		}
		e.mu.RUnlock()
	}
}

// awaitReady waits until the tailer has fixed its start position, so that
// every subscription registered afterwards sees every later change.
func (e *Engine) awaitReady(ctx context.Context) error {
	e.start()
	select {
	case <-e.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.ctx.Done():
		return ErrDraining
	}
}

// tailLoop reads the feed in position order and hands each batch to the hub.
// It is the only dispatcher, so changes reach subscriptions in order.
func (e *Engine) tailLoop() {
	defer e.wg.Done()
	ctx := e.ctx
	var pos feed.Position
	for attempt := 0; ; attempt++ {
		var err error
		if pos, err = e.feed.Head(ctx); err == nil {
			// A feed may learn its epoch on first contact with its store,
			// so it is read after Head succeeds.
			if e.epoch = e.feed.Epoch(); protocol.ValidEpoch(e.epoch) {
				break
			}
			err = fmt.Errorf("feed epoch %q is not 1-64 letters, digits, '-' or '_'", e.epoch)
		}
		if !e.backoff(ctx, attempt, "head", err) {
			return
		}
	}
	e.hub.advance(pos)
	close(e.ready)
	const batch = 1024
	for attempt := 0; ; {
		changes, err := e.bus.src.Tail(ctx, pos, batch)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, feed.ErrCursorExpired) {
				// The tailer fell behind retention (of the feed, or of the
				// bus): everyone resyncs from their own cursor through the
				// feed, which yields a reset where needed.
				head, herr := e.feed.Head(ctx)
				if herr == nil {
					e.cfg.Logger.Warn("tide: tailer fell behind the retained change log; resyncing every subscription", "pos", pos, "head", head)
					pos = head
					// The skipped changes count as dispatched: every
					// subscription replays them, up to at least head.
					e.hub.advance(head)
					e.hub.desyncAll()
					continue
				}
				err = herr
			}
			if !e.backoff(ctx, attempt, "tail", err) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
		if len(changes) == 0 {
			continue
		}
		e.hub.dispatch(changes)
		pos = changes[len(changes)-1].Pos
		e.stats.tailBatches.Add(1)
	}
}

// backoff logs err and waits a jittered, exponentially growing delay
// (capped at 5 s). It reports false if ctx ended.
func (e *Engine) backoff(ctx context.Context, attempt int, what string, err error) bool {
	e.cfg.Logger.Error("tide: feed "+what+" failed; retrying", "err", err, "attempt", attempt)
	return backoff.Sleep(ctx, backoff.Jitter(attempt, 50*time.Millisecond, 5*time.Second))
}

// Draining reports whether Shutdown has begun.
func (e *Engine) Draining() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.draining
}

// Shutdown stops accepting connections, closes every open connection with
// close code 4002 (drain: reconnect, possibly to another node), stops the
// tailer and waits for every goroutine the engine started. If ctx ends
// first, remaining connections are cut and Shutdown returns ctx's error once
// they are gone. It is safe to call more than once.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.draining = true
	conns := make([]*conn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	for _, c := range conns {
		c.closeWith(protocol.CloseDrain, "server draining")
	}
	e.cancel()
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		e.mu.RLock()
		for c := range e.conns {
			c.kill()
		}
		e.mu.RUnlock()
		<-done
		return ctx.Err()
	}
}

// counters are the engine's operational counters.
type counters struct {
	tailStarts      atomic.Int64
	tailBatches     atomic.Int64
	connections     atomic.Int64
	subscriptions   atomic.Int64
	replayQueries   atomic.Int64
	replayShared    atomic.Int64
	replayMemory    atomic.Int64
	snapshotQueries atomic.Int64
	snapshotShared  atomic.Int64
	delivered       atomic.Int64
	dropped         atomic.Int64
	resets          atomic.Int64
}

// Stats is a snapshot of an engine's counters.
type Stats struct {
	TailStarts      int64 // times the tailer started: 1 once serving, however often servers start
	TailBatches     int64 // batches read by the tailer
	Connections     int64 // open WebSocket connections
	Subscriptions   int64 // active subscriptions
	ReplayQueries   int64 // replay pages read from the feed
	ReplayShared    int64 // replay pages served by another subscription's read of the same page
	ReplayMemory    int64 // replays served from the engine's memory of recent changes
	SnapshotQueries int64 // snapshot pages read from the feed
	SnapshotShared  int64 // snapshot pages served by another subscription's read of the same page
	Delivered       int64 // live entries queued to sockets
	Dropped         int64 // live entries dropped for backpressure
	Resets          int64 // reset frames sent
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	s := &e.stats
	return Stats{
		TailStarts:      s.tailStarts.Load(),
		TailBatches:     s.tailBatches.Load(),
		Connections:     s.connections.Load(),
		Subscriptions:   s.subscriptions.Load(),
		ReplayQueries:   s.replayQueries.Load(),
		ReplayShared:    s.replayShared.Load(),
		ReplayMemory:    s.replayMemory.Load(),
		SnapshotQueries: s.snapshotQueries.Load(),
		SnapshotShared:  s.snapshotShared.Load(),
		Delivered:       s.delivered.Load(),
		Dropped:         s.dropped.Load(),
		Resets:          s.resets.Load(),
	}
}
