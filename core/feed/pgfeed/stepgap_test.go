package pgfeed

import (
	"testing"
	"time"
)

// TestStepGap: the pause after a step is stepGapFactor times the step's
// time, never under sequencerStepGap (a quick step on a quiet database)
// and never over sequencerMaxStepGap (a step slowed by a stall).
func TestStepGap(t *testing.T) {
	if 2*stepGapFactor*time.Millisecond > sequencerMaxStepGap {
		t.Fatalf("the table assumes a 2 ms step's gap is under the bound, %v", sequencerMaxStepGap)
	}
	for _, c := range []struct {
		took, want time.Duration
	}{
		{0, sequencerStepGap},
		{100 * time.Microsecond, sequencerStepGap},
		{sequencerStepGap / stepGapFactor, sequencerStepGap},
		{time.Millisecond, stepGapFactor * time.Millisecond},
		{2 * time.Millisecond, 2 * stepGapFactor * time.Millisecond},
		{sequencerMaxStepGap / stepGapFactor, sequencerMaxStepGap},
		{time.Second, sequencerMaxStepGap},
	} {
		if got := stepGap(c.took); got != c.want {
			t.Errorf("stepGap(%v) = %v, want %v", c.took, got, c.want)
		}
	}
}
