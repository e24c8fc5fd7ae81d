package core_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test shuts its engines down; no goroutine may outlive them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
