package core_test

import (
	"testing"

	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/internal/multitest"
)

// TestMultiResourceTransactions: on the in-memory feed, clients following
// a project's todos, comments and attachments with one subscription each,
// reconnecting at random (some polling), never hold part of a transaction
// that wrote several of them, and converge.
func TestMultiResourceTransactions(t *testing.T) {
	for seed := range uint64(3) {
		multitest.Run(t, multitest.Env{Feed: memfeed.New(memfeed.Options{})}, multitest.Options{Seed: seed})
	}
}
