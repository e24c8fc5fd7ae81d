package feed_test

import (
	"context"
	"slices"
	"testing"

	"github.com/tidesync/tide/core/feed"
)

// sliceBus is a Bus over a fixed log: Tail returns up to limit changes
// after `after`, whatever their groups (as a feed may).
type sliceBus struct {
	log    []feed.Change
	limits []int // the limit of every call
}

func (b *sliceBus) Tail(_ context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	b.limits = append(b.limits, limit)
	i, _ := slices.BinarySearchFunc(b.log, after+1, func(c feed.Change, p feed.Position) int { return int(c.Pos) - int(p) })
	return b.log[i:min(len(b.log), i+limit)], nil
}

func logOf(txs ...uint64) []feed.Change {
	out := make([]feed.Change, len(txs))
	for i, tx := range txs {
		out[i] = feed.Change{Pos: feed.Position(i + 1), Tx: tx}
	}
	return out
}

func TestCommitCut(t *testing.T) {
	for _, tc := range []struct {
		txs  []uint64
		want int
	}{
		{[]uint64{0}, 1},
		{[]uint64{1}, 0},
		{[]uint64{1, 1, 2}, 2},
		{[]uint64{1, 2, 2}, 1},
		{[]uint64{2, 2, 2}, 0},
		{[]uint64{0, 0}, 2},
		{[]uint64{3, 0, 3}, 2},
	} {
		if got := feed.CommitCut(logOf(tc.txs...)); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.txs, got, tc.want)
		}
	}
}

// TestTailCommits: a full read leaves its trailing group for the next, a
// group larger than the read is read whole with a larger limit, and a short
// read is returned as it is.
func TestTailCommits(t *testing.T) {
	for _, tc := range []struct {
		txs    []uint64
		after  feed.Position
		limit  int
		want   []feed.Position
		limits []int
	}{
		{[]uint64{1, 1, 2, 2}, 0, 3, []feed.Position{1, 2}, []int{3}},
		{[]uint64{1, 1, 2, 2}, 2, 3, []feed.Position{3, 4}, []int{3}},
		{[]uint64{0, 0, 0, 0}, 0, 3, []feed.Position{1, 2, 3}, []int{3}},
		{[]uint64{5, 5, 5, 5, 5, 6, 6, 6, 7}, 0, 2, []feed.Position{1, 2, 3, 4, 5}, []int{2, 4, 8}},
		{[]uint64{5, 5, 5, 5}, 0, 2, []feed.Position{1, 2, 3, 4}, []int{2, 4, 8}},
	} {
		b := &sliceBus{log: logOf(tc.txs...)}
		cs, err := feed.TailCommits(context.Background(), b, tc.after, tc.limit)
		var got []feed.Position
		for _, c := range cs {
			got = append(got, c.Pos)
		}
		if err != nil || !slices.Equal(got, tc.want) || !slices.Equal(b.limits, tc.limits) {
			t.Errorf("%v after %d limit %d: %v (limits %v) %v; want %v (limits %v)", tc.txs, tc.after, tc.limit, got, b.limits, err, tc.want, tc.limits)
		}
	}
}
