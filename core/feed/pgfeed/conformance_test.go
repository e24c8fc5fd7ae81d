package pgfeed_test

import (
	"context"
	"testing"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
)

// harness gives every subtest of the conformance suite a fresh schema with
// the suite's tables and a tide schema of its own, so subtests run in
// parallel.
// harness runs the feed suite on Postgres; pollOnly sets Options.PollOnly.
// logical runs it on the logical capture, on a server with wal_level
// logical.
type harness struct{ pollOnly, logical bool }

func (h harness) New(t *testing.T, schemas ...*feed.Schema) (feed.Feed, feed.Writer) {
	if h.logical {
		f, _ := newLogicalFeed(t, pgfeed.Options{}, schemas...)
		return f, f
	}
	f, _ := newFeed(t, pgfeed.Options{PollOnly: h.pollOnly}, schemas...)
	return f, f
}

func (harness) Prune(t *testing.T, f feed.Feed, through feed.Position) {
	if _, err := f.(*pgfeed.Feed).PruneThrough(context.Background(), through); err != nil {
		t.Fatalf("PruneThrough(%d): %v", through, err)
	}
}

func TestConformance(t *testing.T) { feedtest.Run(t, harness{}) }

// The suite again with a sequencer that polls alone, as it does where the
// role may not read the WAL stream.
func TestConformancePollOnly(t *testing.T) { feedtest.Run(t, harness{pollOnly: true}) }

// The suite on the logical capture: the sequencer's leader runs the
// slot's consumer.
func TestConformanceLogical(t *testing.T) { feedtest.Run(t, harness{logical: true}) }
