package natsbus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/tidesync/tide/core/feed"
)

var _ feed.Broadcaster = (*Bus)(nil)

// broadcastSubject is the core NATS subject of app channel broadcasts,
// "<prefix>.broadcast": outside the stream's subjects, so JetStream stores
// none of them.
func (b *Bus) broadcastSubject() string { return b.opts.Prefix + ".broadcast" }

// Broadcast implements feed.Broadcaster with one core NATS publish. NATS
// keeps the order of one connection's publishes, which is the order the
// engine sent them in.
func (b *Bus) Broadcast(ctx context.Context, bc feed.Broadcast) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	payload, err := feed.EncodeBroadcast(bc)
	if err != nil {
		return err
	}
	if err := b.nc.Publish(b.broadcastSubject(), payload); err != nil {
		return fmt.Errorf("natsbus: broadcast: %w", err)
	}
	return nil
}

// WatchBroadcasts implements feed.Broadcaster with a core NATS
// subscription, confirmed by the server (a flush) before it returns. It
// ends when ctx ends. While the NATS connection reconnects, broadcasts are
// lost (presence heals with the nodes' next announcements).
func (b *Bus) WatchBroadcasts(ctx context.Context, fn func(feed.Broadcast)) error {
	sub, err := b.nc.Subscribe(b.broadcastSubject(), func(m *nats.Msg) {
		bc, err := feed.DecodeBroadcast(m.Data)
		if err != nil {
			b.log.Warn("natsbus: a broadcast does not decode; skipped", "err", err)
			return
		}
		if ctx.Err() == nil {
			fn(bc)
		}
	})
	if err != nil {
		return fmt.Errorf("natsbus: watch broadcasts: %w", err)
	}
	// The default pending limits drop messages of a slow handler rather
	// than grow without bound: what a lossy bus may do.
	if err := b.nc.FlushTimeout(b.opts.RequestTimeout); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("natsbus: watch broadcasts: %w", err)
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return nil
}
