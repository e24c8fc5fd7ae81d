package pgfeed

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/internal/backoff"
)

// The sequencer gives committed changes their positions.
//
// The capture writes row events into the change log without any ordering
// (see captureDDL). One session per database, the sequencer, holds the
// session-level advisory lock (lockClassSequencer, key) on a dedicated
// connection and runs sequencing steps in a loop. It learns of new changes
// from the WAL stream (see walwake.go), looking as soon as the WAL shows a
// write to the change log and at least every Options.SequencerInterval;
// where the stream is not available, each call waits server-side, looking
// as often as every millisecond right after changes arrived and less often
// the longer none did. As soon as it sees committed changes without a
// position it ticks them (see ticks.go): whole transactions, ordered by
// their last capture, get blocks of positions, in one statement, then it
// notifies the tailers once. A step commits without waiting for its WAL
// flush while its positions stay within a reservation committed durably
// before (meta.reserved, extended by a step that passes it, which does
// wait); after a server restart the first step moves the position
// sequence past the reservation, so no position a reader may have seen
// from a lost step is given again (see sequenceFunction). Every Feed that
// tails is a candidate: a standby retries the lock with jittered backoff
// and takes over when the holder's session ends.
//
// Head and Snapshot run the same step inline when committed changes wait
// for positions, so they cover every change committed before they were
// called, whether or not a sequencer runs. Steps exclude one another with a
// transaction-level advisory lock (lockClassCapture, key), so positions
// become visible in order; docs/architecture.md argues why no reader can
// skip a change.

// Bounds of the sequencer candidate's retries.
const (
	sequencerMinBackoff = 100 * time.Millisecond
	sequencerMaxBackoff = 2 * time.Second
	// sequencerWait bounds one call of the sequence function when nothing
	// arrives, so the leader notices a lost connection and Close promptly.
	sequencerWait = 250 * time.Millisecond
	// sequencerStepGap is the least pause after a step that moved changes.
	// Steps do not wait for their WAL flush, so without it a busy database
	// would run one step per commit; with it, a step carries at least a
	// millisecond's commits, and a quiet one loses nothing (its next change
	// is further away than that).
	sequencerStepGap = time.Millisecond
	// stepGapFactor bounds the sequencer's share of a busy database:
	// after a step that moved changes, it pauses for stepGapFactor times
	// the step's own time (between sequencerStepGap and
	// sequencerMaxStepGap), so steps take at most a
	// 1/(1+stepGapFactor) share of its time. A step costs about the same
	// whether it ticks one commit or fifty, so on a machine the writers keep
	// busy (where a step is slow) each step carries more commits and costs
	// each less; on a quiet one a step is quick and the pause stays near
	// sequencerStepGap.
	stepGapFactor       = 4
	sequencerMaxStepGap = 10 * time.Millisecond
)

// StartSequencer makes this feed a candidate for the database's sequencer
// role, on a goroutine that Close stops. Call it once Migrate has run, on
// every node that serves or writes to synced tables: changes are then
// sequenced and kept short whether or not any client is connected.
// tide.Open and replicator.Start call it; Tail starts it too. Calling it
// again does nothing.
func (f *Feed) StartSequencer() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startSequencerLocked()
}

func (f *Feed) startSequencerLocked() {
	if f.closed || f.sequencerOn || f.opts.brokenCapture {
		return
	}
	f.sequencerOn = true
	f.wg.Add(1)
	go f.sequencer()
	if f.logical() {
		f.wg.Add(1)
		go f.slotWatch()
	}
}

// sequencer is the election loop: try the role's lock on a dedicated
// connection; sequence while holding it; otherwise wait a jittered backoff
// and try again.
func (f *Feed) sequencer() {
	defer f.wg.Done()
	ctx := f.ctx
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			closePgConn(conn)
		}
	}()
	for attempt := 0; ctx.Err() == nil; {
		if conn == nil {
			c, err := f.sequencerConnect(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.log.Warn("pgfeed: sequencer cannot connect; retrying", "schema", f.opts.Schema, "err", err, "attempt", attempt)
				}
				backoff.Sleep(ctx, backoff.Delay(attempt, sequencerMinBackoff, sequencerMaxBackoff))
				attempt++
				continue
			}
			conn = c
		}
		var got bool
		err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", f.n.sequencerA, f.n.key).Scan(&got)
		if err != nil || !got {
			if err != nil {
				closePgConn(conn) // the lock may or may not be held: drop the session
				conn = nil
				if ctx.Err() == nil {
					f.log.Warn("pgfeed: sequencer lock attempt failed; retrying", "schema", f.opts.Schema, "err", err, "attempt", attempt)
				}
			}
			backoff.Sleep(ctx, backoff.Delay(attempt, sequencerMinBackoff, sequencerMaxBackoff))
			attempt++
			continue
		}
		err = f.sequence(ctx, conn)
		closePgConn(conn) // releases the lock if the session still lives
		conn = nil
		attempt = 0
		if ctx.Err() != nil {
			return
		}
		f.log.Warn("pgfeed: sequencer stepped down", "schema", f.opts.Schema, "err", err)
		// Let a standby take over: they retry at least every
		// sequencerMaxBackoff.
		backoff.Sleep(ctx, sequencerMaxBackoff+backoff.Delay(0, sequencerMaxBackoff, sequencerMaxBackoff))
	}
}

func (f *Feed) sequencerConnect(ctx context.Context) (*pgx.Conn, error) {
	cfg := f.pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = RoleAppName(RoleSequencer, f.opts.Node)
	return f.connect(ctx, "sequencer", cfg, 5*time.Second)
}

// sequence runs one term of the sequencer on conn, which holds the role's
// lock, until a call fails (the session, and with it the lock, may be gone)
// or ctx ends.
func (f *Feed) sequence(ctx context.Context, conn *pgx.Conn) error {
	f.sequencerPID.Store(conn.PgConn().PID())
	f.sequencerTerms.Add(1)
	f.sequencing.Store(true)
	defer func() {
		f.sequencing.Store(false)
		f.sequencerPID.Store(0)
		// A term that ended forgets its last step: the server may have
		// restarted and lost it (see the reservation in migrate.go).
		f.stepped.Store(nil)
	}()
	f.log.Info("pgfeed: sequencing", "schema", f.opts.Schema, "pid", conn.PgConn().PID())
	if err := f.checkFloor(ctx, conn); err != nil {
		return err
	}
	if f.logical() {
		// The term runs the slot's consumer, which writes each committed
		// transaction into the change log with its positions: there is
		// nothing for a step to tick.
		return f.consume(ctx, conn)
	}

	// A call is never abandoned half way: when ctx ends, the server is asked
	// to cancel it and the call returns once the server has rolled it back,
	// so no step outlives this term holding locks (a dropped connection
	// would leave the backend running until it next talks to the client).
	// Only if the server does not answer is the connection cut.
	qctx, cut := context.WithCancel(context.Background())
	returned := make(chan struct{})
	var stopping sync.WaitGroup
	stopping.Add(1)
	stop := context.AfterFunc(ctx, func() {
		defer stopping.Done()
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = conn.PgConn().CancelRequest(cctx)
		cancel()
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case <-returned:
		case <-t.C:
			cut()
		}
	})
	defer func() {
		close(returned)
		if stop() {
			stopping.Done() // ctx did not end: the func never runs
		}
		stopping.Wait()
		cut()
	}()
	// While the WAL stream runs, a look waits for nothing (the stream
	// rings); otherwise the call waits server-side, polling.
	sql := "SELECT moved FROM " + f.n.seqFn + "($1, $2, $3, $4)"
	wait := sequencerWait.Milliseconds()
	maxPause := f.opts.SequencerInterval.Milliseconds()
	w, err := f.startWALWaker(ctx, conn)
	if err != nil {
		return err
	}
	if w != nil {
		defer w.stop()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	cause := lookPoll
	var relook time.Duration // while relooking after a wake-up: the wait before this look
	last := time.Now()       // when the last step gave positions
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var moved int64
		streaming := w != nil && w.live.Load()
		gap := sequencerStepGap
		if streaming {
			// A write to the change log after this rings again.
			select {
			case <-w.wake:
			default:
			}
			began := time.Now()
			moved, err = f.stepRows(qctx, conn)
			gap = stepGap(time.Since(began))
		} else {
			// Polling: the call waits server-side for a change, so its
			// time is not the step's, and the pause after it stays
			// sequencerStepGap.
			err = conn.QueryRow(qctx, sql, f.opts.SequencerBatch, wait, time.Since(last).Milliseconds(), maxPause).Scan(&moved)
		}
		if err != nil {
			return err
		}
		if moved > 0 {
			last = time.Now()
			f.sequencerSteps.Add(1)
			f.sequenced.Add(moved)
			f.ring() // this node's tailers need not wait for the notification
			if streaming && cause == lookPoll {
				// Changes the stream did not ring for: the change log may
				// have a new file (VACUUM FULL); read where its writes go
				// again.
				if err := w.refresh(qctx, conn); err != nil {
					return err
				}
			}
			cause = lookAfterStep
			backoff.Sleep(ctx, gap)
			continue
		}
		if !streaming {
			continue
		}
		// Nothing committed yet. After a wake-up, look again soon, then
		// less and less soon, until the poll would come first: the WAL of
		// a commit reaches the stream a moment before the commit is
		// visible to other sessions (longer on a busy machine), and
		// nothing else rings for it.
		d := f.opts.SequencerInterval
		switch {
		case cause == lookWoken:
			relook = sequencerRelook
			d = relook
		case cause == lookRelook && 2*relook < d:
			relook *= 2
			d = relook
		default:
			relook = 0
			if f.onStreamWait != nil {
				f.onStreamWait()
			}
		}
		timer.Reset(d)
		select {
		case <-w.wake:
			cause = lookWoken
			f.walWakeups.Add(1)
		case <-timer.C:
			cause = lookPoll
			if relook > 0 {
				cause = lookRelook
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		timer.Stop()
	}
}

// stepRows runs one step that returns the changes it gave positions to (see
// stepRowsFunction) and hands them to this node's tailers.
func (f *Feed) stepRows(ctx context.Context, conn *pgx.Conn) (int64, error) {
	rows, err := conn.Query(ctx, f.n.stepRowsSQL, f.opts.SequencerBatch)
	if err != nil {
		return 0, err
	}
	// The rows are read through the statement's end: the step has
	// committed, so the changes are the log's.
	before, changes, err := scanChanges(rows, "")
	if err != nil || len(changes) == 0 {
		return 0, err
	}
	f.stepped.Store(&steppedChanges{before: feed.Position(before), changes: changes})
	return int64(len(changes)), nil
}

// stepGap is the pause after a step that moved changes and took took:
// stepGapFactor times took, within [sequencerStepGap, sequencerMaxStepGap].
func stepGap(took time.Duration) time.Duration {
	return min(max(stepGapFactor*took, sequencerStepGap), sequencerMaxStepGap)
}

// steppedChanges are the changes of the sequencer's latest step and the
// head before it: the log's changes in (before, the last one's position].
type steppedChanges struct {
	before  feed.Position
	changes []feed.Change
}

// Why the sequencer looks for changes without positions.
const (
	lookPoll      = iota // its poll interval passed
	lookWoken            // the WAL stream showed a write to the change log
	lookRelook           // the looks after a wake-up found nothing; again, after twice the wait
	lookAfterStep        // a step moved changes; more may be waiting
)

// sequencerRelook is how soon the sequencer looks again after a wake-up
// whose look found nothing committed; each further look that finds nothing
// waits twice as long, while that stays under the poll interval.
const sequencerRelook = 200 * time.Microsecond

// startWALWaker starts the WAL stream of a term on conn (see walwake.go),
// unless Options.PollOnly is set or an earlier term found the stream
// refused for good. A nil waker means the term polls.
func (f *Feed) startWALWaker(ctx context.Context, conn *pgx.Conn) (*walWaker, error) {
	if f.opts.PollOnly || f.walRefused.Load() {
		return nil, nil
	}
	s, err := f.logScan(ctx, conn)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &walWaker{f: f, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.scan.Store(s)
	w.cancel = cancel
	f.waker.Store(w)
	go func() {
		defer close(w.done)
		w.run(wctx)
	}()
	return w, nil
}

// closePgConn closes a dedicated connection, bounded in time.
func closePgConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
