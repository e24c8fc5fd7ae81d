package core

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/text"
)

// conn is one WebSocket connection. Its reader goroutine owns the
// connection's lifetime: it reads and handles client frames and tears the
// connection down when reading ends. Writes go through the outbound queue
// (sendqueue.go), which the fan-out writes itself where the socket takes
// it at once (socketdirect.go), and otherwise a writer goroutine drains,
// running only while there is something to write.
type conn struct {
	e  *Engine
	ws Socket

	// principal is who the connection speaks for (see currentPrincipal):
	// the app's at accept, replaced by the token of hello or refresh.
	principal atomic.Pointer[authz.Principal]

	// Set by the reader goroutine before any subscription exists; read-only
	// afterwards.
	origin    string
	build     string
	helloDone bool
	limiter   frameLimiter // reader goroutine only
	// pid is the principal whose bounds the connection counts against
	// (principallimit.go), set at hello; counted says its connection is
	// counted, to be forgotten at teardown.
	pid     string
	counted bool

	mu       sync.Mutex
	subs     map[string]*subscription
	out      outbound  // guarded by mu
	muts     mutations // guarded by mu
	closing  bool      // a close frame is being sent; nothing else is queued
	killOnce sync.Once
}

// Accept takes over an upgraded WebSocket connection (a *websocket.Conn of
// gorilla/websocket satisfies Socket) for a caller the app
// identified as p (authz.Anonymous if none; a hello token may replace it).
// It returns at once; the engine serves the connection until it closes. If
// the engine is draining, the connection is closed with 4002 and ErrDraining
// is returned.
func (e *Engine) Accept(ws Socket, p authz.Principal) error {
	c := &conn{e: e, ws: ws, subs: map[string]*subscription{}}
	c.principal.Store(&p)
	c.out.init(e.cfg.SendBuffer)
	c.initDirect()
	e.mu.Lock()
	if e.draining {
		e.mu.Unlock()
		deadline := time.Now().Add(time.Second)
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(int(protocol.CloseDrain), "server draining"), deadline)
		_ = ws.Close()
		return ErrDraining
	}
	e.conns[c] = struct{}{}
	e.wg.Add(1)
	e.mu.Unlock()
	e.start()
	e.stats.connections.Add(1)
	e.cfg.Observer.ConnOpened()
	go c.readLoop()
	return nil
}

// handle dispatches one client frame.
func (c *conn) handle(data []byte) {
	f, ferr := protocol.DecodeClientFrame(data)
	if ferr != nil && f.Type == protocol.FrameMutate && f.Key != "" && c.helloDone && ferr.Code != protocol.CodeUnsupportedVersion {
		// A mutation is answered by ack or reject, whatever is wrong with it.
		c.e.stats.mutationsRejected.Add(1)
		c.e.cfg.Observer.Mutated("", "", ferr.Code, 0)
		c.sendFrame(protocol.Reject(text.Truncate(f.Key, protocol.MaxKeyLen), presentReject(&protocol.Error{Code: ferr.Code, Message: cmp.Or(ferr.Detail, ferr.Message)})))
		return
	}
	if ferr != nil && f.Topic != "" && c.helloDone && ferr.Code != protocol.CodeUnsupportedVersion {
		c.sendFrame(protocol.TopicError(text.Truncate(f.Topic, protocol.MaxTopicLen), ferr)) // about a topic: say which
		return
	}
	if ferr != nil {
		c.sendError(f.ID, ferr)
		switch {
		case ferr.Code == protocol.CodeUnsupportedVersion:
			c.closeAfterFlush(protocol.CloseVersionSkew, "unsupported protocol version")
		case !c.helloDone:
			c.closeAfterFlush(protocol.ClosePolicy, "hello required")
		}
		return
	}
	if !c.helloDone && f.Type != protocol.FrameHello {
		c.sendError(f.ID, protocol.Errorf(protocol.CodeHelloRequired, "the first frame must be hello"))
		c.closeAfterFlush(protocol.ClosePolicy, "hello required")
		return
	}
	switch f.Type {
	case protocol.FrameHello:
		c.hello(f)
	case protocol.FrameSubscribe:
		c.subscribe(f)
	case protocol.FrameUnsubscribe:
		c.unsubscribe(f)
	case protocol.FrameRefresh:
		c.refresh(f)
	case protocol.FrameMutate:
		c.mutate(f)
	case protocol.FramePong:
		// The answer to a ping frame: reading it renewed the idle
		// deadline, which is all it is for.
	case protocol.FrameTopicSubscribe, protocol.FrameTopicUnsubscribe, protocol.FramePublish, protocol.FramePresenceUpdate:
		c.handleChannel(f) // channelconn.go
	}
}

func (c *conn) hello(f protocol.ClientFrame) {
	if c.helloDone {
		c.sendError("", protocol.Errorf(protocol.CodeBadFrame, "hello was already sent"))
		return
	}
	var expiry time.Time
	if f.Token != "" {
		revokes := c.e.auth.revokes.Load()
		p, exp, err := c.verifyToken(f.Token)
		if err == nil {
			c.principal.Store(&p)
			if c.e.auth.revokes.Load() != revokes {
				// A Revoke ran while the token was verified and may not have
				// seen this connection: ask the verifier again.
				_, _, err = c.verifyToken(f.Token)
			}
		}
		if err != nil {
			c.sendError("", err)
			c.closeAfterFlush(protocol.ClosePolicy, "unauthenticated")
			return
		}
		expiry = exp
	}
	pid := c.currentPrincipal().ID
	if err := c.e.bounds.addConn(pid); err != nil {
		c.sendError("", err)
		c.closeAfterFlush(protocol.CloseOverloaded, "too many connections")
		return
	}
	c.pid, c.counted = pid, true
	c.origin, c.build = f.Origin, f.Build
	c.helloDone = true
	_ = c.ws.SetReadDeadline(time.Now().Add(c.e.cfg.IdleTimeout))
	cfg := &c.e.cfg
	c.sendWelcome(protocol.Welcome(cfg.BuildID, c.currentPrincipal().ID, max(1, int(cfg.Heartbeat.Milliseconds())), cfg.limits()))
	if cfg.BuildID != "" && f.Build != "" && f.Build != cfg.BuildID {
		c.sendFrame(protocol.UpdateAvailable(cfg.BuildID))
	}
	if !expiry.IsZero() {
		c.e.auth.schedule(c, expiry) // after welcome: a refresh-token never precedes it
	}
}

// verifyToken checks a hello or refresh token with the engine's verifier and
// returns its principal and expiry (zero: none).
func (c *conn) verifyToken(token string) (authz.Principal, time.Time, *protocol.Error) {
	v := c.e.cfg.Tokens
	if v == nil {
		return authz.Anonymous, time.Time{}, protocol.Errorf(protocol.CodeUnauthenticated, "this server does not accept tokens")
	}
	ctx, cancel := context.WithTimeout(c.e.ctx, 10*time.Second)
	defer cancel()
	if err := c.e.revs.await(ctx); err != nil {
		return authz.Anonymous, time.Time{}, err
	}
	p, expiry, err := v.VerifyToken(ctx, token)
	if err != nil {
		return authz.Anonymous, time.Time{}, protocol.Errorf(protocol.CodeUnauthenticated, "invalid token: %v", err)
	}
	if p.IsAnonymous() {
		return authz.Anonymous, time.Time{}, protocol.Errorf(protocol.CodeUnauthenticated, "the token names no principal")
	}
	return p, expiry, nil
}

// refresh replaces the connection's token with a newer one for the same
// principal: the connection lives until the new expiry. The new token's
// claims and grants apply to later subscriptions, and the current ones are
// checked against them again (reauthorizeLater) unless nothing changed.
func (c *conn) refresh(f protocol.ClientFrame) {
	p, expiry, err := c.verifyToken(f.Token)
	if err != nil {
		c.e.cfg.Observer.TokenRefreshed(err.Code)
		c.sendError("", err)
		c.closeAfterFlush(protocol.ClosePolicy, "unauthenticated")
		return
	}
	old := c.currentPrincipal()
	if p.ID != old.ID {
		c.e.cfg.Observer.TokenRefreshed(protocol.CodeForbidden)
		c.sendError("", protocol.Errorf(protocol.CodeForbidden, "a refreshed token must be for the same principal"))
		c.closeAfterFlush(protocol.ClosePolicy, "principal changed")
		return
	}
	c.principal.Store(&p)
	c.e.auth.schedule(c, expiry)
	c.e.cfg.Observer.TokenRefreshed("")
	if !samePrincipal(old, p) {
		c.reauthorizeLater()
	}
}

func (c *conn) subscribe(f protocol.ClientFrame) {
	e := c.e
	req, err := e.parseRequest(f.Resource, f.Resources, f.Conditions, f.Cursor, f.Limit)
	if err != nil {
		e.cfg.Observer.SubscribeRefused(resourceName(req.res), err.Code)
		c.sendError(f.ID, err)
		return
	}
	c.mu.Lock()
	if _, dup := c.subs[f.ID]; dup {
		c.mu.Unlock()
		e.cfg.Observer.SubscribeRefused(req.res.schema.Name, protocol.CodeDuplicateSub)
		c.sendError(f.ID, protocol.Errorf(protocol.CodeDuplicateSub, "subscription %q is already active", f.ID))
		return
	}
	if len(c.subs) >= e.cfg.MaxSubscriptions {
		c.mu.Unlock()
		e.cfg.Observer.SubscribeRefused(req.res.schema.Name, protocol.CodeTooManySubscriptions)
		c.sendError(f.ID, protocol.Errorf(protocol.CodeTooManySubscriptions, "at most %d subscriptions per connection", e.cfg.MaxSubscriptions))
		return
	}
	if err := e.bounds.addSub(c.pid); err != nil {
		c.mu.Unlock()
		e.cfg.Observer.SubscribeRefused(req.res.schema.Name, err.Code)
		c.sendError(f.ID, err)
		return
	}
	s := newSubscription(c, f.ID, req.res, req.scope, req.limit)
	s.targets = req.targets
	c.subs[f.ID] = s
	e.wg.Add(1)
	c.mu.Unlock()
	e.stats.subscriptions.Add(1)
	for _, t := range req.targets {
		e.cfg.Observer.Subscribed(t.res.schema.Name)
	}
	go s.start(req)
}

func (c *conn) unsubscribe(f protocol.ClientFrame) {
	c.mu.Lock()
	s := c.subs[f.ID]
	c.mu.Unlock()
	if s == nil {
		c.sendError(f.ID, protocol.Errorf(protocol.CodeUnknownSub, "no subscription %q", f.ID))
		return
	}
	c.dropSub(s)
}

// dropSub ends a subscription and forgets it.
func (c *conn) dropSub(s *subscription) {
	c.mu.Lock()
	if c.subs[s.id] == s {
		delete(c.subs, s.id)
		c.e.bounds.dropSubs(c.pid, 1)
		c.e.stats.subscriptions.Add(-1)
		s.observeEnded()
	}
	c.mu.Unlock()
	s.close()
}

// failSub reports err for a subscription and ends it.
func (c *conn) failSub(s *subscription, err error) {
	te := ErrorFor(err)
	c.e.cfg.Observer.SubscribeRefused(s.res.schema.Name, te.Code)
	if te.Code == protocol.CodeUnavailable {
		c.e.cfg.Logger.Error("tide: subscription failed", "resource", s.scope.Schema.Name, "scope", s.scope.Key(), "err", err)
	}
	c.dropSub(s)
	c.sendError(s.id, te)
}

func (c *conn) sendError(id string, err *protocol.Error) { c.sendFrame(protocol.ErrorFrame(id, err)) }

func (c *conn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// isEnding reports whether a close is sent or queued: the reader then
// ignores the peer's frames.
func (c *conn) isEnding() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing || c.out.closeQueued
}

// currentPrincipal returns who the connection speaks for: the app's
// principal from the upgrade request, or the one of the connection's
// latest valid token. Safe for concurrent use: the fan-out reads it for
// every change.
func (c *conn) currentPrincipal() authz.Principal {
	if p := c.principal.Load(); p != nil {
		return *p
	}
	return authz.Anonymous
}
