package core

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"

	"github.com/tidesync/tide/core/feed"
)

// backlogSamples is how many of a backlog's positions the engine looks at
// (feed.Sampler) before counting its changes: a lookup each, so the sample
// costs about what counting that many changes does, while a count that
// decides a large backlog reads tens of thousands of them.
const backlogSamples = 512

// backlogSampleDoubt is the chance that a sample's bound (sampledChanges)
// is above the backlog's changes. Such a bound can only send a snapshot
// where the counts would have replayed; both deliver the same state.
const backlogSampleDoubt = 1e-9

// sampledChanges returns a number of changes the scopes of ts surely have
// in (from, hw], to spare counting up to it; 0 where the feed cannot
// sample, the span is too short, or the sample fails (the counts then
// decide). ctx's error and feed.ErrCursorExpired are returned.
//
// The span's first backlogSamples·n positions, n = ⌊span/backlogSamples⌋,
// are cut into backlogSamples parts of n, and one position drawn at random
// in each: with h of them holding a change (summed over the targets, k of
// them), n·h is an unbiased estimate of the changes in those parts, a sum
// of independent terms each within [0, k·n]. By Hoeffding's inequality it
// exceeds them by k·n·√(backlogSamples·ln(1/backlogSampleDoubt)/2) or more
// with a chance of at most backlogSampleDoubt; n·h less that is the bound.
func sampledChanges(ctx context.Context, counter feed.Counter, ts targets, from, hw feed.Position) (int, error) {
	sampler, ok := counter.(feed.Sampler)
	if !ok || hw < from {
		return 0, nil
	}
	return sampleBound(ctx, sampler, ts, from, hw, rand.Uint64N)
}

// sampleBound is sampledChanges with the random draw (uniform in [0, n))
// given.
func sampleBound(ctx context.Context, sampler feed.Sampler, ts targets, from, hw feed.Position, draw func(n uint64) uint64) (int, error) {
	n := uint64(hw-from) / backlogSamples
	if n < 2 || len(ts) == 0 {
		return 0, nil // every position would be looked at: count instead
	}
	at := make([]feed.Position, backlogSamples)
	for i := range at {
		at[i] = from + feed.Position(uint64(i)*n+1+draw(n))
	}
	hits := 0
	for i := range ts {
		h, err := sampler.SampleChanges(ctx, feed.SampleQuery{Scope: ts[i].scope, After: from, At: at})
		switch {
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case errors.Is(err, feed.ErrCursorExpired):
			return 0, err
		case err != nil:
			return 0, nil
		}
		hits += h
	}
	margin := float64(len(ts)) * math.Sqrt(backlogSamples*math.Log(1/backlogSampleDoubt)/2)
	if least := (float64(hits) - margin) * float64(n); least > 0 {
		return int(min(least, backlogCountCap)), nil
	}
	return 0, nil
}
