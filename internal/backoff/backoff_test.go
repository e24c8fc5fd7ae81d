package backoff

import (
	"context"
	"testing"
	"time"
)

func TestJitterBounds(t *testing.T) {
	for _, tt := range []struct {
		attempt   int
		base, max time.Duration
		ceil      time.Duration
	}{
		{0, 100 * time.Millisecond, 30 * time.Second, 100 * time.Millisecond},
		{3, 100 * time.Millisecond, 30 * time.Second, 800 * time.Millisecond},
		{20, 100 * time.Millisecond, 30 * time.Second, 30 * time.Second},
		{62, time.Second, 5 * time.Second, 5 * time.Second}, // no overflow
	} {
		for i := 0; i < 1000; i++ {
			if d := Delay(tt.attempt, tt.base, tt.max); d < 0 || d > tt.ceil {
				t.Fatalf("Delay(%d, %v, %v) = %v, outside [0, %v]", tt.attempt, tt.base, tt.max, d, tt.ceil)
			}
		}
	}
}

func TestSleepHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep ignored a cancelled context")
	}
	if !Sleep(context.Background(), 0) {
		t.Fatal("Sleep(0) did not elapse")
	}
}

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
			d := Delay(attempt, base, ceiling)
			if d < 0 || d > ceil {
				t.Fatalf("Delay(%d) = %v, outside [0, %v]", attempt, d, ceil)
			}
			hi = max(hi, d)
			lo = min(lo, d)
		}
		// Full jitter spreads over the whole range; with 2000 samples the
		// chance of missing either outer quarter is about 2^-830.
		if hi < ceil*3/4 || lo > ceil/4 {
			t.Fatalf("Delay(%d) samples span [%v, %v]; want them spread over [0, %v]", attempt, lo, hi, ceil)
		}
	}
}

func TestBackoffEdges(t *testing.T) {
	if d := Delay(-1, time.Second, time.Minute); d < 0 || d > time.Second {
		t.Errorf("negative attempt: %v, want within the first step", d)
	}
	if d := Delay(0, 0, 0); d != 0 {
		t.Errorf("zero bounds: %v", d)
	}
	// base·2^attempt overflows int64 long before attempt 200.
	if d := Delay(200, time.Hour, 2*time.Hour); d < 0 || d > 2*time.Hour {
		t.Errorf("overflowing attempt: %v", d)
	}
}

func TestSleepCtxHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("sleepCtx reported the full sleep on a cancelled context")
	}
	if !Sleep(context.Background(), 0) {
		t.Fatal("a zero sleep on a live context reported cancellation")
	}
}
