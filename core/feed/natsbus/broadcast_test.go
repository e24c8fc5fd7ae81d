package natsbus

import (
	"testing"

	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/memfeed"
)

func TestBroadcaster(t *testing.T) {
	nc := connect(t)
	feedtest.RunBroadcaster(t, newBus(t, nc, memfeed.New(memfeed.Options{}), testOptions(t, nc)))
}
