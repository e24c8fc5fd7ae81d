package pgfeed

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/internal/backoff"
)

var _ feed.Broadcaster = (*Feed)(nil)

// broadcastChannel is the NOTIFY channel of app channel broadcasts. No
// table backs it: broadcasts are ephemeral.
func (n names) broadcastChannel() string {
	return shortIdent(unquoted(n.schema) + "_broadcasts")
}

// Broadcast implements feed.Broadcaster with one NOTIFY on a pool
// connection, outside any transaction (never one of the app's), so the
// payload is delivered at once to every listening node. The payload is
// EncodeBroadcast's, at most feed.MaxBroadcastBytes, below Postgres's
// 8000-byte NOTIFY limit. It needs no migration.
func (f *Feed) Broadcast(ctx context.Context, b feed.Broadcast) error {
	payload, err := feed.EncodeBroadcast(b)
	if err != nil {
		return err
	}
	_, err = f.pool.Exec(ctx, "SELECT pg_catalog.pg_notify($1, $2)", f.n.broadcastChannel(), string(payload))
	return f.wrap("broadcast", err)
}

// WatchBroadcasts implements feed.Broadcaster. It listens on a connection
// of its own (outside the pool), opened before it returns; a lost
// connection is reopened with backoff, and the broadcasts sent meanwhile
// are lost (presence heals with the nodes' next announcements).
func (f *Feed) WatchBroadcasts(ctx context.Context, fn func(feed.Broadcast)) error {
	first, err := f.listenBroadcasts(ctx)
	if err != nil {
		return f.wrap("watch broadcasts", err)
	}
	err = f.goWatch(ctx, func(wctx context.Context) {
		conn := first
		for attempt := 0; ; attempt++ {
			if conn != nil {
				err := f.readBroadcasts(wctx, conn, fn)
				closeListener(conn)
				conn = nil
				if wctx.Err() != nil {
					return
				}
				f.log.Warn("pgfeed: broadcast listener connection lost; reconnecting", "schema", f.opts.Schema, "err", err, "attempt", attempt)
			}
			if !backoff.Sleep(wctx, backoff.Delay(attempt, 50*time.Millisecond, 5*time.Second)) {
				return
			}
			var err error
			if conn, err = f.listenBroadcasts(wctx); err == nil {
				attempt = 0
			}
		}
	})
	if err != nil {
		closeListener(first) // the watcher did not start
	}
	return err
}

// goWatch runs watch on a goroutine of the feed until ctx ends or the feed
// closes; Close waits for it. It returns ErrClosed, starting nothing, on a
// closed feed.
func (f *Feed) goWatch(ctx context.Context, watch func(ctx context.Context)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(f.ctx, cancel)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer cancel()
		defer stop()
		watch(wctx)
	}()
	return nil
}

// listenBroadcasts opens a connection listening to the broadcast channel.
func (f *Feed) listenBroadcasts(ctx context.Context) (*pgx.Conn, error) {
	conn, err := f.connect(ctx, "broadcast listener", f.pool.Config().ConnConfig.Copy(), 10*time.Second)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{f.n.broadcastChannel()}.Sanitize()); err != nil {
		closeListener(conn)
		return nil, err
	}
	return conn, nil
}

// readBroadcasts delivers notifications until the connection fails or ctx
// ends. A payload that does not decode is logged and skipped.
func (f *Feed) readBroadcasts(ctx context.Context, conn *pgx.Conn, fn func(feed.Broadcast)) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		b, err := feed.DecodeBroadcast([]byte(n.Payload))
		if err != nil {
			f.log.Warn("pgfeed: a broadcast does not decode; skipped", "err", err)
			continue
		}
		fn(b)
	}
}

func closeListener(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
