package client

import (
	"context"
	"testing"
	"time"
)

func TestBackoffFullJitterBounds(t *testing.T) {
	const base, ceiling = 100 * time.Millisecond, 30 * time.Second
	for attempt := 0; attempt < 80; attempt++ {
		ceil := ceiling
		if attempt < 20 && base<<attempt < ceiling {
			ceil = base << attempt
		}
		var hi time.Duration
		lo := ceil
		for range 2000 {
			d := backoff(attempt, base, ceiling)
			if d < 0 || d > ceil {
				t.Fatalf("backoff(%d) = %v, outside [0, %v]", attempt, d, ceil)
			}
			hi = max(hi, d)
			lo = min(lo, d)
		}
		// Full jitter spreads over the whole range; with 2000 samples the
		// chance of missing either outer quarter is about 2^-830.
		if hi < ceil*3/4 || lo > ceil/4 {
			t.Fatalf("backoff(%d) samples span [%v, %v]; want them spread over [0, %v]", attempt, lo, hi, ceil)
		}
	}
}

func TestBackoffEdges(t *testing.T) {
	if d := backoff(-1, time.Second, time.Minute); d < 0 || d > time.Second {
		t.Errorf("negative attempt: %v, want within the first step", d)
	}
	if d := backoff(0, 0, 0); d != 0 {
		t.Errorf("zero bounds: %v", d)
	}
	// base·2^attempt overflows int64 long before attempt 200.
	if d := backoff(200, time.Hour, 2*time.Hour); d < 0 || d > 2*time.Hour {
		t.Errorf("overflowing attempt: %v", d)
	}
}

func TestSleepCtxHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sleepCtx(ctx, time.Hour) {
		t.Fatal("sleepCtx reported the full sleep on a cancelled context")
	}
	if !sleepCtx(context.Background(), 0) {
		t.Fatal("a zero sleep on a live context reported cancellation")
	}
}
