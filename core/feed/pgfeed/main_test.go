package pgfeed_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tidesync/tide/internal/testenv"
)

// Every test closes its feeds, engines, clients and pools: no goroutine (a
// listener, a pruner, a client) may outlive them. The private Postgres of
// the logical capture's tests, if one started, stops first.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopLogical()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
