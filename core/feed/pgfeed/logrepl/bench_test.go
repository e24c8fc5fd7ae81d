package logrepl

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkConsume measures the consumer end to end on the logical test
// server: 100,000 committed inserts (one row of four columns each) are
// waiting in the slot, and the timer runs from Run's start until the
// handler has taken the last of them, with the server decoding its WAL and
// the consumer decoding pgoutput. "one transaction" is a single
// 100,000-row transaction, delivered in 10 pieces of 10,000 changes;
// "1000 transactions" is 1,000 transactions of 100 rows.
//
//	go test -run '^$' -bench Consume -benchtime 3x ./core/feed/pgfeed/logrepl
func BenchmarkConsume(b *testing.B) {
	const rows = 100_000
	for _, bc := range []struct {
		name  string
		perTx int
	}{{"one transaction", rows}, {"1000 transactions", 100}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b)
			e.exec("CREATE TABLE todos (id int PRIMARY KEY, project text, title text, done bool)")
			ctx := context.Background()
			if err := EnsurePublication(ctx, e.pool, e.pub, []string{"todos"}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e.exec("TRUNCATE todos")
				e.waitSlotFree(nil)
				if err := DropSlot(ctx, e.pool, e.slot); err != nil {
					b.Fatal(err)
				}
				if _, err := EnsureSlot(ctx, e.pool, e.slot); err != nil {
					b.Fatal(err)
				}
				for first := 0; first < rows; first += bc.perTx {
					e.exec(fmt.Sprintf("INSERT INTO todos SELECT i, 'p' || (i %% 100), 'todo number ' || i, i %% 2 = 0 FROM generate_series(%d, %d) i", first, first+bc.perTx-1))
				}
				got := 0
				done := make(chan struct{})
				b.StartTimer()
				r := e.start(e.consumer(nil), func(_ context.Context, tx *Tx) error {
					got += len(tx.Changes)
					if got == rows {
						close(done)
					}
					return nil
				})
				select {
				case <-done:
				case err := <-r.done:
					r.ended = true
					b.Fatalf("Run: %v", err)
				}
				b.StopTimer()
				r.stop()
			}
			b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "changes/s")
		})
	}
}
