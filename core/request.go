package core

import (
	"encoding/json"

	"github.com/tidesync/tide/authz"
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
// cursor is spelled as tide spells cursors and the limit is not negative.
// A snapshot cursor's sealed place is opened later (startOf), once the
// engine knows its feed's key. Authorization
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
	after    string        // a resumed snapshot: its opened place (openSnapshot)
	seq      uint64        // a resumed snapshot: the number of the cursor it resumes from
	resumed  bool          // a snapshot in progress is resumed (after is meaningful)
	// reset is set when the cursor belongs to another feed (another
	// database, or one restored): the client must drop its copy before the
	// snapshot that follows.
	reset protocol.ResetReason
}

// startOf says where the catch-up of a request by p begins. The engine
// must be ready (its epoch and cursor key known). A snapshot cursor that
// does not open for p and the request's scopes is an invalid cursor.
func (e *Engine) startOf(req request, p authz.Principal) (startPoint, *protocol.Error) {
	cur := req.cursor
	switch {
	case !req.hasCursor:
		return startPoint{snapshot: true}, nil
	case cur.Epoch != e.epoch:
		return startPoint{snapshot: true, reset: protocol.ResetEpochChanged}, nil
	case cur.Snapshot:
		after, err := e.openSnapshot(p, req.targets, cur)
		if err != nil {
			return startPoint{}, err
		}
		return startPoint{snapshot: true, pos: feed.Position(cur.Pos), after: after, seq: cur.Seq, resumed: true}, nil
	}
	return startPoint{pos: feed.Position(cur.Pos)}, nil
}
