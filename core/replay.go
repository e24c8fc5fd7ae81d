package core

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/jsontext"
)

// page is one page of entries read from the feed and encoded for a
// principal. Its buffer starts with pageHeadroom free bytes, where sendPage
// writes the frame's header, so a page becomes a frame without a copy.
type page struct {
	buf     []byte        // pageHeadroom bytes, then the encoded entries, comma-separated
	n       int           // entries in the page
	read    int           // changes or rows the feed returned
	last    feed.Position // replay: position of the last change read
	next    feed.Position // replay: every change up to it has been read
	done    bool          // replay: nothing more up to the high-water
	lastKey string        // snapshot: key of the last row read
	pos     feed.Position // snapshot: the position the page is consistent at
	arena   *any          // where the row filter decodes the page's rows (rowView.arena)
}

// pageHeadroom is room for a changes frame's header: the frame start, an id
// of up to 128 bytes and a change cursor. Longer headers (escaped ids,
// snapshot cursors with long keys) are copied instead.
const pageHeadroom = 256

// newPage sizes a page's buffer for the changes it will hold.
func newPage(changes []feed.Change) page {
	size := pageHeadroom + 2
	for i := range changes {
		size += len(changes[i].Row) + len(changes[i].Key) + len(changes[i].Origin) + 48
	}
	return page{buf: make([]byte, pageHeadroom, size), read: len(changes)}
}

// entries returns the page's encoded entries.
func (pg *page) entries() []byte { return pg.buf[pageHeadroom:] }

func (pg *page) add(entry []byte) {
	if entry == nil {
		return
	}
	if pg.n > 0 {
		pg.buf = append(pg.buf, ',')
	}
	pg.buf = append(pg.buf, entry...)
	pg.n++
}

// addChange appends the entry p receives for c on the device origin (the
// change's origin only if that device wrote it), encoding it in place when
// the resource has no row filter (the common case: no per-entry garbage).
// named adds the change's resource to the entry (subscriptions of several
// resources).
func (pg *page) addChange(r *resource, p authz.Principal, origin string, c *feed.Change, spans []protocol.ValueSpan, snapshot, named bool) {
	if r.perPrincipal() && c.Op == feed.OpUpsert {
		// Most upserts are visible: decoded and checked here, and
		// encoded in place; the others (and every upsert of a resource
		// with column policies) go through see with the row already
		// decoded.
		if pg.arena == nil {
			pg.arena = new(any)
		}
		enc := entryBytes{}
		enc.view.arena, enc.view.spans = pg.arena, spans
		if r.cols == nil {
			if visible, _ := r.filter.check(p, c, &enc.view); visible {
				if pg.n > 0 {
					pg.buf = append(pg.buf, ',')
				}
				pg.buf = protocol.AppendEntry(pg.buf, "upsert", c.Key, c.Row, shownOrigin(c, origin))
				if named {
					pg.buf = appendResource(pg.buf, c.Resource)
				}
				pg.n++
				return
			}
		}
		n := pg.n
		pg.add(r.see(p, origin, c, &enc, snapshot))
		if named && pg.n > n {
			pg.buf = appendResource(pg.buf, c.Resource)
		}
		return
	}
	if r.perPrincipal() {
		n := pg.n
		pg.add(r.see(p, origin, c, nil, snapshot))
		if named && pg.n > n {
			pg.buf = appendResource(pg.buf, c.Resource)
		}
		return
	}
	if pg.n > 0 {
		pg.buf = append(pg.buf, ',')
	}
	if c.Op == feed.OpUpsert {
		pg.buf = protocol.AppendEntry(pg.buf, "upsert", c.Key, c.Row, shownOrigin(c, origin))
	} else {
		pg.buf = protocol.AppendEntry(pg.buf, "delete", c.Key, nil, shownOrigin(c, origin))
	}
	if named {
		pg.buf = appendResource(pg.buf, c.Resource)
	}
	pg.n++
}

// appendResource names the resource of the entry that b ends with: the
// entry's closing brace becomes a "resource" field and the brace.
func appendResource(b []byte, resource string) []byte {
	b = append(b[:len(b)-1], `,"resource":`...)
	b = jsontext.AppendString(b, resource)
	return append(b, '}')
}

// frame turns the page into a changes frame with the given header, in
// place when the header fits the headroom.
func (pg *page) frame(header []byte) []byte {
	var f []byte
	if len(header) <= pageHeadroom {
		start := pageHeadroom - len(header)
		copy(pg.buf[start:], header)
		f = pg.buf[start:]
	} else {
		f = append(header, pg.entries()...)
	}
	return protocol.AppendChangesEnd(f)
}

// replayPageOf reads the next page of a subscription's changes in (after,
// until] for p on the device origin: replayPage for one resource,
// multiReplayPage for several.
func (e *Engine) replayPageOf(ctx context.Context, ts targets, p authz.Principal, origin string, after, until feed.Position, limit int) (page, error) {
	if ts.multi() {
		return e.multiReplayPage(ctx, ts, p, origin, after, until, limit)
	}
	return e.replayPage(ctx, ts[0].res, p, origin, ts[0].scope, after, until, limit)
}

// replayPage reads the next page of the changes of sc in (after, until]:
// at most limit changes, as p receives them on the device origin, and where
// to continue (pg.next, pg.done).
func (e *Engine) replayPage(ctx context.Context, r *resource, p authz.Principal, origin string, sc feed.Scope, after, until feed.Position, limit int) (page, error) {
	release, err := e.acquireCatchUp(ctx, p)
	if err != nil {
		return page{}, err
	}
	defer release()
	sl, err := e.sharedReplay(ctx, feed.ReplayQuery{Scope: sc, After: after, Until: until, Limit: limit})
	if err != nil {
		return page{}, err
	}
	pg := newPage(sl.changes)
	pg.last, pg.next, pg.done = after, sl.next, sl.done
	for i := range sl.changes {
		pg.addChange(r, p, origin, &sl.changes[i], nil, false, false)
		pg.last = sl.changes[i].Pos
	}
	return pg, nil
}

// snapshotPage reads up to limit current rows of sc with keys after the
// given one, as p receives them on the device origin.
//
// named adds the resource to every entry (subscriptions of several
// resources).
func (e *Engine) snapshotPage(ctx context.Context, r *resource, p authz.Principal, origin string, sc feed.Scope, after string, hasAfter bool, limit int, named bool) (page, error) {
	release, err := e.acquireCatchUp(ctx, p)
	if err != nil {
		return page{}, err
	}
	defer release()
	sp, err := e.sharedSnapshot(ctx, feed.SnapshotQuery{Scope: sc, After: after, HasAfter: hasAfter, Limit: limit})
	if err != nil {
		return page{}, err
	}
	return snapshotEntries(r, p, origin, sp, after, named), nil
}

// snapshotEntries encodes a snapshot page for p on the device origin;
// after is the key the page was read after. (A feed's snapshot rows carry
// no origin today; a row that did would show it only to its writer.)
func snapshotEntries(r *resource, p authz.Principal, origin string, sp feed.SnapshotPage, after string, named bool) page {
	pg := newPage(sp.Rows)
	pg.pos, pg.lastKey = sp.Pos, after
	n := len(r.schema.Columns)
	if len(sp.Spans) != n*len(sp.Rows) {
		sp.Spans = nil // none, or not this schema's
	}
	for i := range sp.Rows {
		var spans []protocol.ValueSpan
		if sp.Spans != nil {
			spans = sp.Spans[i*n : (i+1)*n : (i+1)*n]
		}
		pg.addChange(r, p, origin, &sp.Rows[i], spans, true, named)
		pg.lastKey = sp.Rows[i].Key
	}
	return pg
}

// errStopSnapshot ends a feed's SnapshotPages when its pages are no longer
// wanted.
var errStopSnapshot = errors.New("tide: snapshot no longer read")

// snapshotPages reads every page of sc's current rows after the given key
// and passes each to emit, in order, until the last (shorter than limit)
// or until emit returns false. It reports whether it reached the last
// page. An error is passed to emit, and ends the read.
//
// A feed that implements feed.SnapshotStreamer reads many pages in one
// pass, holding one catch-up slot for the pass; otherwise every page is a
// snapshotPage.
func (e *Engine) snapshotPages(ctx context.Context, r *resource, p authz.Principal, origin string, sc feed.Scope, after string, hasAfter bool, limit int, named bool, emit func(page, error) bool) bool {
	streamer, stream := e.feed.(feed.SnapshotStreamer)
	for {
		if !stream {
			pg, err := e.snapshotPage(ctx, r, p, origin, sc, after, hasAfter, limit, named)
			if !emit(pg, err) {
				return false
			}
			if pg.read < limit {
				return true
			}
			after, hasAfter = pg.lastKey, true
			continue
		}
		release, err := e.acquireCatchUp(ctx, p)
		if err != nil {
			emit(page{}, err)
			return false
		}
		last, stopped := false, false
		// The feed's pages are filtered and encoded by another goroutine,
		// while this one reads the next: the feed, the row filter and the
		// socket work at the same time.
		type raw struct {
			sp    feed.SnapshotPage
			after string // the key the page was read after
		}
		raws := make(chan raw, replayAhead)
		var stop atomic.Bool
		encoded := make(chan struct{})
		go func() {
			defer close(encoded)
			for rw := range raws {
				if stop.Load() {
					continue
				}
				pg := snapshotEntries(r, p, origin, rw.sp, rw.after, named)
				if rw.sp.Release != nil {
					rw.sp.Release() // the page's entries are encoded: its rows are done with
				}
				if !emit(pg, nil) {
					stop.Store(true)
				}
			}
		}()
		err = streamer.SnapshotPages(ctx, feed.SnapshotQuery{Scope: sc, After: after, HasAfter: hasAfter, Limit: limit}, func(sp feed.SnapshotPage) error {
			if stop.Load() {
				return errStopSnapshot
			}
			e.stats.snapshotQueries.Add(1)
			select {
			case raws <- raw{sp, after}:
			case <-ctx.Done():
				return ctx.Err()
			}
			if n := len(sp.Rows); n > 0 {
				after, hasAfter = sp.Rows[n-1].Key, true
			}
			last = len(sp.Rows) < limit
			return nil
		})
		close(raws)
		<-encoded
		stopped = stop.Load()
		release()
		switch {
		case stopped || errors.Is(err, errStopSnapshot):
			return false
		case err != nil:
			emit(page{}, err)
			return false
		case last:
			return true
		}
	}
}
