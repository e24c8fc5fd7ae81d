package core

import (
	"context"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// entryFor returns the entry a principal receives for a change, or nil if it
// receives nothing. enc holds the change's shared encodings when the caller
// has them (fan-out); replay passes nil and encodes per page.
//
// This is the single place where what a subscriber sees of a change is
// decided, for replay, snapshot and live delivery alike. The change is in
// the subscriber's scope (the feed or the hub matched it); what remains is
// the resource's row filter:
//
//   - an upsert of a visible row is sent as is;
//   - an upsert of a row the principal may not see is sent as a delete, since
//     the subscriber may hold an older, visible version of it; the delete
//     carries no origin, so even the writer's own client drops the row;
//   - a delete is sent if the deleted (old) row was visible, or if the feed
//     did not say what it was; otherwise the subscriber never had it.
//
// Fan-out calls it once per subscriber with the change's shared enc, from
// the tailer's goroutine only: the row is decoded once per change, into
// enc.view, whatever the number of subscribers. Without a filter nothing is
// decoded and nothing allocated.
func (r *resource) entryFor(p authz.Principal, c *feed.Change, enc *entryBytes) []byte {
	return r.see(p, c, enc, false)
}

// see is entryFor, with snapshot set for rows of a snapshot: the subscriber
// starts those from an empty copy, so a row it may not see is left out
// rather than sent as a delete.
func (r *resource) see(p authz.Principal, c *feed.Change, enc *entryBytes, snapshot bool) []byte {
	if r.filter == nil {
		if enc == nil {
			e := encodeEntries(c)
			enc = &e
		}
		if c.Op == feed.OpUpsert {
			return enc.upsert
		}
		return enc.delete
	}
	if enc == nil {
		enc = &entryBytes{} // replay and snapshot: encode only what is sent
	}
	visible, known := r.filter.check(p, c, &enc.view)
	switch {
	case c.Op == feed.OpUpsert && visible:
		if enc.upsert == nil {
			enc.upsert = protocol.AppendEntry(make([]byte, 0, len(c.Row)+len(c.Key)+48), "upsert", c.Key, c.Row, c.Origin)
		}
		return enc.upsert
	case c.Op == feed.OpUpsert && snapshot:
		return nil
	case c.Op == feed.OpUpsert || !known:
		return enc.view.hiddenDelete(c)
	case visible:
		if enc.delete == nil {
			enc.delete = protocol.AppendEntry(nil, "delete", c.Key, nil, c.Origin)
		}
		return enc.delete
	}
	return nil
}

// rowView caches, per change, what row filters need: the decoded row and the
// delete entry sent in place of a hidden upsert.
type rowView struct {
	decoded bool
	row     any // the decoded row; nil if the change has none or it did not decode
	hidden  []byte
}

func (v *rowView) hiddenDelete(c *feed.Change) []byte {
	if v.hidden == nil {
		v.hidden = protocol.AppendEntry(nil, "delete", c.Key, nil, "")
	}
	return v.hidden
}

// check reports whether p may see the change's row. known is false when the
// change carries no usable row (a delete from a feed that did not keep the
// old row, or a row that does not decode); visible is then false.
func (f *rowFilter) check(p authz.Principal, c *feed.Change, v *rowView) (visible, known bool) {
	if !v.decoded {
		v.decoded = true
		if len(c.Row) > 0 {
			row, err := f.decode(c.Row)
			if err != nil {
				if n := f.badRows.Add(1); n&(n-1) == 0 { // log the 1st, 2nd, 4th, 8th… only
					f.log.Error("tide: a row does not decode for its row filter; it is hidden", "key", c.Key, "pos", c.Pos, "err", err, "count", n)
				}
			}
			v.row = row
		}
	}
	if v.row == nil {
		return false, false
	}
	return f.call(p, v.row), true
}

// call runs the filter; a panic hides the row (and is logged, sparsely).
func (f *rowFilter) call(p authz.Principal, row any) (ok bool) {
	defer func() {
		if x := recover(); x != nil {
			ok = false
			if n := f.panics.Add(1); n&(n-1) == 0 {
				f.log.Error("tide: the row filter panicked; the row is hidden", "panic", x, "count", n)
			}
		}
	}()
	return f.visible(p, row)
}

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

// addChange appends the entry p receives for c, encoding it in place when
// the resource has no row filter (the common case: no per-entry garbage).
func (pg *page) addChange(r *resource, p authz.Principal, c *feed.Change, snapshot bool) {
	if r.filter != nil {
		pg.add(r.see(p, c, nil, snapshot))
		return
	}
	if pg.n > 0 {
		pg.buf = append(pg.buf, ',')
	}
	if c.Op == feed.OpUpsert {
		pg.buf = protocol.AppendEntry(pg.buf, "upsert", c.Key, c.Row, c.Origin)
	} else {
		pg.buf = protocol.AppendEntry(pg.buf, "delete", c.Key, nil, c.Origin)
	}
	pg.n++
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

// replayPage reads the next page of the changes of sc in (after, until]:
// at most limit changes, and where to continue (pg.next, pg.done).
func (e *Engine) replayPage(ctx context.Context, r *resource, p authz.Principal, sc feed.Scope, after, until feed.Position, limit int) (page, error) {
	sl, err := e.sharedReplay(ctx, feed.ReplayQuery{Scope: sc, After: after, Until: until, Limit: limit})
	if err != nil {
		return page{}, err
	}
	pg := newPage(sl.changes)
	pg.last, pg.next, pg.done = after, sl.next, sl.done
	for i := range sl.changes {
		pg.addChange(r, p, &sl.changes[i], false)
		pg.last = sl.changes[i].Pos
	}
	return pg, nil
}

// snapshotPage reads up to limit current rows of sc with keys after the
// given one.
func (e *Engine) snapshotPage(ctx context.Context, r *resource, p authz.Principal, sc feed.Scope, after string, hasAfter bool, limit int) (page, error) {
	sp, err := e.sharedSnapshot(ctx, feed.SnapshotQuery{Scope: sc, After: after, HasAfter: hasAfter, Limit: limit})
	if err != nil {
		return page{}, err
	}
	pg := newPage(sp.Rows)
	pg.pos, pg.lastKey = sp.Pos, after
	for i := range sp.Rows {
		pg.addChange(r, p, &sp.Rows[i], true)
		pg.lastKey = sp.Rows[i].Key
	}
	return pg, nil
}
