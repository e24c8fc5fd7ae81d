package pgfeed

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/internal/backoff"
)

// Tail blocks until at least one change after `after` is committed, then
// returns up to limit changes after it, in position order, across every
// resource. Each wake-up costs one query (`pos > after ORDER BY pos LIMIT
// limit`), whatever the number of subscriptions: the engine runs one tailer
// per node.
//
// It wakes on a notification from the sequencer (LISTEN on a connection of its
// own, reconnected when it drops, with one read after every reconnect so a
// notification lost meanwhile costs nothing) and at least every
// Options.PollInterval regardless. The first Tail also makes the feed a
// candidate for the sequencer role (see StartSequencer). It returns feed.ErrCursorExpired if after
// is below the retained floor, ctx's error when ctx ends first, and
// ErrClosed after Close.
func (f *Feed) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("pgfeed: Tail limit must be positive, got %d", limit)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		wake, err := f.doorbell()
		if err != nil {
			return nil, err
		}
		// The doorbell is taken before the read, so a notification
		// arriving between the read and the wait is not missed.
		if st := f.stepped.Load(); st != nil && st.before == after {
			// This node's sequencer just gave the next positions: they
			// are the log's next changes, no read needed.
			return slices.Clone(st.changes[:min(limit, len(st.changes))]), nil
		}
		rows, err := f.pool.Query(ctx, f.n.tailSQL, pos(after), limit)
		if err != nil {
			return nil, f.tailErr(ctx, err)
		}
		floor, out, err := scanChanges(rows, "")
		if err != nil {
			return nil, f.tailErr(ctx, err)
		}
		if after < feed.Position(floor) {
			return nil, feed.ErrCursorExpired
		}
		if len(out) > 0 {
			return out, nil
		}
		if timer == nil {
			timer = time.NewTimer(f.opts.PollInterval)
		} else {
			timer.Reset(f.opts.PollInterval)
		}
		select {
		case <-wake:
		case <-timer.C:
			f.polls.Add(1)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.ctx.Done():
			return nil, ErrClosed
		}
	}
}

func (f *Feed) tailErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return f.wrap("tail", err)
}

// doorbell starts the listener if it is not running and returns the channel
// that the next notification closes.
func (f *Feed) doorbell() (<-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if !f.listening {
		f.listening = true
		f.wg.Add(1)
		go f.listen()
	}
	f.startSequencerLocked()
	return f.wake, nil
}

// ring wakes every blocked Tail.
func (f *Feed) ring() {
	f.mu.Lock()
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
}

// listen keeps a connection listening on the feed's channel until Close,
// reconnecting with jittered exponential backoff when it drops.
func (f *Feed) listen() {
	defer f.wg.Done()
	for attempt := 0; ; attempt++ {
		connected, err := f.listenOnce()
		if f.ctx.Err() != nil {
			return
		}
		if connected {
			attempt = 0
		}
		f.log.Warn("pgfeed: listener connection lost; reconnecting", "schema", f.opts.Schema, "err", err, "attempt", attempt)
		if !backoff.Sleep(f.ctx, backoff.Delay(attempt, 50*time.Millisecond, 5*time.Second)) {
			return
		}
	}
}

// listenOnce connects, listens and rings the doorbell on every
// notification until the connection fails or the feed closes. It reports
// whether LISTEN succeeded.
func (f *Feed) listenOnce() (bool, error) {
	ctx := f.ctx
	cfg := f.pool.Config().ConnConfig.Copy()
	conn, err := f.connect(ctx, "listener", cfg, 0)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{f.n.channel}.Sanitize()); err != nil {
		return false, err
	}
	f.listenerPID.Store(conn.PgConn().PID())
	f.connects.Add(1)
	if f.onConnect != nil {
		f.onConnect()
	}
	// Anything committed while no connection listened is read now.
	f.ring()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, err
		}
		f.notifications.Add(1)
		f.ring()
	}
}

// Stats are a feed's operational counters.
type Stats struct {
	ListenerConnects int64 // LISTEN connections established (1 + reconnects)
	Notifications    int64 // notifications received
	Polls            int64 // Tail reads started by the poll timer rather than a notification

	Sequencing     bool  // this feed holds the sequencer role now
	SequencerTerms int64 // times this feed took the sequencer role
	SequencerSteps int64 // sequencing steps of this feed's sequencer that gave positions
	Sequenced      int64 // changes this feed's sequencer gave positions to

	// The logical capture's slot (CaptureLogical), as every candidate
	// node last read it (every slotWatchInterval): whether a consumer
	// streams from it, the WAL written since its consumer's confirmed
	// position, and the WAL it keeps. Zero in the trigger mode.
	SlotActive        bool
	SlotLagBytes      int64
	SlotRetainedBytes int64
	// LogicalSkipped counts transactions this feed's consumer received
	// again after writing them (delivery is at least once) and skipped.
	LogicalSkipped int64
}

// Stats returns the feed's counters.
func (f *Feed) Stats() Stats {
	return Stats{
		ListenerConnects: f.connects.Load(),
		Notifications:    f.notifications.Load(),
		Polls:            f.polls.Load(),
		Sequencing:       f.sequencing.Load(),
		SequencerTerms:   f.sequencerTerms.Load(),
		SequencerSteps:   f.sequencerSteps.Load(),
		Sequenced:        f.sequenced.Load(),

		SlotActive:        f.slotActive.Load(),
		SlotLagBytes:      f.slotLag.Load(),
		SlotRetainedBytes: f.slotRetained.Load(),
		LogicalSkipped:    f.logicalSkipped.Load(),
	}
}
