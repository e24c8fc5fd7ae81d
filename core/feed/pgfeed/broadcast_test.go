package pgfeed_test

import (
	"testing"

	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// TestBroadcaster runs the broadcaster suite on a feed that was never
// migrated: broadcasts need no table.
func TestBroadcaster(t *testing.T) {
	pool, name := testenv.PostgresSchema(t)
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	feedtest.RunBroadcaster(t, f)
}
