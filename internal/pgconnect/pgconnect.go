// Package pgconnect opens tide's own Postgres sessions (the sequencer's,
// the listeners', the replicator's) and keeps trying while the server has
// no connection to spare.
//
// A server at max_connections (or a role or database at its CONNECTION
// LIMIT) refuses new sessions with SQLSTATE 53300 until another client
// disconnects. That is a wait, not a failure: Retry waits it out with
// full-jitter backoff and says so in the log once, in one line an
// operator can act on, instead of a warning per attempt. Nothing is lost
// meanwhile: writes are captured in the app's own transactions, and the
// sessions that give them positions and deliver them pick up where the
// change log says once they connect.
package pgconnect

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidesync/tide/internal/backoff"
)

// TooManyConnectionsCode is SQLSTATE too_many_connections.
const TooManyConnectionsCode = "53300"

// Backoff bounds between Retry's attempts.
const (
	MinBackoff = 50 * time.Millisecond
	MaxBackoff = 2 * time.Second
)

// TooManyClients reports whether err is the server refusing a session for
// want of a free connection (SQLSTATE 53300: "sorry, too many clients
// already", or a role's or database's connection limit).
func TooManyClients(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == TooManyConnectionsCode
}

// Retry calls connect until it returns a session, ctx ends (ctx's error is
// returned) or it fails with an error that is not TooManyClients (which is
// returned at once: the caller's own retry decides about those). Each
// attempt gets ctx; bound an attempt inside connect. Between attempts it
// waits from MinBackoff to MaxBackoff with full jitter.
//
// The first refusal logs one warning on log naming who (the session's
// role, "pgfeed sequencer" say); a session got after refusals logs one
// line at info level. Attempts in between log nothing.
func Retry[C any](ctx context.Context, log *slog.Logger, who string, connect func(context.Context) (C, error)) (C, error) {
	refused := 0
	for {
		c, err := connect(ctx)
		if err == nil {
			if refused > 0 {
				log.Info("tide: Postgres had a free connection again; connected", "connection", who, "refusals", refused)
			}
			return c, nil
		}
		if !TooManyClients(err) {
			return c, err
		}
		if ctx.Err() != nil {
			var zero C
			return zero, ctx.Err()
		}
		if refused == 0 {
			log.Warn("tide: Postgres has no free connection (SQLSTATE 53300, too many clients); retrying with backoff until one frees up (no change is lost; changes wait in the log); raise max_connections, or lower the connections other clients hold",
				"connection", who, "err", err)
		}
		if !backoff.Sleep(ctx, backoff.Delay(refused, MinBackoff, MaxBackoff)) {
			var zero C
			return zero, ctx.Err()
		}
		refused++
	}
}
