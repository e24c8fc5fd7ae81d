package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

// Engine is tide's server side: the resource registry, the tailer that reads
// the feed in commit order, the fan-out that matches each change to the
// subscriptions of its scope, and the connections. Create it with New,
// register resources, then serve it through package middleware.
//
// The engine's background work (one tailer) starts once: when Start is
// called (tide.Open calls it), or else the first time a connection, poll or
// readiness probe needs it, however many handlers or servers use the
// engine. An Engine is safe for concurrent use.
type Engine struct {
	cfg    Config
	feed   feed.Feed
	bus    busState      // the tailer's source of live changes
	epoch  string        // the feed's epoch; set by the tailer before ready is closed
	sealer *cursorSealer // seals snapshot cursors (cursorseal.go); set with epoch
	hub    *hub
	heads  headBatcher
	cache  replayCache      // recent changes and shared feed reads, for catch-up
	auth   *tokenTimers     // token expiry and revocation (tokens.go, revoke.go)
	revs   *revSync         // revocations to and from the other nodes (revsync.go)
	limits *catchUpLimiter  // concurrent catch-up reads (catchuplimit.go)
	bounds *principalLimits // what each principal holds (principallimit.go)
	follow *follower        // policy re-checks when what they read changes (follower.go)
	traces *mutationTraces  // spans of recent mutations, nil unless the tracer links (tracelink.go)
	chans  *chanHub         // app channels: topics, presence (channel*.go)
	ctx    context.Context  // cancelled by Shutdown
	cancel context.CancelFunc

	mu        sync.RWMutex
	resources map[string]*resource
	conns     map[*conn]struct{}
	draining  bool

	started bool          // guarded by mu
	startSt startState    // guarded by mu: the tailer's last start attempt (Ready)
	ready   chan struct{} // closed once the tailer knows its start position
	wg      sync.WaitGroup
	stats   counters

	retries retryLog                                        // which retried failures are logged (retrylog.go)
	sleep   func(ctx context.Context, d time.Duration) bool // tests: replaces backoff.Sleep in retryWait
}

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
	e.cache = newReplayCache(cfg.ReplayCache)
	e.hub = newHub(e)
	e.auth = newTokenTimers(ctx, cfg.Clock)
	e.revs = newRevSync(e)
	e.limits = newCatchUpLimiter(cfg.MaxCatchUps, cfg.MaxCatchUpsPerPrincipal)
	e.bounds = newPrincipalLimits(&e.cfg)
	e.follow = newFollower(e)
	if _, ok := cfg.Tracer.(SpanLinker); ok {
		e.traces = newMutationTraces()
	}
	e.chans = newChanHub(e)
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
		return fmt.Errorf("%w: register %s", ErrDuplicateResource, r.schema.Name)
	}
	edges, err := resolveDependencies(r, r.dependsOn, e.resources)
	if err != nil {
		return err
	}
	e.follow.addEdges(edges)
	e.resources[r.schema.Name] = r
	return nil
}

func (e *Engine) resource(name string) *resource {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.resources[name]
}

// Start launches the engine's background work now rather than when the
// first connection, poll or readiness probe needs it: the tailer, which
// follows the feed from its head (and so starts the feed's own work, such
// as the Postgres feed's sequencer), and the pinger. A node that should
// follow its feed while no client is connected calls it once its resources
// are registered and the feed is migrated; tide.Open does. Calling it again
// does nothing. It returns ErrDraining once Shutdown has begun; Shutdown
// stops what it started.
func (e *Engine) Start() error {
	if !e.start() {
		return ErrDraining
	}
	return nil
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
		e.wg.Add(4)
		go e.tailLoop()
		go e.pingLoop()
		go e.revs.start()
		go e.follow.run()
	}
	return true
}

// pingLoop asks every connection to ping its peer once per heartbeat: a
// WebSocket ping, whose answer keeps the connection within its idle
// timeout (a peer that never answers is swept by its read deadline, 4001),
// and a ping frame on a welcomed connection, which lets the client tell a
// dead connection from a quiet one. One ticker serves all connections so
// an idle connection owns no timer.
func (e *Engine) pingLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.Heartbeat)
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
// While the feed says it is not installed, it returns an error with
// protocol.CodeNotMigrated instead of waiting.
func (e *Engine) awaitReady(ctx context.Context) error {
	e.start()
	for {
		changed, err := e.startErr()
		if errors.Is(err, feed.ErrNotInstalled) {
			select {
			case <-e.ready:
				return nil
			default:
				return errNotMigrated
			}
		}
		select {
		case <-e.ready:
			return nil
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.ctx.Done():
			return ErrDraining
		}
	}
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
	// At once, not one after another: a peer slow to take its close frame
	// holds up only its own.
	var closing sync.WaitGroup
	for _, c := range conns {
		closing.Go(func() { c.closeWith(protocol.CloseDrain, "server draining") })
	}
	e.cancel()
	done := make(chan struct{})
	go func() {
		closing.Wait()
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			c.kill() // a close frame still waiting on its peer fails at once
		}
		e.mu.RLock()
		for c := range e.conns {
			c.kill()
		}
		e.mu.RUnlock()
		<-done
		return ctx.Err()
	}
}

// startState is the tailer's progress towards ready: the error of its last
// attempt to read the feed's head, and a channel closed when it changes.
type startState struct {
	err     error
	changed chan struct{}
}

// setStartErr records the outcome of the tailer's last attempt to start.
func (e *Engine) setStartErr(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.startSt.changed == nil {
		e.startSt.changed = make(chan struct{})
	}
	if (e.startSt.err == nil) == (err == nil) && errors.Is(e.startSt.err, feed.ErrNotInstalled) == errors.Is(err, feed.ErrNotInstalled) {
		e.startSt.err = err
		return
	}
	e.startSt.err = err
	close(e.startSt.changed)
	e.startSt.changed = make(chan struct{})
}

// startErr returns the tailer's last start error and a channel closed when
// it changes.
func (e *Engine) startErr() (<-chan struct{}, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.startSt.changed == nil {
		e.startSt.changed = make(chan struct{})
	}
	return e.startSt.changed, e.startSt.err
}

// Ready reports whether the engine serves subscriptions: nil once its
// tailer reads the feed, otherwise why not. The error wraps
// feed.ErrNotInstalled while the feed's migration has not run (with
// Postgres: Migrate), and is the feed's error while the feed cannot be read.
// It starts the engine's background work if nothing did yet, so a readiness
// probe may call it from the first request on.
func (e *Engine) Ready() error {
	if !e.start() {
		return ErrDraining
	}
	select {
	case <-e.ready:
		return nil
	default:
	}
	_, err := e.startErr()
	switch {
	case errors.Is(err, feed.ErrNotInstalled):
		return fmt.Errorf("tide: not ready: the change feed is not installed (run its migration: with Postgres, Migrate or tide.Open): %w", err)
	case err != nil:
		return fmt.Errorf("tide: not ready: the change feed cannot be read: %w", err)
	}
	return errors.New("tide: not ready: starting")
}
