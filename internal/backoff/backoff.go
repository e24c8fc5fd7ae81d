// Package backoff holds tide's retry schedule: full-jitter exponential
// delays and a sleep that ends with its context. The Go client reconnects
// on it and the server's retry loops (the tailer, the Postgres feed's
// listeners and sequencer, the replicator) wait on it, so a fleet retrying
// after the same failure does not stampede.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay returns the delay before retry number attempt (from 0): full
// jitter, uniformly random in [0, min(max, base·2^attempt)], so a fleet of
// clients (or server loops) retrying after the same failure does not
// stampede.
func Delay(attempt int, base, max time.Duration) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	attempt = min(attempt, 62)
	d := max
	if base > 0 && base <= max>>attempt {
		d = base << attempt
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// Sleep waits for d or until ctx ends; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
