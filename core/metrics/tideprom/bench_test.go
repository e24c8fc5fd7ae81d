package tideprom_test

import (
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/metrics/tideprom"
)

// BenchmarkDelivered measures the observer call the socket writers make
// per live changes frame, from every core at once (each writer goroutine
// calls it), through the core.Observer interface as the engine does.
func BenchmarkDelivered(b *testing.B) {
	var obs core.Observer = tideprom.New(tideprom.Options{})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			obs.Delivered(1, 180)
		}
	})
}

// BenchmarkTailBatch measures the observer call the tailer makes per batch.
func BenchmarkTailBatch(b *testing.B) {
	var obs core.Observer = tideprom.New(tideprom.Options{})
	for i := range b.N {
		obs.TailBatch(1, feed.Position(i))
	}
}
