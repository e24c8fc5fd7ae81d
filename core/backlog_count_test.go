package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// fakeCounter answers the changes counts with changes (closing
// changesDone after the first) and the rows counts with rows, which may
// block.
type fakeCounter struct {
	changes     int
	changesDone chan struct{}
	rows        func(ctx context.Context, q feed.CountQuery) (int, error)

	mu         sync.Mutex
	once       sync.Once
	rowCaps    []int // MaxRows of every rows count, in order
	changeCaps []int // MaxChanges of every changes count, in order
}

func (f *fakeCounter) Count(ctx context.Context, q feed.CountQuery) (feed.Counts, error) {
	if q.MaxChanges > 0 {
		f.mu.Lock()
		f.changeCaps = append(f.changeCaps, q.MaxChanges)
		f.mu.Unlock()
		defer f.once.Do(func() { close(f.changesDone) })
		return feed.Counts{Changes: min(f.changes, q.MaxChanges)}, nil
	}
	f.mu.Lock()
	f.rowCaps = append(f.rowCaps, q.MaxRows)
	f.mu.Unlock()
	n, err := f.rows(ctx, q)
	return feed.Counts{Rows: min(n, q.MaxRows)}, err
}

// TestBacklogCountsBoundTheCounts: the changes are counted up to half the
// backlog's positions while the rows are counted up to one more than twice
// them; once the changes are known, a rows count still running is stopped
// when they are too few to matter, counted again at twice the changes when
// that is under half its cap, and waited for when the changes reached
// their cap, after which the changes are counted again if only more of
// them can tell. The decision is a snapshot exactly when there are at
// least backlogProbe changes and at most twice as many rows. Every count's
// goroutine has ended when the decision returns.
func TestBacklogCountsBoundTheCounts(t *testing.T) {
	ts := targets{{scope: feed.Scope{Schema: &feed.Schema{Name: "items"}}}}
	const from, hw = 0, 100_000 // changes capped at 50,000, rows at 200,001
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
		if !slices.Equal(fc.rowCaps, []int{2*hw + 1}) || !slices.Equal(fc.changeCaps, []int{hw / 2}) {
			t.Fatalf("rows counts capped at %v, changes at %v; want [%d], [%d]", fc.rowCaps, fc.changeCaps, 2*hw+1, hw/2)
		}
	})

	t.Run("exact changes: rows counted again at twice them", func(t *testing.T) {
		for _, tc := range []struct {
			rows   int
			larger bool
		}{{15_000, true}, {40_000, true}, {40_001, false}} {
			var wg sync.WaitGroup
			fc := &fakeCounter{changes: 20_000, changesDone: make(chan struct{}), rows: blockUntilCancelled(tc.rows)}
			larger, err := backlogCounts(context.Background(), fc, ts, from, hw, &wg)
			wg.Wait()
			if err != nil || larger != tc.larger {
				t.Fatalf("%d rows: larger %v, err %v; want %v", tc.rows, larger, err, tc.larger)
			}
			if !slices.Equal(fc.rowCaps, []int{2*hw + 1, 40_001}) || !slices.Equal(fc.changeCaps, []int{hw / 2}) {
				t.Fatalf("rows counts capped at %v, changes at %v; want [%d 40001], [%d]", fc.rowCaps, fc.changeCaps, 2*hw+1, hw/2)
			}
		}
	})

	t.Run("changes at their cap: the running count is waited for", func(t *testing.T) {
		for _, tc := range []struct {
			rows       int
			larger     bool
			changeCaps []int
		}{
			{50_000, true, []int{hw / 2}},
			{100_000, true, []int{hw / 2}},
			{100_001, true, []int{hw / 2, 50_001}}, // 60,000 changes: enough
			{120_000, true, []int{hw / 2, 60_000}},
			{120_001, false, []int{hw / 2, 60_001}},
			{2 * hw, false, []int{hw / 2, hw}},
			{300_000, false, []int{hw / 2}}, // more than any backlog in (from, hw] weighs
		} {
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
			if !slices.Equal(fc.rowCaps, []int{2*hw + 1}) || !slices.Equal(fc.changeCaps, tc.changeCaps) {
				t.Fatalf("%d rows: rows counts capped at %v, changes at %v; want [%d], %v", tc.rows, fc.rowCaps, fc.changeCaps, 2*hw+1, tc.changeCaps)
			}
		}
	})
}

// estimatingCounter is a fakeCounter whose feed also estimates every
// table at est rows (or cannot tell, with ok false).
type estimatingCounter struct {
	*fakeCounter
	est       int
	ok        bool
	err       error
	estimates int
}

func (f *estimatingCounter) EstimateRows(context.Context, *feed.Schema) (int, bool, error) {
	f.estimates++
	return f.est, f.ok, f.err
}

// estimating returns an estimatingCounter that finds changes changes and
// rows rows, and estimates est (ok, err).
func estimating(changes, rows, est int, ok bool, err error) *estimatingCounter {
	return &estimatingCounter{fakeCounter: &fakeCounter{changes: changes, changesDone: make(chan struct{}), rows: func(context.Context, feed.CountQuery) (int, error) { return rows, nil }}, est: est, ok: ok, err: err}
}

// decide runs backlogCounts on fc, whose counts ec records, and checks its
// decision and the caps of the counts it made.
func decide(t *testing.T, fc feed.Counter, ec *estimatingCounter, ts targets, from, hw feed.Position, larger bool, changeCaps, rowCaps []int) {
	t.Helper()
	var wg sync.WaitGroup
	got, err := backlogCounts(context.Background(), fc, ts, from, hw, &wg)
	wg.Wait()
	if err != nil || got != larger {
		t.Fatalf("larger %v, err %v; want %v", got, err, larger)
	}
	if !slices.Equal(ec.changeCaps, changeCaps) || !slices.Equal(ec.rowCaps, rowCaps) {
		t.Fatalf("changes counted up to %v, rows up to %v; want %v, %v", ec.changeCaps, ec.rowCaps, changeCaps, rowCaps)
	}
}

// TestBacklogByEstimate: where the feed estimates the table at no more
// rows than the backlog's changes can weigh, only the changes are counted,
// up to half the estimate (at least backlogProbe), and the rows only when
// the changes fall between backlogProbe and that, capped at one more than
// twice them. Without an estimate (none, or one that failed), or with one
// larger than that, the decision is backlogCounts's own (rows counted
// beside the changes).
func TestBacklogByEstimate(t *testing.T) {
	ts := targets{{scope: feed.Scope{Schema: &feed.Schema{Name: "items"}}}}
	const from, hw = 0, 100_000
	for _, tc := range []struct {
		name          string
		est           int
		ok            bool
		err           error
		changes, rows int
		larger        bool
		changeCaps    []int
		rowCaps       []int
	}{
		{"changes reach half the estimate", 100_000, true, nil, 60_000, 100_000, true, []int{50_000}, nil},
		{"a small table: the probe's worth of changes", 8_000, true, nil, 12_000, 8_000, true, []int{backlogProbe}, nil},
		{"an odd estimate: half of it rounds up", 100_001, true, nil, 50_000, 100_001, false, []int{50_001}, []int{100_001}},
		{"too few changes", 100_000, true, nil, backlogProbe - 1, 100_000, false, []int{50_000}, nil},
		{"fewer than the estimate weighs, rows few enough", 100_000, true, nil, 30_000, 60_000, true, []int{50_000}, []int{60_001}},
		{"fewer than the estimate weighs, rows too many", 100_000, true, nil, 30_000, 60_001, false, []int{50_000}, []int{60_001}},
		{"the estimate at the most the backlog weighs", 2 * hw, true, nil, hw, 2 * hw, true, []int{hw}, nil},
		{"an estimate larger than any backlog weighs", 2*hw + 1, true, nil, 60_000, 100_000, true, []int{hw / 2}, []int{2*hw + 1}},
		{"no estimate", 0, false, nil, 60_000, 100_000, true, []int{hw / 2}, []int{2*hw + 1}},
		{"an estimate that fails: the counts decide", 100_000, true, errors.New("catalog read failed"), 60_000, 100_000, true, []int{hw / 2}, []int{2*hw + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := estimating(tc.changes, tc.rows, tc.est, tc.ok, tc.err)
			decide(t, fc, fc, ts, from, hw, tc.larger, tc.changeCaps, tc.rowCaps)
			if fc.estimates != 1 {
				t.Fatalf("%d estimates, want 1", fc.estimates)
			}
		})
	}
}

// TestBacklogDecisionIsTheRule: at random backlogs, changes, rows and
// estimates at least the rows (or none), the decision is a snapshot
// exactly when there are at least backlogProbe changes and at most twice
// as many rows, and no count reads past twice the backlog's positions.
func TestBacklogDecisionIsTheRule(t *testing.T) {
	ts := targets{{scope: feed.Scope{Schema: &feed.Schema{Name: "items"}}}}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(7, seed))
	for i := range 2000 {
		span := backlogProbe + rng.IntN(200_000)
		changes := rng.IntN(span + 1)
		rows := rng.IntN(3*span + 1)
		if rng.IntN(4) == 0 { // at the edge of the rule
			rows = min(backlogRowsPerChange*changes+rng.IntN(3), 3*span)
		}
		est, ok := rows+rng.IntN(rows/4+10), rng.IntN(4) > 0
		if rng.IntN(2) == 0 {
			est = rows
		}
		var wg sync.WaitGroup
		ec := estimating(changes, rows, est, ok, nil)
		var fc feed.Counter = ec
		layout := "none"
		if rng.IntN(2) == 0 { // the feed also samples the backlog
			var has func(feed.Position) bool
			layout, has, changes = changesLayout(rng, span, changes)
			ec.changes = changes
			fc = &samplingCounter{estimatingCounter: ec, has: has}
		}
		larger, err := backlogCounts(context.Background(), fc, ts, 0, feed.Position(span), &wg)
		wg.Wait()
		want := changes >= backlogProbe && rows <= backlogRowsPerChange*changes
		if err != nil || larger != want {
			t.Fatalf("seed %d, case %d: span %d, %d changes (sampled: %s), %d rows, estimate %d (%v): larger %v, err %v; want %v", seed, i, span, changes, layout, rows, est, ok, larger, err, want)
		}
		for _, c := range ec.changeCaps {
			if c > span {
				t.Fatalf("case %d: changes counted up to %d, past the span %d", i, c, span)
			}
		}
		for _, c := range ec.rowCaps {
			if c > backlogRowsPerChange*span+1 {
				t.Fatalf("case %d: rows counted up to %d, past twice the span %d", i, c, span)
			}
		}
	}
}

// samplingCounter is an estimatingCounter whose feed also samples the
// backlog (feed.Sampler): its changes are at the positions has reports.
type samplingCounter struct {
	*estimatingCounter
	has     func(feed.Position) bool
	samples int
}

func (f *samplingCounter) SampleChanges(ctx context.Context, q feed.SampleQuery) (int, error) {
	if err := feed.CheckSample(q); err != nil {
		return 0, err
	}
	f.mu.Lock()
	f.samples++
	f.mu.Unlock()
	n := 0
	for _, p := range slices.Compact(slices.Sorted(slices.Values(q.At))) {
		if f.has(p) {
			n++
		}
	}
	return n, nil
}

// changesLayout places about changes of a backlog's changes over its
// positions 1…span: at its start, at its end, evenly spread, or in runs
// repeating with a period near the sample's part (the layout most likely
// to mislead a sample). It returns the layout's name, its positions and
// exactly how many changes it holds.
func changesLayout(rng *rand.Rand, span, changes int) (string, func(feed.Position) bool, int) {
	switch rng.IntN(4) {
	case 0:
		return "first", func(p feed.Position) bool { return p >= 1 && int(p) <= changes }, changes
	case 1:
		return "last", func(p feed.Position) bool { return int(p) > span-changes && int(p) <= span }, changes
	case 2:
		return "spread", func(p feed.Position) bool {
			return p >= 1 && int(p) <= span && int(p)*changes/span > (int(p)-1)*changes/span
		}, changes
	}
	period := max(2, span/backlogSamples+rng.IntN(3)-1)
	width := min(period, changes*period/span+rng.IntN(2))
	n := span/period*width + min(span%period, width)
	return fmt.Sprintf("runs of %d every %d", width, period), func(p feed.Position) bool {
		return p >= 1 && int(p) <= span && (int(p)-1)%period < width
	}, n
}

// TestBacklogSampleSpares the count: where the feed samples the backlog
// and the sample shows more changes than a count would have to reach, the
// changes are not counted; where it does not, they are, exactly as
// without a sample. One sample a decision, of backlogSamples positions.
func TestBacklogSampleSparesTheCount(t *testing.T) {
	ts := targets{{scope: feed.Scope{Schema: &feed.Schema{Name: "items"}}}}
	const from, hw = 0, 100_000
	for _, tc := range []struct {
		name          string
		est           int
		ok            bool
		changes, rows int
		larger        bool
		changeCaps    []int
		rowCaps       []int
	}{
		{"every position a change, estimated", 100_000, true, hw, 100_000, true, nil, nil},
		{"every position a change, no estimate", 0, false, hw, 100_000, true, nil, []int{2*hw + 1}},
		{"every position a change, too many rows", 0, false, hw, 2*hw + 1, false, nil, []int{2*hw + 1}},
		{"a third of them: counted", 100_000, true, hw / 3, 100_000, false, []int{50_000}, []int{2*(hw/3) + 1}},
		{"a third of them, no estimate: counted", 0, false, hw / 3, 60_000, true, []int{hw / 2}, []int{2*hw + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec := estimating(tc.changes, tc.rows, tc.est, tc.ok, nil)
			fc := &samplingCounter{estimatingCounter: ec, has: func(p feed.Position) bool { return p >= 1 && int(p) <= tc.changes }}
			decide(t, fc, ec, ts, from, hw, tc.larger, tc.changeCaps, tc.rowCaps)
			if fc.samples != 1 {
				t.Fatalf("%d samples, want 1", fc.samples)
			}
		})
	}
}
