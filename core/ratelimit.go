package core

import (
	"time"
)

// frameLimiter is a token bucket over client frames, owned by a connection's
// reader goroutine (no locking). A frame costs one token; tokens refill at
// rate per second up to burst.
type frameLimiter struct {
	rate, burst float64
	tokens      float64
	last        time.Time
	refused     int // frames refused since the bucket last had a token
}

func newFrameLimiter(rate, burst int, now time.Time) frameLimiter {
	return frameLimiter{rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: now}
}

// allow reports whether a frame arriving at now may be handled.
func (l *frameLimiter) allow(now time.Time) bool {
	if elapsed := now.Sub(l.last).Seconds(); elapsed > 0 {
		l.tokens = min(l.burst, l.tokens+elapsed*l.rate)
	}
	l.last = now
	if l.tokens >= 1 {
		l.tokens--
		l.refused = 0
		return true
	}
	l.refused++
	return false
}

// charge takes a token for a frame that is never refused (it still counts
// against the frames after it), if there is one.
func (l *frameLimiter) charge(now time.Time) {
	if elapsed := now.Sub(l.last).Seconds(); elapsed > 0 {
		l.tokens = min(l.burst, l.tokens+elapsed*l.rate)
	}
	l.last = now
	l.tokens = max(0, l.tokens-1)
}
