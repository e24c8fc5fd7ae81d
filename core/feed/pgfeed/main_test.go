package pgfeed_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its feeds, engines, clients and pools: no goroutine (a
// listener, a pruner, a client) may outlive them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
