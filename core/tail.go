package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// tailLoop reads the feed in position order and hands each batch to the hub.
// It is the only dispatcher, so changes reach subscriptions in order.
func (e *Engine) tailLoop() {
	defer e.wg.Done()
	ctx := e.ctx
	var pos feed.Position
	for attempt := 0; ; attempt++ {
		var err error
		if pos, err = e.feed.Head(ctx); err == nil {
			// A feed may learn its epoch on first contact with its store,
			// so it is read after Head succeeds.
			if e.epoch = e.feed.Epoch(); !protocol.ValidEpoch(e.epoch) {
				err = fmt.Errorf("feed epoch %q is not 1-64 letters, digits, '-' or '_'", e.epoch)
			} else if e.sealer, err = e.cursorSealer(ctx); err == nil {
				break
			}
		}
		e.logRetry("head", err, attempt)
		e.setStartErr(err) // after the log: a refused subscriber finds the hint there
		if !e.retryWait(ctx, attempt) {
			return
		}
	}
	e.setStartErr(nil)
	e.hub.advance(pos)
	e.follow.started(ctx, pos)
	e.cfg.Observer.TailStarted(pos)
	close(e.ready)
	const batch = 1024
	for attempt := 0; ; {
		changes, err := e.tailCommits(ctx, pos, batch)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, feed.ErrCursorExpired) {
				// The tailer fell behind retention (of the feed, or of the
				// bus): everyone resyncs from their own cursor through the
				// feed, which yields a reset where needed.
				head, herr := e.feed.Head(ctx)
				if herr == nil {
					e.cfg.Logger.Warn("tide: tailer fell behind the retained change log; resyncing every subscription", "pos", pos, "head", head)
					pos = head
					// The skipped changes count as dispatched: every
					// subscription replays them, up to at least head.
					e.hub.advance(head)
					e.hub.desyncAll()
					e.follow.skipped(head)
					e.cfg.Observer.Desynced()
					e.cfg.Observer.TailStarted(head)
					continue
				}
				err = herr
			}
			if !e.backoff(ctx, attempt, "tail", err) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
		if len(changes) == 0 {
			continue
		}
		_, span := e.startLinkedSpan(ctx, "tide.tail.batch", e.traces.links(changes), IntAttr("tide.changes", int64(len(changes))))
		e.hub.dispatch(changes)
		e.follow.note(changes)
		pos = changes[len(changes)-1].Pos
		span.SetAttrs(IntAttr("tide.position", int64(pos)))
		span.End(nil)
		e.stats.tailBatches.Add(1)
		e.cfg.Observer.TailBatch(len(changes), pos)
	}
}

// tailCommits reads the bus after pos, never ending a batch inside a commit
// group (feed.Change.Tx), so a subscription receives a commit's changes in
// one frame (feed.TailCommits).
func (e *Engine) tailCommits(ctx context.Context, pos feed.Position, limit int) ([]feed.Change, error) {
	return feed.TailCommits(ctx, e.bus.src, pos, limit)
}

// maxCommitGroup bounds the changes of one commit group the engine holds
// to deliver them together (feed.MaxCommitGroup).
const maxCommitGroup = feed.MaxCommitGroup

// commitCut returns where the trailing commit group of changes starts
// (feed.CommitCut).
func commitCut(changes []feed.Change) int { return feed.CommitCut(changes) }
