package core

import (
	"context"
	"errors"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// catchUp replays the scope from the cursor (or snapshots it when there is
// none, or when the backlog after the cursor is at least as large as the
// scope: backlogLarger) up to a pinned high-water, then switches the
// subscription to live.
// Live changes that arrived meanwhile were buffered: those at or below the
// high-water are dropped (the replay covered them), the rest follow the
// caught-up frame in order.
func (s *subscription) catchUp(sp startPoint) error {
	s.beginRound()
	if sp.reset != "" {
		if err := s.reset(sp.reset); err != nil {
			return err
		}
	}
	snapshot, from, after, hasAfter, seq := sp.snapshot, sp.pos, sp.after, sp.resumed, sp.seq
	// Only a client's own cursor is weighed against its scope, once: the
	// rounds after a snapshot replay what changed while it was read.
	probe := !snapshot
	for {
		if snapshot {
			start, err := s.sendSnapshot(from, after, hasAfter, seq)
			if err != nil {
				return err
			}
			from, snapshot, after, hasAfter, seq = start, false, "", false, 0
		}
		hw, err := s.c.e.highWater(s.ctx, from)
		reason := protocol.ResetCursorExpired
		if errors.Is(err, errCursorAhead) {
			err, reason = feed.ErrCursorExpired, protocol.ResetCursorAhead
		}
		if err == nil && probe {
			// A backlog large for its scope is sent as the
			// scope's rows, exactly as an expired cursor is.
			probe = false
			var larger bool
			if larger, err = s.backlogLarger(from, hw); err == nil && larger {
				if err := s.reset(protocol.ResetBacklog); err != nil {
					return err
				}
				snapshot, from = true, 0
				continue
			}
		}
		if err == nil {
			err = s.sendReplay(from, hw)
		}
		if errors.Is(err, feed.ErrCursorExpired) {
			if err := s.reset(reason); err != nil {
				return err
			}
			snapshot, from = true, 0
			continue
		}
		if err != nil {
			return err
		}
		if s.goLive(hw) {
			return nil
		}
		from = hw // the buffer overflowed: another round from where this one ended
	}
}

// sendSnapshot sends the scope's current rows in pages, each with a snapshot
// cursor, and returns the position replay must continue from: the position
// of the first page (or start, when resuming a snapshot). Rows that changed
// while later pages were read are replayed again from there, so the copy
// converges whatever the timing.
//
// A subscription of several resources snapshots them one after the other,
// in name order, its snapshot cursors naming the resource (multiAfter); the
// replay from the first page's position then brings every resource to one
// position.
//
// As in sendReplay, a goroutine reads and encodes the pages up to
// replayAhead ahead of the one being sent.
//
// seq is the number of the cursor a resumed snapshot resumes from (0 for a
// new one): the cursors it hands out follow it.
func (s *subscription) sendSnapshot(start feed.Position, after string, hasAfter bool, seq uint64) (feed.Position, error) {
	e := s.c.e
	first := !hasAfter
	ts, i := s.targets, 0
	if ts.multi() && hasAfter {
		i, after, hasAfter, _ = parseMultiAfter(ts, after) // checked by parseRequest
	}
	type result struct {
		pg  page
		t   *target
		err error
	}
	// The reader stops at its next page when sending fails (stop) or the
	// subscription ends. It has no context of its own: a child of the
	// subscription's would keep a cancellation map allocated in it for the
	// subscription's life, which every idle connection would pay for.
	ctx := s.ctx
	stop := make(chan struct{})
	defer close(stop)
	pages := make(chan result, replayAhead)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(pages)
		for ; i < len(ts); i, after, hasAfter = i+1, "", false {
			t := &ts[i]
			ok := e.snapshotPages(ctx, t.res, s.principal(), s.c.origin, t.scope, after, hasAfter, s.limit, ts.multi(), func(pg page, err error) bool {
				select {
				case pages <- result{pg, t, err}:
					return err == nil
				case <-stop:
					return false
				case <-ctx.Done():
					return false
				}
			})
			if !ok {
				return
			}
		}
	}()
	for r := range pages {
		if r.err != nil {
			return 0, r.err
		}
		if first {
			start, first = r.pg.pos, false
		}
		if r.pg.n > 0 {
			place := r.pg.lastKey
			if ts.multi() {
				place = multiAfter(r.t.res.schema.Name, r.pg.lastKey, true)
			}
			seq++
			if err := s.sendPage(r.pg, e.snapshotCursor(s.principal(), ts, start, seq, place)); err != nil {
				return 0, err
			}
		}
	}
	return start, ctx.Err()
}

// replayAhead is how many replay pages are read ahead of the one being
// sent, so the database, the encoding and the socket work at the same time.
const replayAhead = 2

// sendReplay sends the scope's changes in (from, until] in pages, read by a
// goroutine that stays up to replayAhead pages ahead.
func (s *subscription) sendReplay(from, until feed.Position) error {
	e := s.c.e
	if from >= until {
		return nil
	}
	type result struct {
		pg  page
		err error
	}
	// A recent range is in the engine's memory once the tailer has
	// dispatched up to the high-water, which it is about to.
	if e.cache.recent.holds(from) && e.cache.recent.await(s.ctx, until, historyWait) {
		if changes, ok := e.cache.recent.read(s.targets, from, until); ok {
			e.stats.replayMemory.Add(1)
			return s.sendChanges(changes)
		}
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel() // stops the reader if sending fails
	pages := make(chan result, replayAhead)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(pages)
		if s.targets.multi() {
			s.readMulti(ctx, from, until, func(pg page, err error) bool {
				select {
				case pages <- result{pg, err}:
					return true
				case <-ctx.Done():
					return false
				}
			})
			return
		}
		for after := from; ; {
			pg, err := e.replayPage(ctx, s.res, s.principal(), s.c.origin, s.scope, after, until, s.limit)
			select {
			case pages <- result{pg, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || pg.done {
				return
			}
			after = pg.next
		}
	}()
	for r := range pages {
		if r.err != nil {
			return r.err
		}
		if r.pg.n > 0 {
			if err := s.sendPage(r.pg, e.cursorString(r.pg.last)); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// historyWait bounds how long a replay waits for the tailer to reach its
// high-water before it reads the feed instead.
const historyWait = time.Second

// sendChanges sends changes read from the engine's memory, in pages.
// A subscription of several resources gets pages that end at commit
// boundaries (pageEnd), its entries naming their resource.
func (s *subscription) sendChanges(changes []feed.Change) error {
	multi := s.targets.multi()
	for len(changes) > 0 {
		n := min(len(changes), s.limit)
		if multi {
			n = pageEnd(changes, s.limit)
		}
		pg := newPage(changes[:n])
		for i := range changes[:n] {
			r := s.res
			if multi {
				r = s.targets.of(changes[i].Resource).res
			}
			pg.addChange(r, s.principal(), s.c.origin, &changes[i], nil, false, multi)
			pg.last = changes[i].Pos
		}
		if pg.n > 0 {
			if err := s.sendPage(pg, s.c.e.cursorString(pg.last)); err != nil {
				return err
			}
		}
		changes = changes[n:]
	}
	return nil
}

func (s *subscription) sendPage(pg page, cursor string) error {
	var hdr [pageHeadroom]byte
	span := s.notePage(pg)
	err := s.c.sendFrameWait(s.ctx, pg.frame(protocol.AppendChangesStart(hdr[:0], s.idJSON, cursor)))
	span.End(err)
	return err
}

func (s *subscription) reset(reason protocol.ResetReason) error {
	s.c.e.stats.resets.Add(1)
	s.c.e.cfg.Observer.ResetSent(reason)
	return s.c.sendFrameWait(s.ctx, protocol.Reset(s.id, reason))
}

// goLive ends a catch-up round at high-water hw. It reports false if the
// live buffer overflowed during the round, in which case another round is
// needed.
func (s *subscription) goLive(hw feed.Position) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.overflow {
		s.overflow = false
		s.buf, s.bufBytes = s.buf[:0], 0
		return false
	}
	s.delivered = hw
	s.endRound() // before the frame: whoever reads caught-up sees it counted
	s.c.sendFrame(protocol.CaughtUp(s.id, s.c.e.cursorString(hw)))
	s.state = subLive
	buf := s.buf
	s.buf, s.bufBytes = nil, 0
	for _, b := range buf {
		if b = b.after(hw); b.len() == 0 {
			continue
		}
		if s.state != subLive {
			break
		}
		s.deliverLocked(b, nil)
	}
	if s.state == subLive && s.advanceTo > s.delivered {
		s.advanceLocked(s.advanceTo)
	}
	return true
}
