package core

import (
	"testing"
	"time"
)

// TestRefreshLead: when a connection is asked for a new token, by the
// token's remaining lifetime. A short token is asked for halfway, never at
// once (which would ask again the moment each new one arrives).
func TestRefreshLead(t *testing.T) {
	for _, tt := range []struct{ remaining, lead time.Duration }{
		{0, 0},
		{-time.Second, 0},
		{10 * time.Second, 5 * time.Second},
		{40 * time.Second, 20 * time.Second},
		{time.Minute, 30 * time.Second},
		{10 * time.Minute, 2 * time.Minute},
		{time.Hour, 12 * time.Minute},
	} {
		if got := refreshLead(tt.remaining); got != tt.lead {
			t.Errorf("refreshLead(%v) = %v, want %v", tt.remaining, got, tt.lead)
		}
	}
}
