package core

import "time"

// Clock is the engine's source of time for token expiry. Tests substitute a
// fake one to expire tokens without waiting.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine once d has passed (at once if d
	// is not positive) and returns a function that cancels the call,
	// reporting whether it did.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// systemClock is the real clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
