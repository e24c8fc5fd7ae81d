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
			if d := Jitter(tt.attempt, tt.base, tt.max); d < 0 || d > tt.ceil {
				t.Fatalf("Jitter(%d, %v, %v) = %v, outside [0, %v]", tt.attempt, tt.base, tt.max, d, tt.ceil)
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
