package core

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// partsSampler is a feed.Sampler over given layouts, one per resource,
// that checks every query holds one position in each part of the span.
type partsSampler struct {
	t        *testing.T
	has      map[string]func(feed.Position) bool
	from, hw feed.Position
	err      error
}

func (s *partsSampler) Count(context.Context, feed.CountQuery) (feed.Counts, error) {
	return feed.Counts{}, errors.New("not counted here")
}

func (s *partsSampler) SampleChanges(_ context.Context, q feed.SampleQuery) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if err := feed.CheckSample(q); err != nil || q.After != s.from || len(q.At) != backlogSamples {
		s.t.Fatalf("sample after %d of %d positions: %v", q.After, len(q.At), err)
	}
	n := uint64(s.hw-s.from) / backlogSamples
	hits := 0
	for i, p := range q.At {
		if lo := s.from + feed.Position(uint64(i)*n); p <= lo || p > lo+feed.Position(n) {
			s.t.Fatalf("position %d of the sample is %d, outside its part (%d, %d]", i, p, lo, lo+feed.Position(n))
		}
		if s.has[q.Scope.Schema.Name](p) {
			hits++
		}
	}
	return hits, nil
}

// TestSampleBoundHolds: over random backlogs of one or two resources,
// their changes laid out in every way changesLayout has, the sample's
// bound is never above the changes, and never below them by more than
// twice Hoeffding's margin and the positions left out of the parts (each
// of which happens with a chance of 1e-9 only).
func TestSampleBoundHolds(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(11, seed))
	useful := 0
	for i := range 3000 {
		span := backlogProbe + rng.IntN(2_000_000)
		from := feed.Position(rng.IntN(1 << 30))
		ps := &partsSampler{t: t, has: map[string]func(feed.Position) bool{}, from: from, hw: from + feed.Position(span)}
		var ts targets
		changes, names := 0, ""
		for _, res := range []string{"items", "notes"}[:1+rng.IntN(2)] {
			c := rng.IntN(span + 1)
			if rng.IntN(3) == 0 {
				c = span // dense: the case the sample is for
			}
			name, has, exact := changesLayout(rng, span, c)
			ps.has[res] = func(p feed.Position) bool { return p > from && has(p-from) }
			ts = append(ts, target{scope: feed.Scope{Schema: &feed.Schema{Name: res}}})
			changes += exact
			names += res + ": " + name + "; "
		}
		least, err := sampleBound(context.Background(), ps, ts, ps.from, ps.hw, rng.Uint64N)
		if err != nil {
			t.Fatal(err)
		}
		n := float64(span / backlogSamples)
		k := float64(len(ts))
		margin := k * n * math.Sqrt(backlogSamples*math.Log(1/backlogSampleDoubt)/2)
		left := k * float64(span%backlogSamples)
		if least > changes || float64(least) < float64(changes)-2*margin-left-1 {
			t.Fatalf("seed %d, case %d: span %d, %d changes (%s): bound %d, want within [%.0f, %d]", seed, i, span, changes, names, least, float64(changes)-2*margin-left, changes)
		}
		if least > 0 {
			useful++
		}
	}
	if useful == 0 {
		t.Fatalf("seed %d: no sample bounded any backlog", seed)
	}
}

// TestSampleBoundEdges: the bound where every part's drawn position
// holds a change (of one resource or two), where only the parts' first or
// last positions do and the draw picks them, a span too short to part, a
// feed that fails (no bound: the counts decide) and an expired cursor
// (returned).
func TestSampleBoundEdges(t *testing.T) {
	const from, span = 7, 100_000
	n := feed.Position(span / backlogSamples)
	one := targets{{scope: feed.Scope{Schema: &feed.Schema{Name: "items"}}}}
	two := append(one[:1:1], target{scope: feed.Scope{Schema: &feed.Schema{Name: "notes"}}})
	every := func(feed.Position) bool { return true }
	firsts := func(p feed.Position) bool { return (p-from-1)%n == 0 }
	lasts := func(p feed.Position) bool { return (p-from)%n == 0 }
	margin := math.Sqrt(backlogSamples * math.Log(1/backlogSampleDoubt) / 2)
	full := int((backlogSamples - margin) * float64(n))
	for _, tc := range []struct {
		name  string
		ts    targets
		has   func(feed.Position) bool
		first bool // the draw picks the parts' first positions, else their last
		span  feed.Position
		err   error
		least int
		fails error
	}{
		{"every position a change", one, every, false, span, nil, full, nil},
		{"every position a change of two resources", two, every, true, span, nil, int((2*backlogSamples - 2*margin) * float64(n)), nil},
		{"the parts' first positions, drawn", one, firsts, true, span, nil, full, nil},
		{"the parts' last positions, drawn", one, lasts, false, span, nil, full, nil},
		{"the parts' last positions, not drawn", one, lasts, true, span, nil, 0, nil},
		{"too short to part", one, every, false, 2*backlogSamples - 1, nil, 0, nil},
		{"the feed fails", one, every, false, span, errors.New("connection reset"), 0, nil},
		{"the cursor expired", one, every, false, span, feed.ErrCursorExpired, 0, feed.ErrCursorExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := &partsSampler{t: t, has: map[string]func(feed.Position) bool{"items": tc.has, "notes": tc.has}, from: from, hw: from + tc.span, err: tc.err}
			draw := func(n uint64) uint64 { return n - 1 }
			if tc.first {
				draw = func(uint64) uint64 { return 0 }
			}
			least, err := sampleBound(context.Background(), ps, tc.ts, ps.from, ps.hw, draw)
			if least != tc.least || !errors.Is(err, tc.fails) || (err != nil) != (tc.fails != nil) {
				t.Fatalf("bound %d, err %v; want %d, %v", least, err, tc.least, tc.fails)
			}
		})
	}
}
