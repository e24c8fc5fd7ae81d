package client

import (
	"context"
	"time"

	"github.com/tidesync/tide/internal/backoff"
)

// The client paces its own frames below the server's frame-rate limit: a
// server drops frames beyond it with an error that names no subscription,
// so a client subscribing to many scopes at once would lose subscribes
// without knowing which. Until welcome announces the server's limits
// (frame_rate, frame_burst), the pace is below tide's defaults; afterwards
// it is a little under the announced ones. Typical apps never wait.
const (
	sendBurst = 64
	sendRate  = 32 // frames per second after the burst
)

// pacer is a token bucket over a connection's outgoing frames. It is
// guarded by the session's write mutex.
type pacer struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

func newPacer() pacer {
	return pacer{rate: sendRate, burst: sendBurst, tokens: sendBurst, last: time.Now()}
}

// adopt switches to a server's announced limits, keeping a margin for
// clock differences and frames in flight.
func (p *pacer) adopt(rate, burst int) {
	if rate <= 0 || burst <= 0 {
		return
	}
	spent := p.burst - p.tokens
	p.rate, p.burst = 0.9*float64(rate), float64(burst)-8
	if p.burst < 1 {
		p.burst = 1
	}
	p.tokens = max(0, p.burst-spent)
}

// wait takes a token, sleeping until one is available or ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	now := time.Now()
	if elapsed := now.Sub(p.last).Seconds(); elapsed > 0 {
		p.tokens = min(p.burst, p.tokens+elapsed*p.rate)
	}
	p.last = now
	if p.tokens >= 1 {
		p.tokens--
		return nil
	}
	d := time.Duration((1 - p.tokens) / p.rate * float64(time.Second))
	if !backoff.Sleep(ctx, d) {
		return ctx.Err()
	}
	p.tokens, p.last = 0, now.Add(d)
	return nil
}
