// Package backoff holds the retry delays tide's background loops share:
// full-jitter exponential backoff, so a fleet retrying after the same
// failure does not stampede.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter returns a random delay in [0, min(max, base·2^attempt)].
func Jitter(attempt int, base, max time.Duration) time.Duration {
	d := max
	if attempt < 30 && base<<attempt < max {
		d = base << attempt
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// Sleep waits for d or until ctx ends; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
