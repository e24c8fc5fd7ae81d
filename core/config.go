package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// TokenVerifier turns the token a client sends in hello (or refresh) into a
// principal. It returns an error wrapping authz.ErrUnauthenticated for a
// token that is forged, expired or otherwise unusable. Expiry is the time
// after which the engine asks the client to refresh, then closes the
// connection; the zero time means the token does not expire.
type TokenVerifier interface {
	VerifyToken(ctx context.Context, token string) (p authz.Principal, expiry time.Time, err error)
}

// Config configures an Engine. The zero value is usable: every field documents
// its zero-value default.
type Config struct {
	// Feed is the change feed. Zero value: a new in-memory feed (package
	// memfeed), suitable for demos and tests; its changes do not survive a
	// restart.
	Feed feed.Feed

	// Bus is the source of live changes: the tailer reads it, while replays,
	// snapshots and the head come from Feed. Zero value: Feed itself (with
	// the Postgres feed, the change log is the bus and NOTIFY its doorbell:
	// each node tails it with one query per wake-up). Package natsbus
	// provides a NATS JetStream bus fed by package replicator. A bus that
	// implements feed.Interested is told which topics this node's
	// subscriptions need.
	Bus feed.Bus

	// BuildID identifies the server build. A client whose hello carries a
	// different build id gets an update-available frame. Zero value: "" (no
	// version-skew check).
	BuildID string

	// PageSize is the number of changes per replay or snapshot page when the
	// client asks for no limit. Zero value means 1000.
	PageSize int
	// MaxPageSize caps the page size a client may ask for. Zero value means
	// 10000.
	MaxPageSize int

	// SendBuffer bounds the bytes queued for one connection. A live change
	// that does not fit is dropped and its subscription re-replayed from its
	// delivered cursor once the socket drains. It also bounds the live
	// changes a subscription buffers while it replays; past it the buffer is
	// discarded and the replay runs another round. Zero value means 1 MiB.
	SendBuffer int
	// ReplayCache is the number of most recent changes the engine keeps in
	// memory, so replays of recent ranges (clients resuming after a short
	// disconnect, a reconnect storm) do not query the feed. Zero value means
	// 16384.
	ReplayCache int
	// MaxDrops is how many times something may not fit a connection's send
	// queue before the connection is closed with 1013: a live change that
	// desyncs a live subscription (the changes that follow while it is
	// desynced are not counted, its replay covers them) or a channel
	// message. A socket that takes nothing at all is closed by WriteTimeout
	// first. Zero value means 32.
	MaxDrops int

	// MaxCatchUps bounds the catch-up reads of the feed (replay and
	// snapshot pages, for sockets and polls) running at once on this node;
	// more wait their turn, none is refused (Stats.CatchUpsQueued counts
	// those that waited). Replays served from the engine's memory of recent
	// changes take no slot. Keep it below the feed's connection pool size,
	// so live tailing and writes always find a connection. Zero value
	// means 16.
	MaxCatchUps int
	// MaxCatchUpsPerPrincipal bounds the catch-up reads of one principal
	// (all its connections and subscriptions) running at once, so one user
	// opening many subscriptions cannot take every slot of MaxCatchUps: the
	// others' catch-ups go on meanwhile. The anonymous principal has only
	// MaxCatchUps. Zero value means 4; it is capped at MaxCatchUps.
	MaxCatchUpsPerPrincipal int
	// RecheckRate bounds the policies per second this node runs again
	// because a resource they depend on changed (Resource.DependsOn); more
	// wait their turn. Zero value means 1000.
	RecheckRate int

	// MaxFrameBytes bounds a client frame. Zero value means 64 KiB.
	MaxFrameBytes int
	// MaxSubscriptions bounds the subscriptions of one connection. Zero
	// value means 256.
	MaxSubscriptions int
	// MaxConditions bounds the conditions of one subscription. Zero value
	// means 8.
	MaxConditions int
	// FrameRate is the sustained number of frames per second a client may
	// send; frames beyond it are dropped with a rate_limited error. Zero
	// value means 50.
	FrameRate int
	// FrameBurst is how many frames a client may send at once above
	// FrameRate; it must let a client resubscribe MaxSubscriptions scopes on
	// connect. A client that keeps sending after 4×FrameBurst refused frames
	// is closed with 1008. Zero value means MaxSubscriptions + 16.
	FrameBurst int
	// MaxConditionValues bounds the values across all conditions of one
	// subscription ("in" lists included). Zero value means 256.
	MaxConditionValues int

	// MaxQueuedMutations bounds the mutate frames waiting to run, or
	// running, on one connection (they run one at a time, in order); one
	// beyond it is
	// rejected with rate_limited, which clients resend later with the same
	// key. Zero value means 256.
	MaxQueuedMutations int
	// MaxQueuedMutationBytes bounds the bytes of the mutate frames waiting
	// on one connection (their arguments, key and names), refused as
	// MaxQueuedMutations is. Zero value means 4 MiB; it is at least
	// MaxFrameBytes.
	MaxQueuedMutationBytes int

	// The bounds below are per principal and per node: they count what one
	// principal (authz.Principal.ID) holds on this node across all its
	// connections, so that one user cannot take what the others need; a
	// principal connected to several nodes has each node's bounds there.
	// The anonymous principal is many users, not one: it has the
	// per-connection bounds only (MaxSubscriptions, MaxQueuedMutations,
	// Channels.MaxTopics...), and an app that admits anonymous callers
	// bounds their connections in front of tide (per address, at the
	// proxy).

	// MaxConnsPerPrincipal bounds the connections of one principal. A
	// connection beyond it is refused at hello: an error frame
	// too_many_connections, then a close with 1013 (try again later), which
	// clients treat as any lost connection: they reconnect with a backoff
	// that grows until one is welcomed. Zero value means 32.
	MaxConnsPerPrincipal int
	// MaxSubscriptionsPerPrincipal bounds the subscriptions of one
	// principal across its connections; one beyond it is refused with
	// too_many_subscriptions. Zero value means 1024.
	MaxSubscriptionsPerPrincipal int
	// MaxQueuedMutationsPerPrincipal bounds the mutate frames waiting to
	// run across one principal's connections; one beyond it is rejected
	// with rate_limited (clients resend it later, with the same key). Zero
	// value means 1024.
	MaxQueuedMutationsPerPrincipal int
	// MaxQueuedMutationBytesPerPrincipal bounds the bytes of those frames,
	// refused as MaxQueuedMutationsPerPrincipal is: with the per-connection
	// bounds, it is what keeps a principal's writes from filling the
	// server's memory. Zero value means 16 MiB; it is at least
	// MaxQueuedMutationBytes.
	MaxQueuedMutationBytesPerPrincipal int

	// HelloTimeout is how long a new connection may take to send hello.
	// Zero value means 10 s.
	HelloTimeout time.Duration
	// IdleTimeout closes a connection (4001) that sent nothing, not even a
	// pong, for this long. Zero value means 120 s.
	IdleTimeout time.Duration
	// WriteTimeout bounds one socket write. Zero value means 10 s.
	WriteTimeout time.Duration
	// Heartbeat is how often the server pings every connection: a
	// WebSocket ping, which keeps the peer's answer coming within
	// IdleTimeout, and, once the connection is welcomed, a ping frame,
	// whose absence for two heartbeats tells a client its connection is
	// dead (welcome announces the interval as heartbeat_ms). It must be
	// below IdleTimeout. Zero value means 10 s, or a third of IdleTimeout
	// when that is shorter.
	Heartbeat time.Duration

	// Tokens verifies hello and refresh tokens (authz.Keyring is one).
	// Zero value: tokens are not accepted, and a hello carrying one is
	// refused as unauthenticated. A connection whose token has an expiry is
	// sent refresh-token a fifth of its remaining lifetime (at least 30 s)
	// before it, and closed with 1008 when it expires unless a refresh
	// arrived. If Tokens also implements TokenRevoker, Engine.Revoke
	// revokes the principal's tokens too.
	Tokens TokenVerifier
	// Clock times token expiry. Zero value: the system clock. Tests set a
	// fake one, together with the same clock in the token verifier.
	Clock Clock

	// Logger receives operational events. Zero value: slog.Default().
	Logger *slog.Logger

	// Roles are the other parts of this node that take part in a
	// database-wide role election (the replicator), reported by
	// Engine.Roles and the status page after the feed's own (a feed that
	// implements feed.RoleReporter, as the Postgres feed does). Zero value:
	// the feed's alone.
	Roles []feed.RoleReporter

	// Observer is told of every counted event (connections, subscriptions,
	// deliveries, drops, mutations...), for metrics: see
	// core/metrics/tideprom. Zero value: NopObserver.
	Observer Observer
	// Tracer starts the spans of subscribes, mutations and tail batches:
	// see core/trace/tideotel. One that is also a SpanLinker continues
	// mutations' traces from their traceparent and links tail batches to
	// the mutations they deliver. Zero value: no spans.
	Tracer Tracer

	// Channels configures app channels (see Channel). Its zero value is
	// ready to use.
	Channels ChannelConfig
}

// withDefaults returns a copy of c with every zero field set to its default.
// It does not create the default feed; New does.
func (c Config) withDefaults() Config {
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.PageSize, 1000)
	setInt(&c.MaxPageSize, 10000)
	setInt(&c.SendBuffer, 1<<20)
	setInt(&c.MaxDrops, 32)
	setInt(&c.ReplayCache, 16384)
	setInt(&c.MaxCatchUps, 16)
	setInt(&c.MaxCatchUpsPerPrincipal, 4)
	setInt(&c.RecheckRate, 1000)
	c.MaxCatchUpsPerPrincipal = min(c.MaxCatchUpsPerPrincipal, c.MaxCatchUps)
	setInt(&c.MaxFrameBytes, 64<<10)
	setInt(&c.MaxSubscriptions, 256)
	setInt(&c.MaxConditions, 8)
	setInt(&c.MaxConditionValues, 256)
	setInt(&c.FrameRate, 50)
	setInt(&c.MaxQueuedMutations, 256)
	setInt(&c.MaxQueuedMutationBytes, 4<<20)
	setInt(&c.MaxConnsPerPrincipal, 32)
	setInt(&c.MaxSubscriptionsPerPrincipal, 1024)
	setInt(&c.MaxQueuedMutationsPerPrincipal, 1024)
	setInt(&c.MaxQueuedMutationBytesPerPrincipal, 16<<20)
	// Whatever their setting, one frame of the largest size always fits.
	c.MaxQueuedMutationBytes = max(c.MaxQueuedMutationBytes, c.MaxFrameBytes)
	c.MaxQueuedMutationBytesPerPrincipal = max(c.MaxQueuedMutationBytesPerPrincipal, c.MaxQueuedMutationBytes)
	setInt(&c.FrameBurst, c.MaxSubscriptions+16)
	setDur(&c.HelloTimeout, 10*time.Second)
	setDur(&c.IdleTimeout, 120*time.Second)
	setDur(&c.WriteTimeout, 10*time.Second)
	setDur(&c.Heartbeat, min(10*time.Second, c.IdleTimeout/3))
	c.Channels = c.Channels.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	positive("PageSize", c.PageSize)
	positive("MaxPageSize", c.MaxPageSize)
	positive("SendBuffer", c.SendBuffer)
	positive("MaxDrops", c.MaxDrops)
	positive("ReplayCache", c.ReplayCache)
	positive("MaxCatchUps", c.MaxCatchUps)
	positive("MaxCatchUpsPerPrincipal", c.MaxCatchUpsPerPrincipal)
	positive("RecheckRate", c.RecheckRate)
	positive("MaxFrameBytes", c.MaxFrameBytes)
	positive("MaxSubscriptions", c.MaxSubscriptions)
	positive("MaxConditions", c.MaxConditions)
	positive("MaxConditionValues", c.MaxConditionValues)
	positive("FrameRate", c.FrameRate)
	positive("FrameBurst", c.FrameBurst)
	positive("MaxQueuedMutations", c.MaxQueuedMutations)
	positive("MaxQueuedMutationBytes", c.MaxQueuedMutationBytes)
	positive("MaxConnsPerPrincipal", c.MaxConnsPerPrincipal)
	positive("MaxSubscriptionsPerPrincipal", c.MaxSubscriptionsPerPrincipal)
	positive("MaxQueuedMutationsPerPrincipal", c.MaxQueuedMutationsPerPrincipal)
	positive("MaxQueuedMutationBytesPerPrincipal", c.MaxQueuedMutationBytesPerPrincipal)
	if c.PageSize > c.MaxPageSize {
		errs = append(errs, fmt.Errorf("PageSize %d exceeds MaxPageSize %d", c.PageSize, c.MaxPageSize))
	}
	if c.HelloTimeout < 0 || c.IdleTimeout < 0 || c.WriteTimeout < 0 || c.Heartbeat < 0 {
		errs = append(errs, errors.New("timeouts must not be negative"))
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.IdleTimeout {
		errs = append(errs, fmt.Errorf("Heartbeat %v must be positive and below IdleTimeout %v", c.Heartbeat, c.IdleTimeout))
	}
	if err := protocol.CheckText("BuildID", c.BuildID, protocol.MaxBuildLen); err != nil {
		errs = append(errs, errors.New(err.Message))
	}
	if err := c.Channels.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("tide: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// limits returns the limits the welcome frame announces.
func (c *Config) limits() protocol.Limits {
	return protocol.Limits{MaxFrameBytes: c.MaxFrameBytes, MaxSubscriptions: c.MaxSubscriptions, FrameRate: c.FrameRate, FrameBurst: c.FrameBurst, ChannelLimits: c.Channels.limits()}
}
