package core

import "time"

// SetAdvanceWait sets how often a connection waiting to advance its
// subscriptions past an acknowledged write checks that it is still open,
// until the test ends.
func SetAdvanceWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := advanceWait
	advanceWait = d
	t.Cleanup(func() { advanceWait = old })
}
