package core

import (
	"context"
	"errors"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// poll authorizes req for p and returns one page as a frame: a changes frame
// with the entries after the cursor, the cursor to send next and "more"
// (poll again at once), or a reset frame when the cursor is unusable (drop
// the copy of the scope and poll again without a cursor). The pages are the
// ones a WebSocket subscription gets. An entry carries its origin only when
// the poller's own origin (package middleware reads it from the Tide-Origin
// header) wrote it, as on a socket whose hello named that origin. Refusals
// are *protocol.Error values. POST <prefix>/changes runs it (through
// internal/transport).
func (e *Engine) poll(ctx context.Context, p authz.Principal, origin string, req protocol.PollRequest) ([]byte, error) {
	if e.Draining() {
		return nil, ErrDraining
	}
	if err := e.awaitReady(ctx); err != nil {
		return nil, err
	}
	if req.V != protocol.Version {
		return nil, protocol.Errorf(protocol.CodeUnsupportedVersion, "protocol version %d is not supported; this server speaks %d", req.V, protocol.Version)
	}
	r, perr := e.parseRequest(req.Resource, req.Resources, req.Conditions, req.Cursor, req.Limit)
	if perr != nil {
		return nil, perr
	}
	if err := r.targets.authorize(ctx, p); err != nil {
		return nil, err
	}
	if err := e.checkCaptures(ctx, r.targets); err != nil {
		return nil, err
	}
	sp, perr := e.startOf(r, p)
	if perr != nil {
		return nil, perr
	}
	if sp.reset != "" {
		e.stats.resets.Add(1)
		e.cfg.Observer.ResetSent(sp.reset)
		return protocol.Reset("", sp.reset), nil
	}
	if sp.snapshot {
		return e.pollSnapshot(ctx, p, origin, r, sp)
	}
	hw, err := e.highWater(ctx, sp.pos)
	reason := protocol.ResetCursorExpired
	if errors.Is(err, errCursorAhead) {
		err, reason = feed.ErrCursorExpired, protocol.ResetCursorAhead
	}
	var pg page
	if err == nil {
		pg, err = e.replayPageOf(ctx, r.targets, p, origin, sp.pos, hw, r.limit)
	}
	if errors.Is(err, feed.ErrCursorExpired) {
		e.stats.resets.Add(1)
		e.cfg.Observer.ResetSent(reason)
		return protocol.Reset("", reason), nil
	}
	if err != nil {
		return nil, err
	}
	return encodePollPage(pg.entries(), e.cursorString(pg.next), !pg.done), nil
}

// pollSnapshot answers a poll with the next snapshot page. A subscription
// of several resources pages them one after the other, as on a socket; its
// cursor says which resource the next page is of.
//
// A page whose last row has a key too long for a cursor that fits
// protocol.MaxCursorLen goes on past it: such a cursor would be refused
// when sent back, and the poller would start the snapshot over at the same
// row for ever.
func (e *Engine) pollSnapshot(ctx context.Context, p authz.Principal, origin string, r request, sp startPoint) ([]byte, error) {
	ts, i, after, hasAfter := r.targets, 0, sp.after, sp.resumed
	if ts.multi() && hasAfter {
		i, after, hasAfter, _ = parseMultiAfter(ts, after) // checked by openSnapshot
	}
	t := ts[i]
	pg, err := e.snapshotPage(ctx, t.res, p, origin, t.scope, after, hasAfter, r.limit, ts.multi())
	if err != nil {
		return nil, err
	}
	start := pg.pos
	if sp.resumed {
		start = sp.pos
	}
	seq := sp.seq + 1 // the snapshot's cursors are numbered from 1
	entries := pg.entries()
	for {
		next := e.cursorString(start)
		switch {
		case pg.read == r.limit && ts.multi():
			next = e.snapshotCursor(p, ts, start, seq, multiAfter(t.res.schema.Name, pg.lastKey, true))
		case pg.read == r.limit:
			next = e.snapshotCursor(p, ts, start, seq, pg.lastKey)
		case i+1 < len(ts):
			next = e.snapshotCursor(p, ts, start, seq, multiAfter(ts[i+1].res.schema.Name, "", false))
		}
		if len(next) <= protocol.MaxCursorLen || pg.read < r.limit {
			return encodePollPage(entries, next, true), nil
		}
		if pg, err = e.snapshotPage(ctx, t.res, p, origin, t.scope, pg.lastKey, true, r.limit, ts.multi()); err != nil {
			return nil, err
		}
		if len(entries) > 0 && pg.n > 0 {
			entries = append(entries, ',')
		}
		entries = append(entries, pg.entries()...)
	}
}

func encodePollPage(entries []byte, cursor string, more bool) []byte {
	b := protocol.AppendPollStart(make([]byte, 0, len(entries)+128), cursor, more)
	b = append(b, entries...)
	return protocol.AppendChangesEnd(b)
}
