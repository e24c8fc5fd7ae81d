package core

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
)

// PollRequest asks for the next page of a scope, for clients that poll over
// plain HTTP instead of holding a WebSocket. Its fields mean what they mean
// in a subscribe frame.
type PollRequest struct {
	V          int                        `json:"v"`
	Resource   string                     `json:"resource"`
	Conditions map[string]json.RawMessage `json:"conditions,omitempty"`
	Cursor     string                     `json:"cursor,omitempty"`
	Limit      int                        `json:"limit,omitempty"`
}

// Poll authorizes req for p and returns one page as a frame: a changes frame
// with the entries after the cursor, the cursor to send next and "more"
// (poll again at once), or a reset frame when the cursor is unusable (drop
// the copy of the scope and poll again without a cursor). The pages are the
// ones a WebSocket subscription gets. Refusals are *Error values.
func (e *Engine) Poll(ctx context.Context, p authz.Principal, req PollRequest) ([]byte, error) {
	if e.Draining() {
		return nil, ErrDraining
	}
	if err := e.awaitReady(ctx); err != nil {
		return nil, err
	}
	if req.V != ProtocolVersion {
		return nil, errorf(CodeUnsupportedVersion, "protocol version %d is not supported; this server speaks %d", req.V, ProtocolVersion)
	}
	r := e.resource(req.Resource)
	if r == nil {
		return nil, errorf(CodeUnknownResource, "no resource %q", truncate(req.Resource, 64))
	}
	if len(req.Conditions) > maxConditionsN {
		return nil, errorf(CodeTooManyConditions, "at most %d conditions", maxConditionsN)
	}
	scope, perr := parseConditions(r.schema, req.Conditions, e.cfg.MaxConditions, e.cfg.MaxConditionValues)
	if perr != nil {
		return nil, perr
	}
	var cur Cursor
	if req.Cursor != "" {
		var err error
		if cur, err = ParseCursor(req.Cursor); err != nil {
			return nil, errorf(CodeInvalidCursor, "the cursor is not one this server issued")
		}
	}
	if req.Limit < 0 {
		return nil, errorf(CodeBadFrame, "limit must not be negative")
	}
	limit := e.normalizeLimit(req.Limit)
	if err := r.authorize(ctx, p, scope); err != nil {
		return nil, err
	}
	switch {
	case req.Cursor != "" && cur.Epoch != e.epoch:
		e.stats.resets.Add(1)
		return encodePollReset("epoch_changed"), nil
	case req.Cursor == "" || cur.Snapshot:
		pg, err := e.snapshotPage(ctx, r, p, scope, cur.After, cur.Snapshot, limit)
		if err != nil {
			return nil, err
		}
		start := pg.pos
		if cur.Snapshot {
			start = cur.Pos
		}
		next := Cursor{Epoch: e.epoch, Pos: start}
		if pg.read == limit {
			next.Snapshot, next.After = true, pg.lastKey
		}
		return encodePollPage(pg, next.String(), true), nil
	default:
		hw, err := e.feed.Head(ctx)
		if err != nil {
			return nil, err
		}
		if cur.Pos > hw {
			e.stats.resets.Add(1)
			return encodePollReset("cursor_ahead"), nil
		}
		pg, err := e.replayPage(ctx, r, p, scope, cur.Pos, hw, limit)
		if errors.Is(err, feed.ErrCursorExpired) {
			e.stats.resets.Add(1)
			return encodePollReset("cursor_expired"), nil
		}
		if err != nil {
			return nil, err
		}
		return encodePollPage(pg, e.cursorString(pg.next), !pg.done), nil
	}
}

func encodePollPage(pg page, cursor string, more bool) []byte {
	b := appendFrameStart(make([]byte, 0, len(pg.entries())+128), FrameChanges)
	b = appendField(b, "cursor", cursor)
	if more {
		b = append(b, `,"more":true`...)
	} else {
		b = append(b, `,"more":false`...)
	}
	b = append(b, `,"entries":[`...)
	b = append(b, pg.entries()...)
	return appendChangesEnd(b)
}

func encodePollReset(reason string) []byte {
	b := appendFrameStart(nil, FrameReset)
	b = appendField(b, "reason", reason)
	return append(b, '}')
}
