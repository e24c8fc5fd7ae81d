package core

import (
	"context"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
)

// entryFor returns the entry a principal receives for a change, or nil if it
// receives nothing. enc holds the change's shared encodings when the caller
// has them (fan-out); replay passes nil and encodes per page.
//
// This is the single place where what a subscriber sees of a change is
// decided, for replay, snapshot and live delivery alike.
func (r *resource) entryFor(p authz.Principal, c *feed.Change, enc *entryBytes) []byte {
	if enc == nil {
		e := encodeEntries(c)
		enc = &e
	}
	if c.Op == feed.OpUpsert {
		return enc.upsert
	}
	return enc.delete
}

// page is one page of entries read from the feed and encoded for a
// principal.
type page struct {
	body    []byte        // encoded entries, comma-separated
	n       int           // entries in body
	read    int           // changes or rows the feed returned
	last    feed.Position // replay: position of the last change read
	lastKey string        // snapshot: key of the last row read
	pos     feed.Position // snapshot: the position the page is consistent at
}

func (pg *page) add(entry []byte) {
	if entry == nil {
		return
	}
	if pg.n > 0 {
		pg.body = append(pg.body, ',')
	}
	pg.body = append(pg.body, entry...)
	pg.n++
}

// replayPage reads the changes of sc in (after, until], at most limit.
func (e *Engine) replayPage(ctx context.Context, r *resource, p authz.Principal, sc feed.Scope, after, until feed.Position, limit int) (page, error) {
	e.stats.replayQueries.Add(1)
	changes, err := e.feed.Replay(ctx, feed.ReplayQuery{Scope: sc, After: after, Until: until, Limit: limit})
	if err != nil {
		return page{}, err
	}
	pg := page{read: len(changes), last: after}
	for i := range changes {
		pg.add(r.entryFor(p, &changes[i], nil))
		pg.last = changes[i].Pos
	}
	return pg, nil
}

// snapshotPage reads up to limit current rows of sc with keys after the
// given one.
func (e *Engine) snapshotPage(ctx context.Context, r *resource, p authz.Principal, sc feed.Scope, after string, hasAfter bool, limit int) (page, error) {
	e.stats.snapshotQueries.Add(1)
	sp, err := e.feed.Snapshot(ctx, feed.SnapshotQuery{Scope: sc, After: after, HasAfter: hasAfter, Limit: limit})
	if err != nil {
		return page{}, err
	}
	pg := page{read: len(sp.Rows), pos: sp.Pos, lastKey: after}
	for i := range sp.Rows {
		pg.add(r.entryFor(p, &sp.Rows[i], nil))
		pg.lastKey = sp.Rows[i].Key
	}
	return pg, nil
}
