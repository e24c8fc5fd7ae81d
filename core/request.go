package core

import (
	"encoding/json"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// normalizeLimit turns a client's page limit into the one used: zero means
// the default page size, anything above the maximum is capped.
func (e *Engine) normalizeLimit(limit int) int {
	switch {
	case limit <= 0:
		return e.cfg.PageSize
	case limit > e.cfg.MaxPageSize:
		return e.cfg.MaxPageSize
	}
	return limit
}

// cursorString encodes a change cursor of this engine's feed.
func (e *Engine) cursorString(pos feed.Position) string {
	return protocol.Cursor{Epoch: e.epoch, Pos: uint64(pos)}.String()
}

// request is a validated subscribe request, from a subscribe frame or a
// poll: the scope to catch up, the page size and the client's cursor.
type request struct {
	res       *resource  // the first of targets
	scope     feed.Scope // the first of targets
	targets   targets
	limit     int
	cursor    protocol.Cursor
	hasCursor bool
}

// parseRequest validates a subscribe request: the resources exist, the
// conditions name scope columns of each with values of their kinds, the
// cursor is one tide issued and the limit is not negative. Authorization
// comes after, once the request is known to be well-formed. resources, if
// not empty, lists the resources of a subscription of several (resource is
// then one of them, or empty).
func (e *Engine) parseRequest(resource string, resources []string, conds map[string]json.RawMessage, cursor string, limit int) (request, *protocol.Error) {
	ts, err := e.parseTargets(resource, resources, conds)
	if err != nil {
		return request{}, err
	}
	req := request{res: ts[0].res, scope: ts[0].scope, targets: ts}
	if cursor != "" {
		cur, perr := protocol.ParseCursor(cursor)
		if perr != nil {
			return request{}, protocol.Errorf(protocol.CodeInvalidCursor, "the cursor is not one this server issued")
		}
		if _, _, _, ok := parseMultiAfter(ts, cur.After); cur.Snapshot && ts.multi() && !ok {
			return request{}, protocol.Errorf(protocol.CodeInvalidCursor, "the cursor is not one of this subscription's resources")
		}
		req.cursor, req.hasCursor = cur, true
	}
	if limit < 0 {
		return request{}, protocol.Errorf(protocol.CodeBadFrame, "limit must not be negative")
	}
	req.limit = e.normalizeLimit(limit)
	return req, nil
}

// startPoint is where a catch-up begins.
type startPoint struct {
	snapshot bool          // page the scope's current rows first
	pos      feed.Position // replay after it; for a resumed snapshot, the snapshot's position
	after    string        // a resumed snapshot: key of the last row delivered
	resumed  bool          // a snapshot in progress is resumed (after is meaningful)
	// reset is set when the cursor belongs to another feed (another
	// database, or one restored): the client must drop its copy before the
	// snapshot that follows.
	reset protocol.ResetReason
}

// startOf says where the catch-up of a request begins. The engine must be
// ready (its epoch known).
func (e *Engine) startOf(req request) startPoint {
	cur := req.cursor
	switch {
	case !req.hasCursor:
		return startPoint{snapshot: true}
	case cur.Epoch != e.epoch:
		return startPoint{snapshot: true, reset: protocol.ResetEpochChanged}
	case cur.Snapshot:
		return startPoint{snapshot: true, pos: feed.Position(cur.Pos), after: cur.After, resumed: true}
	}
	return startPoint{pos: feed.Position(cur.Pos)}
}
