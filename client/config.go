package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/gorilla/websocket"
)

// Config configures a Client. Only URL is required; every other field
// documents its zero value.
type Config struct {
	// URL is the server's WebSocket endpoint, ws:// or wss://, e.g.
	// "wss://app.example.com/tide/ws". Required.
	URL string
	// Header is sent with every upgrade request, typically the app's
	// session cookie. Optional.
	Header http.Header
	// HeaderFunc, if set, is called before every dial; the fields it
	// returns are added to Header (replacing fields of the same name). An
	// app uses it to renew a session cookie: after a policy close (1008) of
	// an established connection, or a subscription refused as
	// unauthenticated, the client reconnects and asks it again. An error
	// fails that connection attempt, which is retried with backoff. It
	// must honour ctx.
	HeaderFunc func(ctx context.Context) (http.Header, error)
	// Build is this client's build id, sent in hello (at most 128 bytes).
	// A server with another build reports EventUpdateAvailable. Optional.
	Build string
	// Origin is this device's origin id, sent in hello (at most 128 bytes).
	// The server keeps mutations' idempotency keys per principal and
	// origin, and tags the rows they write with it. Zero value: the origin
	// the Store records (Meta.Origin), which the first Client on the store
	// generates at random and saves, so every later Client on that store
	// (after a restart, say) resends its queue under the same origin; with
	// a Store that is not a MetaStore, a random id per Client. A non-zero
	// Origin overrides the stored one, and is recorded in a store that has
	// none yet. See Client.Origin.
	Origin string
	// Token returns a channel token for hello. It is called on every
	// connect, and again when the server asks for a fresh token; it must
	// return a token valid now (a cache must not hand out an expired
	// token) and honour ctx. A failure is retried with backoff, never
	// ending Run (EventTokenError). Optional: without it the upgrade's
	// cookie identifies the caller.
	Token func(ctx context.Context) (string, error)
	// Store persists one record (the applied cursor, and the rows of a
	// synced scope) per scope and, if it is a QueueStore, the offline
	// queue of mutations. Zero value: NewMemoryStore(). Use NewFileStore to
	// resume across restarts.
	Store CursorStore
	// MinBackoff and MaxBackoff bound the full-jitter exponential backoff
	// between connection attempts: attempt n waits a random time in
	// [0, min(MaxBackoff, MinBackoff·2^n)]. Zero values: 100 ms and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// Dialer opens the WebSocket. Zero value: a dialer with a 10 s
	// handshake timeout and the environment's proxy settings.
	Dialer *websocket.Dialer
	// Logger receives the client's operational log. Zero value: discard.
	Logger *slog.Logger
	// OnEvent observes connection and subscription events (see Event). It
	// is called synchronously from the client's goroutines, possibly
	// concurrently, and must return quickly; it may call the Client's
	// methods.
	OnEvent func(Event)
	// Handler makes the Handler of a followed scope that Run resumes on
	// start (see Client.Resume): a scope the app declared with Subscribe
	// in an earlier run and never unsubscribed or forgot. Scopes declared
	// with Sync resume without it. Zero value: such scopes are resumed
	// only when the app subscribes them again.
	Handler func(Scope) Handler
	// NoResume keeps Run from resuming the followed scopes on start: the
	// app declares every scope itself, or calls Client.Resume.
	NoResume bool
}

const (
	defaultMinBackoff = 100 * time.Millisecond
	defaultMaxBackoff = 30 * time.Second
	defaultHandshake  = 10 * time.Second
	maxBuildBytes     = 128
	maxOriginBytes    = 128
)

// withDefaults validates cfg and fills in its zero values.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	if cfg.URL == "" {
		errs = append(errs, errors.New("URL is required (ws://host/tide/ws)"))
	} else if u, err := url.Parse(cfg.URL); err != nil {
		errs = append(errs, fmt.Errorf("URL: %v", err))
	} else if u.Scheme != "ws" && u.Scheme != "wss" {
		errs = append(errs, fmt.Errorf("URL %q: the scheme must be ws or wss", cfg.URL))
	} else if u.Host == "" {
		errs = append(errs, fmt.Errorf("URL %q has no host", cfg.URL))
	}
	if err := checkText("Build", cfg.Build, maxBuildBytes); err != nil {
		errs = append(errs, err)
	}
	if err := checkText("Origin", cfg.Origin, maxOriginBytes); err != nil {
		errs = append(errs, err)
	}
	if cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 {
		errs = append(errs, errors.New("MinBackoff and MaxBackoff must not be negative"))
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = defaultMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = max(defaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.MinBackoff > cfg.MaxBackoff {
		errs = append(errs, fmt.Errorf("MinBackoff %v exceeds MaxBackoff %v", cfg.MinBackoff, cfg.MaxBackoff))
	}
	if len(errs) > 0 {
		return cfg, fmt.Errorf("client: invalid config: %w", errors.Join(errs...))
	}
	if cfg.Store == nil {
		cfg.Store = NewMemoryStore()
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: defaultHandshake}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}
