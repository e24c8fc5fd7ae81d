package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/backoff"
)

// Connection timing. A server that announces a heartbeat in welcome
// (heartbeat_ms, H) sends a ping frame at least every H: the client
// answers pong, and treats the connection as dead when no frame at all
// arrives for 2·H. Without a heartbeat the client pings the server (a
// WebSocket ping) and gives up after readTimeout without anything.
const (
	pingInterval = 30 * time.Second
	readTimeout  = 75 * time.Second // without a heartbeat: no frame, ping or pong for this long and the connection is dead
	writeTimeout = 10 * time.Second
	maxFrameRead = 128 << 20 // a server frame larger than this is refused
)

// ErrDeadConnection is the error (wrapped) of the EventDisconnected that
// reports a connection the client gave up on because nothing arrived from
// the server in time: for two heartbeats of a server that announced one,
// else 75 s. The client closes such a connection and reconnects with
// backoff, as after any other loss.
var ErrDeadConnection = errors.New("client: no frame from the server in time; the connection is dead")

// session is one connection: a reader goroutine that decodes frames into a
// queue, and the goroutine running loop, which handles them in order
// (applying batches). It ends when the reader ends, when the client drops
// it (abort), or when Run's context ends.
type session struct {
	c   *Client
	ws  *websocket.Conn
	q   *frameQueue
	ctx context.Context // ends when the session does
	end context.CancelFunc

	wmu  sync.Mutex // serializes writes; taken before c.mu, never under it
	pace pacer      // guarded by wmu

	// Guarded by c.mu.
	ids    map[string]*subInst // subscriptions held on this connection
	ready  bool                // welcomed: scopes are subscribed here
	timers []*time.Timer       // pending resubscribes

	wg         sync.WaitGroup // helper goroutines: keepalive, token refresh, resubscribe timers
	readerDone chan struct{}
	welcomed   bool          // set by loop
	pings      chan struct{} // capacity 1: the reader saw a ping frame, keepalive answers pong
	stop       error         // set by loop: an error that must end Run (ErrOtherPrincipal)

	// Mutations: mmu serializes sending them so they go out in sequence
	// order; sent holds the keys sent on this connection.
	mmu     sync.Mutex
	sent    map[string]bool
	resends int // resends asked for by unavailable, draining or rate_limited rejects

	tokMu      sync.Mutex
	lastToken  string // the token last sent, in hello or refresh
	refreshing bool   // a refresh is being fetched or retried

	endMu        sync.Mutex
	reason       error // why the client ended the session, if it did
	fault        bool  // reason is a failure of this side or a bad frame: slow the reconnects down
	readErr      error // why the reader stopped
	serverClosed bool  // the server sent a close frame before the client ended the session
}

// subInst is one subscription of a scope on one connection.
type subInst struct {
	st   *scopeState
	sess *session
	id   string
	// needReset: subscribed without a cursor and nothing applied yet, so
	// the next batch must carry Reset. Read and written only by loop
	// (after a lookup under c.mu).
	needReset bool
	// live: caught up at least once, so entries are live pushes (loop
	// only).
	live bool
	// snap holds the pages of a snapshot of several resources until its
	// caught-up, for a synced scope (loop only; see applySync).
	snap *heldSnapshot
}

// sessionResult tells Run how a session ended.
type sessionResult struct {
	welcomed  bool
	fault     bool
	err       error
	closeCode protocol.CloseCode
	closeText string
	stop      error // Run must return it (ErrOtherPrincipal)
}

// runSession dials, says hello and serves one connection until it ends.
func (c *Client) runSession(ctx context.Context) sessionResult {
	hello := protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameHello, Build: c.cfg.Build, Origin: c.cfg.Origin}
	if c.cfg.Token != nil {
		tok, err := c.cfg.Token(ctx)
		if err != nil {
			err = fmt.Errorf("client: token for hello: %w", err)
			if ctx.Err() == nil {
				c.emit(Event{Kind: EventTokenError, Err: err})
			}
			return sessionResult{err: err}
		}
		hello.Token = tok
	}
	header := c.cfg.Header
	if c.cfg.HeaderFunc != nil {
		h, err := c.cfg.HeaderFunc(ctx)
		if err != nil {
			return sessionResult{err: fmt.Errorf("client: request header: %w", err)}
		}
		header = header.Clone()
		if header == nil {
			header = http.Header{}
		}
		for k, v := range h {
			header[k] = v
		}
	}
	ws, resp, err := c.dialer.DialContext(ctx, c.cfg.URL, header)
	if err != nil {
		return sessionResult{err: dialError(c.cfg.URL, resp, err)}
	}
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	ws.SetReadLimit(maxFrameRead)
	sctx, end := context.WithCancel(ctx)
	s := &session{c: c, ws: ws, q: newFrameQueue(), ctx: sctx, end: end, pace: newPacer(), ids: map[string]*subInst{}, readerDone: make(chan struct{}), pings: make(chan struct{}, 1), sent: map[string]bool{}, lastToken: hello.Token}
	c.mu.Lock()
	c.sess = s
	c.mu.Unlock()

	hs := c.dialer.HandshakeTimeout
	if hs <= 0 {
		hs = defaultHandshake
	}
	_ = ws.SetReadDeadline(time.Now().Add(hs)) // welcome must come within the handshake timeout
	go s.readLoop()
	s.wg.Add(1)
	go s.keepalive()
	if err := s.write(hello); err == nil {
		s.loop(ctx)
	}
	if ctx.Err() != nil {
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(int(protocol.CloseNormal), "client stopped"), time.Now().Add(time.Second))
	}
	s.finish()

	res := sessionResult{welcomed: s.welcomed, stop: s.stop}
	s.endMu.Lock()
	res.err, res.fault = s.reason, s.fault
	readErr, serverClosed := s.readErr, s.serverClosed
	s.endMu.Unlock()
	var ce *websocket.CloseError
	if errors.As(readErr, &ce) {
		res.closeCode, res.closeText = protocol.CloseCode(ce.Code), ce.Text
	}
	if res.err == nil || errors.Is(res.err, errSessionOver) && readErr != nil {
		res.err = readErr
	}
	if res.stop != nil {
		res.err = res.stop
	}
	if serverClosed && ctx.Err() == nil && res.closeCode != protocol.CloseDrain && res.closeCode != protocol.CloseGoingAway {
		// The server closed it, not the client stopping (whose close the
		// server answers with one of its own).
		c.countServerClose(ctx, s)
	}
	return res
}

// errSessionOver is the reason a session ends when nothing else ended it
// first: its connection closed.
var errSessionOver = errors.New("client: connection closed")

// dialError describes a failed upgrade, with the server's error frame if
// it answered with one.
func dialError(url string, resp *http.Response, err error) error {
	if resp == nil {
		return fmt.Errorf("client: dial %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var f struct {
		Code    protocol.Code `json:"code"`
		Message string        `json:"message"`
	}
	if json.Unmarshal(body, &f) == nil && f.Code != "" {
		return fmt.Errorf("client: dial %s: HTTP %s: %s: %s", url, resp.Status, f.Code, f.Message)
	}
	return fmt.Errorf("client: dial %s: HTTP %s: %w", url, resp.Status, err)
}

// readLoop reads and decodes frames into the queue until the connection
// ends. It never waits for the handlers.
//
// It also keeps the connection honest: after welcome, a frame must arrive
// within the idle bound (two heartbeats of a server that announced one),
// or the read fails and the session ends (ErrDeadConnection); ping frames
// are answered with pong, by keepalive, so a slow handler cannot delay
// the answer.
func (s *session) readLoop() {
	defer close(s.readerDone)
	ws := s.ws
	idle := readTimeout
	welcomed := false
	extend := func() { _ = ws.SetReadDeadline(time.Now().Add(idle)) }
	ws.SetPongHandler(func(string) error { extend(); return nil })
	ws.SetPingHandler(func(data string) error {
		extend()
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeTimeout))
		var ne net.Error
		if err == websocket.ErrCloseSent || errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})
	for {
		mt, data, err := ws.ReadMessage()
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout() && welcomed:
				err = fmt.Errorf("%w: nothing for %v (%v)", ErrDeadConnection, idle, err)
			case errors.As(err, &ne) && ne.Timeout():
				err = fmt.Errorf("client: no welcome within the handshake timeout: %w", err)
			}
			var ce *websocket.CloseError
			s.endMu.Lock()
			s.readErr = err
			// 1006 is no close frame: the library's code for a connection
			// that ended without one (the server's process killed, the
			// network lost), which does not count against the mutations.
			s.serverClosed = errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure && s.reason == nil
			s.endMu.Unlock()
			s.q.close()
			return
		}
		if mt != websocket.TextMessage {
			s.protocolError(nil, errors.New("the server sent a binary message; frames are JSON text"))
			return
		}
		f, err := protocol.DecodeServerFrame(data)
		if err != nil {
			s.protocolError(nil, err)
			return
		}
		switch f.Type {
		case protocol.FrameWelcome:
			welcomed = true
			if f.HeartbeatMS > 0 {
				idle = 2 * time.Duration(f.HeartbeatMS) * time.Millisecond
			}
		case protocol.FramePing:
			select {
			case s.pings <- struct{}{}:
			default: // a pong is on its way already
			}
		}
		extend()
		if f.Type != protocol.FramePing {
			s.q.push(f)
		}
	}
}

// keepalive pings the server so a dead connection is noticed by the read
// deadline, and answers the server's ping frames with pong.
func (s *session) keepalive() {
	defer s.wg.Done()
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.pings:
			if err := s.write(protocol.ClientFrame{V: protocol.Version, Type: protocol.FramePong}); err != nil {
				return
			}
		case <-t.C:
			if err := s.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout)); err != nil {
				s.abort(fmt.Errorf("client: ping: %w", err), false)
				return
			}
		}
	}
}

// abort ends the session from this side: queued frames are discarded and
// the connection is cut. The first reason is kept.
func (s *session) abort(reason error, fault bool) {
	s.endMu.Lock()
	if s.reason == nil {
		s.reason, s.fault = reason, fault
	}
	s.endMu.Unlock()
	s.q.abort()
	_ = s.ws.Close()
}

// finish tears the session down once loop has returned.
func (s *session) finish() {
	s.abort(errSessionOver, false)
	<-s.readerDone
	s.end()
	c := s.c
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	for id, inst := range s.ids {
		if inst.st.inst == inst {
			inst.st.inst = nil
			if inst.st.state != SubFailed {
				inst.st.setStateLocked(SubConnecting, nil)
			}
		}
		delete(s.ids, id)
	}
	s.ready = false
	timers := s.timers
	s.timers = nil
	c.mu.Unlock()
	for _, t := range timers {
		if t.Stop() {
			s.wg.Done()
		}
	}
	s.wg.Wait()
}

// write sends one client frame.
func (s *session) write(f protocol.ClientFrame) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeLocked(f)
}

func (s *session) writeLocked(f protocol.ClientFrame) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return s.writeDataLocked(f.Type, data)
}

// writeData sends one encoded client frame of type typ.
func (s *session) writeData(typ string, data []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeDataLocked(typ, data)
}

func (s *session) writeDataLocked(typ string, data []byte) error {
	if err := s.pace.wait(s.ctx); err != nil {
		return err
	}
	_ = s.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := s.ws.WriteMessage(websocket.TextMessage, data); err != nil {
		s.abort(fmt.Errorf("client: write %s: %w", typ, err), false)
		return err
	}
	return nil
}

// loop handles frames in arrival order until the session ends.
func (s *session) loop(ctx context.Context) {
	for {
		f, ok := s.q.pop(ctx)
		if !ok {
			return
		}
		s.handle(ctx, f)
	}
}

func (s *session) handle(ctx context.Context, f protocol.ServerFrame) {
	c := s.c
	if s.channelFrame(f) { // app channel topics: channel.go
		return
	}
	switch f.Type {
	case protocol.FrameWelcome:
		if s.welcomed {
			return
		}
		if err := c.welcomed(ctx, f); errors.Is(err, ErrOtherPrincipal) {
			// Nothing is subscribed or sent: the store's data and queue
			// are another principal's.
			c.log.Error("tide client: the server names another principal than the store's; stopping", "err", err)
			s.stop = err
			s.abort(err, false)
			return
		} else if err != nil {
			s.c.log.Error("tide client: store failed; dropping the connection", "err", err)
			s.abort(err, true)
			c.emit(Event{Kind: EventStoreError, Err: err})
			return
		}
		s.welcomed = true
		if f.Limits != nil {
			s.wmu.Lock()
			s.pace.adopt(f.Limits.FrameRate, f.Limits.FrameBurst)
			s.wmu.Unlock()
		}
		s.subscribeAll(ctx)
		s.subscribeTopics() // channel.go
		s.flushMutations()
		c.log.Info("tide client: connected", "build", f.Build)
		c.emit(Event{Kind: EventConnected, Build: f.Build})
	case protocol.FrameChanges, protocol.FrameCaughtUp, protocol.FrameReset:
		if inst := s.lookup(f.ID); inst != nil {
			s.apply(ctx, inst, f)
		} else {
			c.log.Debug("tide client: ignoring a frame for a subscription not held", "type", f.Type, "id", f.ID)
		}
	case protocol.FrameError:
		s.serverError(ctx, f)
	case protocol.FrameUpdateAvailable:
		c.log.Info("tide client: update available", "build", f.Build)
		c.emit(Event{Kind: EventUpdateAvailable, Build: f.Build})
	case protocol.FrameRefreshToken:
		s.refreshToken(f)
	case protocol.FrameAck:
		s.onAck(ctx, f)
	case protocol.FrameReject:
		s.onReject(ctx, f)
	default:
		// Unknown informational frames are ignored (protocol: unknown
		// fields and new frame types must not break old clients).
	}
}

// lookup returns the subscription the id names on this connection, or nil.
func (s *session) lookup(id string) *subInst {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.ids[id]
}

// current reports whether inst is still held: not unsubscribed, not ended
// by the server, not of an ended connection. The caller holds c.mu.
func (s *session) currentLocked(inst *subInst) bool {
	return s.ids[inst.id] == inst && !inst.st.removed
}

// subscribeAll subscribes every declared scope once welcome arrived.
func (s *session) subscribeAll(ctx context.Context) {
	c := s.c
	c.mu.Lock()
	s.ready = true
	scopes := c.declaredLocked()
	c.mu.Unlock()
	for _, st := range scopes {
		s.subscribe(ctx, st)
	}
}

// subscribe subscribes st on this connection with its stored cursor and a
// fresh id, unless it is already subscribed here, was unsubscribed, or the
// connection is not (or no longer) the welcomed current one.
func (s *session) subscribe(ctx context.Context, st *scopeState) {
	c := s.c
	cursor, err := c.storedCursor(context.WithoutCancel(ctx), st)
	if err != nil {
		s.storeError(st, err)
		return
	}
	s.wmu.Lock() // held across registration and write, so an Unsubscribe's frame follows this one
	defer s.wmu.Unlock()
	c.mu.Lock()
	if c.sess != s || !s.ready || st.removed || st.inst != nil || c.scopes[st.norm.digest] != st {
		c.mu.Unlock()
		return
	}
	c.nextID++
	inst := &subInst{st: st, sess: s, id: strconv.FormatUint(c.nextID, 10), needReset: cursor == ""}
	s.ids[inst.id] = inst
	st.inst = inst
	if st.state != SubConnecting {
		st.setStateLocked(SubConnecting, nil) // a failed scope is tried again; Err stays until it catches up
	}
	c.mu.Unlock()
	c.log.Debug("tide client: subscribe", "scope", st.scope, "id", inst.id, "cursor", cursor)
	f := protocol.ClientFrame{
		V: protocol.Version, Type: protocol.FrameSubscribe, ID: inst.id,
		Resource: st.norm.resource, Conditions: st.norm.condMap, Cursor: cursor,
	}
	if st.norm.resources != nil {
		// Without resource, a server that knows only single-resource
		// subscriptions refuses this one instead of serving one resource.
		f.Resource, f.Resources = "", st.norm.resources
	}
	_ = s.writeLocked(f)
}

// release forgets inst on this connection (the server ended it).
func (s *session) releaseLocked(inst *subInst) {
	delete(s.ids, inst.id)
	if inst.st.inst == inst {
		inst.st.inst = nil
	}
}

// serverError handles an error frame.
func (s *session) serverError(ctx context.Context, f protocol.ServerFrame) {
	c := s.c
	ev := Event{Kind: EventServerError, SubscriptionID: f.ID, Code: f.Code, Message: f.Message, Detail: f.Detail}
	if f.ID == "" {
		c.log.Warn("tide client: server error", "code", f.Code, "message", f.Message)
		c.emit(ev)
		return
	}
	c.mu.Lock()
	inst := s.ids[f.ID]
	if inst != nil {
		s.releaseLocked(inst)
	}
	c.mu.Unlock()
	if inst == nil {
		// An error for a subscription no longer held, e.g. the answer to
		// unsubscribing one the server had already ended.
		c.log.Debug("tide client: server error for a subscription not held", "id", f.ID, "code", f.Code)
		c.emit(ev)
		return
	}
	st := inst.st
	ev.Scope = st.scope
	declared := func() bool { return !st.removed && c.scopes[st.norm.digest] == st }
	c.log.Warn("tide client: subscription refused or ended by the server", "scope", st.scope, "code", f.Code, "message", f.Message)
	switch f.Code {
	case protocol.CodeInvalidCursor:
		err := c.persist(context.WithoutCancel(ctx), st, declared, func(r *Record) bool {
			r.Cursor, r.State = "", StateSyncing
			return true
		})
		if err != nil {
			s.storeError(st, err)
			return
		}
		s.subscribe(ctx, st)
	case protocol.CodeUnavailable, protocol.CodeInternal, protocol.CodeRateLimited, protocol.CodeDraining, protocol.CodeDuplicateSub, protocol.CodeTooManySubscriptions:
		c.mu.Lock()
		st.setStateLocked(SubConnecting, serverErr(f))
		c.mu.Unlock()
		s.retryLater(st)
	default:
		// The data goes first: whoever sees the scope failed sees it
		// without the rows it may no longer hold.
		var err error
		if accessRefused(f.Code) {
			err = c.dropScopeData(ctx, st, f.Code)
		} else {
			s.refuseCopy(ctx, st)
			err = c.persist(context.WithoutCancel(ctx), st, declared, func(r *Record) bool {
				if r.State == StateFailed && r.Refusal == f.Code {
					return false
				}
				r.State, r.Refusal = StateFailed, f.Code
				return true
			})
		}
		c.mu.Lock()
		st.setStateLocked(SubFailed, serverErr(f))
		c.mu.Unlock()
		if err != nil {
			s.storeError(st, err)
		}
		if f.Code == protocol.CodeUnauthenticated {
			c.emit(ev)
			if c.renewable() {
				// The session or token may have ended (a server restart
				// lost the app's sessions): reconnect with fresh
				// credentials, with a backoff that grows while the
				// refusals last.
				s.abort(fmt.Errorf("client: subscription of %s refused: %s; reconnecting with fresh credentials", st.scope, f.Code), true)
				return
			}
			// Credentials the client cannot renew were refused: nothing
			// changes until the app signs in again, so Run ends and says
			// so rather than keep running with the scope failed.
			err := fmt.Errorf("%w: subscription of %s: %w", ErrCredentialsRefused, st.scope, serverErr(f))
			c.log.Error("tide client: the server refused the client's credentials; stopping", "err", err)
			s.stop = err
			s.abort(err, false)
			return
		}
	}
	c.emit(ev)
}

// refuseCopy marks a synced scope refused, so the mutations it held back
// from settling settle now.
func (s *session) refuseCopy(ctx context.Context, st *scopeState) {
	if st.copy == nil {
		return
	}
	c := s.c
	c.lmu.Lock()
	st.copy.refused = true
	settled := c.rep.settle()
	var err error
	if len(settled) > 0 {
		err = c.saveQueueLocked(ctx)
	}
	c.lmu.Unlock()
	settleHandles(settled)
	if err != nil {
		s.queueError(err)
	}
}

// retryLater resubscribes st on this connection after a backoff that grows
// with its consecutive failures.
func (s *session) retryLater(st *scopeState) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != s || !s.ready {
		return // the next connection subscribes it
	}
	d := backoff.Delay(st.retries, c.cfg.MinBackoff, c.cfg.MaxBackoff)
	st.retries++
	s.wg.Add(1)
	s.timers = append(s.timers, time.AfterFunc(d, func() {
		defer s.wg.Done()
		s.subscribe(s.ctx, st)
	}))
}

// ErrSameToken is reported (EventTokenError) when Config.Token returns the
// token the connection already uses in answer to a refresh-token: the
// client does not send it again, lest server and client ask and answer in
// a loop; it asks Config.Token again after a backoff.
var ErrSameToken = errors.New("client: the token function returned the token already in use")

// refreshToken answers refresh-token with a fresh token from Config.Token.
// A failure, or the same token again, is retried with the connection
// backoff until a new token is sent or the connection ends: if the token
// expires first, the server closes the connection and Run reconnects with
// a fresh token.
func (s *session) refreshToken(f protocol.ServerFrame) {
	c := s.c
	if c.cfg.Token == nil {
		c.log.Warn("tide client: the server asks for a fresh token but Config.Token is not set", "expires_in", f.ExpiresIn)
		return
	}
	s.tokMu.Lock()
	if s.refreshing {
		s.tokMu.Unlock()
		return
	}
	s.refreshing = true
	s.tokMu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// done ends the refresh, recording the token sent if any. It runs
		// before EventTokenRefreshed is emitted, so a refresh-token that
		// arrives after the event never finds this refresh under way and
		// is never ignored.
		done := func(sent string) {
			s.tokMu.Lock()
			if sent != "" {
				s.lastToken = sent
			}
			s.refreshing = false
			s.tokMu.Unlock()
		}
		for attempt := 0; ; attempt++ {
			tok, err := c.cfg.Token(s.ctx)
			if s.ctx.Err() != nil {
				done("")
				return
			}
			s.tokMu.Lock()
			same := err == nil && tok == s.lastToken
			s.tokMu.Unlock()
			if same {
				err = ErrSameToken
			}
			if err == nil {
				if err := s.write(protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameRefresh, Token: tok}); err != nil {
					done("")
					return
				}
				done(tok)
				c.emit(Event{Kind: EventTokenRefreshed})
				return
			}
			d := backoff.Delay(attempt, c.cfg.MinBackoff, c.cfg.MaxBackoff)
			c.log.Warn("tide client: token refresh failed; retrying", "err", err, "delay", d)
			c.emit(Event{Kind: EventTokenError, Err: err, Attempt: attempt, Delay: d})
			if !backoff.Sleep(s.ctx, d) {
				done("")
				return
			}
		}
	}()
}

// protocolError reports a server frame the client cannot use and drops
// the connection.
func (s *session) protocolError(st *scopeState, err error) {
	ev := Event{Kind: EventProtocolError, Err: err}
	if st != nil {
		ev.Scope = st.scope
	}
	s.c.log.Error("tide client: protocol error; dropping the connection", "err", err)
	s.abort(fmt.Errorf("client: protocol error: %w", err), true)
	s.c.emit(ev)
}

// storeError reports a CursorStore failure and drops the connection, so
// nothing is applied that is not recorded.
func (s *session) storeError(st *scopeState, err error) {
	s.c.log.Error("tide client: cursor store failed; dropping the connection", "scope", st.scope, "err", err)
	s.abort(fmt.Errorf("client: cursor store: %w", err), true)
	s.c.emit(Event{Kind: EventStoreError, Scope: st.scope, Err: err})
}
