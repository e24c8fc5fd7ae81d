package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff returns a full-jitter delay for a retry: uniformly random in
// [0, min(max, base·2^attempt)].
func backoff(attempt int, base, max time.Duration) time.Duration {
	ceil := max
	if attempt < 0 {
		attempt = 0
	}
	if attempt < 62 && base > 0 && base <= max>>attempt {
		ceil = base << attempt
	}
	if ceil <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// sleepCtx waits for d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
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
