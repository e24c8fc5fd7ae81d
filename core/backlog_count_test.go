package core

import (
	"context"
	"sync"
	"testing"

	"github.com/tidesync/tide/core/feed"
)

// fakeCounter answers the changes count with changes (closing
// changesDone after it) and the rows counts with rows, which may block.
type fakeCounter struct {
	changes     int
	changesDone chan struct{}
	rows        func(ctx context.Context, q feed.CountQuery) (int, error)

	mu      sync.Mutex
	rowCaps []int // MaxRows of every rows count, in order
}

func (f *fakeCounter) Count(ctx context.Context, q feed.CountQuery) (feed.Counts, error) {
	if q.MaxChanges > 0 {
		defer close(f.changesDone)
		return feed.Counts{Changes: min(f.changes, q.MaxChanges)}, nil
	}
	f.mu.Lock()
	f.rowCaps = append(f.rowCaps, q.MaxRows)
	f.mu.Unlock()
	n, err := f.rows(ctx, q)
	return feed.Counts{Rows: min(n, q.MaxRows)}, err
}

// TestBacklogCountsBoundTheRowsCount: the rows are counted while the
// changes are, capped at one more than the changes could be; once the
// changes are known, a rows count still running is stopped when they are
// too few to matter, counted again at the changes when they are under half
// its cap, and waited for otherwise. Every count's goroutine has ended when
// the decision returns.
func TestBacklogCountsBoundTheRowsCount(t *testing.T) {
	ts := targets{{scope: feed.Scope{Schema: &feed.Schema{Name: "items"}}}}
	const from, hw = 0, 100_000 // the changes count is capped at 100,000, the rows at 100,001
	// blockUntilCancelled is a rows count that ends only when stopped,
	// except a count capped at hw or less, which finds recountRows.
	blockUntilCancelled := func(recountRows int) func(ctx context.Context, q feed.CountQuery) (int, error) {
		return func(ctx context.Context, q feed.CountQuery) (int, error) {
			if q.MaxRows <= hw {
				return recountRows, nil
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}
	}

	t.Run("few changes stop the rows count", func(t *testing.T) {
		var wg sync.WaitGroup
		fc := &fakeCounter{changes: backlogProbe - 1, changesDone: make(chan struct{}), rows: blockUntilCancelled(0)}
		larger, err := backlogCounts(context.Background(), fc, ts, from, hw, &wg)
		wg.Wait()
		if err != nil || larger {
			t.Fatalf("larger %v, err %v; want a replay", larger, err)
		}
		if len(fc.rowCaps) != 1 || fc.rowCaps[0] != hw+1 {
			t.Fatalf("rows counts capped at %v, want [%d]", fc.rowCaps, hw+1)
		}
	})

	t.Run("under half the cap: counted again at the changes", func(t *testing.T) {
		for _, tc := range []struct {
			rows   int
			larger bool
		}{{15_000, true}, {20_000, true}, {20_001, false}} {
			var wg sync.WaitGroup
			fc := &fakeCounter{changes: 20_000, changesDone: make(chan struct{}), rows: blockUntilCancelled(tc.rows)}
			larger, err := backlogCounts(context.Background(), fc, ts, from, hw, &wg)
			wg.Wait()
			if err != nil || larger != tc.larger {
				t.Fatalf("%d rows: larger %v, err %v; want %v", tc.rows, larger, err, tc.larger)
			}
			if len(fc.rowCaps) != 2 || fc.rowCaps[0] != hw+1 || fc.rowCaps[1] != 20_001 {
				t.Fatalf("rows counts capped at %v, want [%d 20001]", fc.rowCaps, hw+1)
			}
		}
	})

	t.Run("at least half the cap: the running count is waited for", func(t *testing.T) {
		for _, tc := range []struct {
			rows   int
			larger bool
		}{{50_000, true}, {60_000, true}, {60_001, false}, {200_000, false}} {
			var wg sync.WaitGroup
			stopped := false
			fc := &fakeCounter{changes: 60_000, changesDone: make(chan struct{})}
			fc.rows = func(ctx context.Context, q feed.CountQuery) (int, error) {
				select {
				case <-fc.changesDone: // answers only once the changes are known
					return tc.rows, nil
				case <-ctx.Done():
					stopped = true
					return 0, ctx.Err()
				}
			}
			larger, err := backlogCounts(context.Background(), fc, ts, from, hw, &wg)
			wg.Wait()
			if err != nil || larger != tc.larger || stopped {
				t.Fatalf("%d rows: larger %v, err %v, rows count stopped %v; want %v, not stopped", tc.rows, larger, err, stopped, tc.larger)
			}
			if len(fc.rowCaps) != 1 || fc.rowCaps[0] != hw+1 {
				t.Fatalf("rows counts capped at %v, want [%d]", fc.rowCaps, hw+1)
			}
		}
	})
}
