package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/backoff"
)

// Client is a tide client: it holds the app's subscriptions, keeps one
// connection to the server (reconnecting as needed, see Run), applies what
// the server sends through each subscription's Handler and persists each
// scope's applied cursor. Create it with New. A Client is safe for
// concurrent use.
//
// What the client does when the server ends a subscription with an error
// frame depends on the code: invalid_cursor deletes the stored cursor and
// resubscribes at once without one; unavailable, internal, rate_limited,
// draining, duplicate_subscription and too_many_subscriptions (the user's
// subscriptions across its connections may be at the server's bound)
// resubscribe on the same connection
// after a full-jitter backoff that grows with each consecutive failure of
// that scope (and resets when it catches up); unauthenticated reconnects
// with fresh credentials (Config.Token, Config.HeaderFunc), or ends Run
// with an error wrapping ErrCredentialsRefused if the client has neither;
// any other code (forbidden, unknown_resource, invalid_conditions, ...)
// leaves the scope unsubscribed on that connection and marks its record
// failed — it is tried again on the next connection, or at once by
// Subscription.Retry, since access or the server may have changed. A scope
// refused for access (forbidden, unauthenticated) also loses its rows and
// its cursor, in memory and in the store, before its state says failed:
// local data follows access. Every case is reported through
// Config.OnEvent.
type Client struct {
	cfg    Config
	log    *slog.Logger
	store  CursorStore
	dialer *websocket.Dialer

	// storeMu serializes the read-modify-write of records, and the check
	// that a subscription is still current with the write.
	storeMu sync.Mutex

	// lmu guards the local store (rep): synced scopes' copies and the
	// mutation log. Lock order: lmu, then storeMu, then mu.
	lmu    sync.Mutex
	rep    *replica
	qstore QueueStore // nil: the queue lives in memory only

	// metaMu guards meta, the store's Meta as last saved (meta.go).
	metaMu sync.Mutex
	meta   Meta
	mstore MetaStore // nil: the meta lives in memory only

	mu      sync.Mutex
	running bool
	scopes  map[string]*scopeState // declared scopes, by digest
	seq     uint64                 // declaration order of scopes
	sess    *session               // the current connection, nil between connections
	nextID  uint64                 // last subscription id handed out; ids are never reused

	topics topics // app channel topics joined (channel.go)
}

// scopeState is a declared scope.
type scopeState struct {
	scope   Scope
	norm    normScope
	handler Handler    // nil for a synced scope
	copy    *scopeCopy // the client-kept copy of a synced scope (guarded by Client.lmu); nil with a Handler
	seq     uint64
	echoes  map[rowID]echo // a Handler's scope: rows of acks whose live echo it may skip (echo.go; guarded by Client.lmu)

	// Guarded by Client.mu.
	removed bool     // unsubscribed
	inst    *subInst // its subscription on the current connection, if any
	retries int      // consecutive retryable server errors since the last caught-up
	state   SubState
	err     error         // the server's last refusal, until the next caught-up
	stateCh chan struct{} // closed and replaced on every state change
}

func (st *scopeState) newRecord() Record {
	return Record{Digest: st.norm.digest, Resource: st.norm.resource, Resources: st.norm.resources, Conditions: st.norm.condJSON, State: StateNew}
}

// Errors returned by the Client.
var (
	// ErrDuplicateScope is returned by Subscribe for a scope the client
	// already holds.
	ErrDuplicateScope = errors.New("client: scope already subscribed")
	// ErrRunning is returned by Run while another Run of the client is
	// active.
	ErrRunning = errors.New("client: Run is already active")
)

// CloseError is returned by Run when the server closed the connection with a
// code the client must not retry: 1008 (policy: missing or invalid
// credentials, access revoked) or 4000 (the server does not speak this
// client's protocol version).
type CloseError struct {
	Code   protocol.CloseCode // the WebSocket close code
	Reason string             // the close reason the server gave
}

// Error describes the close and what it means for the client.
func (e *CloseError) Error() string {
	what := "policy violation: do not retry with the same credentials"
	if e.Code == protocol.CloseVersionSkew {
		what = "protocol version skew: update the client"
	}
	return fmt.Sprintf("client: server closed the connection with %d (%s): %q", int(e.Code), what, e.Reason)
}

// New returns a client for cfg. It validates the configuration, reads the
// store's meta and queue (saving a new origin in a store that has none, see
// Config.Origin) and starts nothing; call Run.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:    cfg,
		log:    cfg.Logger,
		store:  cfg.Store,
		dialer: cfg.Dialer,
		scopes: map[string]*scopeState{},
		rep:    newReplica(),
	}
	c.qstore, _ = cfg.Store.(QueueStore)
	c.mstore, _ = cfg.Store.(MetaStore)
	if err := c.loadMeta(context.Background()); err != nil {
		return nil, err
	}
	if err := c.loadQueue(context.Background()); err != nil {
		return nil, fmt.Errorf("client: load the mutation queue: %w", err)
	}
	return c, nil
}

// Origin returns the client's origin id: Config.Origin, or the one its
// store records (see Meta.Origin). Writes made for this client should
// carry it (for example in the Tide-Origin request header).
func (c *Client) Origin() string { return c.cfg.Origin }

// Run connects to the server and keeps the connection up until ctx ends:
// after hello and welcome it subscribes every scope with its stored cursor,
// applies what arrives, and when the connection drops (or is found dead:
// ErrDeadConnection) it waits a full-jitter exponential backoff (the
// attempt counter resets after every welcome) and connects again. It
// returns ctx.Err() when ctx ends; a *CloseError when the server closes
// with 1008 or 4000 (not retried; after 1008 every scope's rows and cursor
// leave memory and the store, as access ended); an error wrapping
// ErrOtherPrincipal when the welcome names another principal than the
// store's (nothing was subscribed or sent); an error wrapping
// ErrCredentialsRefused when a subscription is refused as unauthenticated
// and the client cannot renew its credentials; or ErrRunning if Run is
// already active. Run may be called again after it returns. When it
// starts it resumes the scopes the store records as followed (see
// Resume).
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrRunning
	}
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	if !c.cfg.NoResume {
		if _, err := c.Resume(ctx); err != nil && !errors.Is(err, ErrNoList) {
			c.log.Error("tide client: resuming the followed scopes", "err", err)
		}
	}

	attempt := 0 // connection attempts since the last welcome
	streak := 0  // consecutive sessions the client ended for a fault (failed apply, bad frame)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		res := c.runSession(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		kind := EventConnectFailed
		if res.welcomed {
			kind = EventDisconnected
			attempt = 0
		}
		ev := Event{Kind: kind, Err: res.err, CloseCode: res.closeCode, Reason: res.closeText}
		if res.stop != nil {
			c.emit(ev)
			return res.stop
		}
		if c.definitive(res) {
			if res.closeCode == protocol.ClosePolicy {
				// Access ended and will not be renewed: the data it gave
				// goes with it.
				c.dropAllData(ctx, res.closeText)
			}
			c.emit(ev)
			return &CloseError{Code: res.closeCode, Reason: res.closeText}
		}
		switch {
		case res.fault:
			// A handler or frame that keeps failing must not turn into a
			// reconnect loop at full speed.
			streak++
			attempt = max(attempt, streak)
		case res.welcomed:
			streak = 0
		}
		ev.Attempt = attempt
		ev.Delay = backoff.Delay(attempt, c.cfg.MinBackoff, c.cfg.MaxBackoff)
		attempt++
		c.log.Info("tide client: connection ended; reconnecting", "err", res.err, "close", res.closeCode, "delay", ev.Delay)
		c.emit(ev)
		if !backoff.Sleep(ctx, ev.Delay) {
			return ctx.Err()
		}
	}
}

// definitive reports whether a session's end must end Run: a close with
// 4000 (version skew), or with 1008 (policy) unless the client can renew its
// credentials (Config.Token or Config.HeaderFunc) and the connection had
// been welcomed: a token that expired, or a session that ended, on an
// established connection is renewed by reconnecting, but credentials
// obtained afresh for this connection and refused before welcome are
// final.
func (c *Client) definitive(res sessionResult) bool {
	if res.closeCode == 0 || res.closeCode.Reconnect() {
		return false
	}
	return res.closeCode != protocol.ClosePolicy || !c.renewable() || !res.welcomed
}

// renewable reports whether the client can renew its credentials for the
// next connection: it has Config.Token or Config.HeaderFunc.
func (c *Client) renewable() bool { return c.cfg.Token != nil || c.cfg.HeaderFunc != nil }

// ErrCredentialsRefused is wrapped by the error Run returns when the server
// refuses a subscription as unauthenticated and the client cannot renew its
// credentials (it has neither Config.Token nor Config.HeaderFunc): a static
// session cookie in Config.Header that the server no longer accepts (its
// sessions were lost in a restart, say). The error also wraps the
// refusal, a *protocol.Error with code unauthenticated; the refused
// scope's rows and cursor are gone, as after any refusal for access. Sign
// in again and run a client with the new credentials (or give it
// Config.HeaderFunc, so it renews them itself).
var ErrCredentialsRefused = errors.New("client: the server refused the client's credentials, and the client cannot renew them (it has neither Config.Token nor Config.HeaderFunc)")

// Reconnect drops the current connection, as a network failure would; the
// client then reconnects with backoff and resumes every scope from its
// stored cursor. Frames received but not yet applied are discarded (they
// are delivered again). Apps call it when the network changes; tests use it
// to simulate a drop. Without a connection it does nothing.
func (c *Client) Reconnect() {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		s.abort(errReconnect, false)
	}
}

var errReconnect = errors.New("client: reconnect requested")

// persist updates st's record: under storeMu, if valid (checked under c.mu;
// nil means always) still holds, it loads the record (a new one if there is
// none), applies mutate and saves it if mutate reports a change or the
// record was new.
func (c *Client) persist(ctx context.Context, st *scopeState, valid func() bool, mutate func(*Record) bool) error {
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	if valid != nil {
		c.mu.Lock()
		ok := valid()
		c.mu.Unlock()
		if !ok {
			return nil
		}
	}
	rec, ok, err := c.store.Load(ctx, st.norm.digest)
	if err != nil {
		return fmt.Errorf("load record: %w", err)
	}
	if !ok {
		rec = st.newRecord()
	}
	if !mutate(&rec) && ok {
		return nil
	}
	if err := c.store.Save(ctx, rec); err != nil {
		return fmt.Errorf("save record: %w", err)
	}
	return nil
}

// storedCursor returns st's stored cursor, "" if none.
func (c *Client) storedCursor(ctx context.Context, st *scopeState) (string, error) {
	rec, ok, err := c.store.Load(ctx, st.norm.digest)
	if err != nil {
		return "", fmt.Errorf("load record: %w", err)
	}
	if !ok {
		return "", nil
	}
	return rec.Cursor, nil
}

// declared returns the scopes to subscribe on a new connection, in
// declaration order. The caller holds c.mu.
func (c *Client) declaredLocked() []*scopeState {
	out := make([]*scopeState, 0, len(c.scopes))
	for _, st := range c.scopes {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *scopeState) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	return out
}

func (c *Client) emit(e Event) {
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(e)
	}
}
