package core

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
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
// ones a WebSocket subscription gets. Refusals are *protocol.Error values.
func (e *Engine) Poll(ctx context.Context, p authz.Principal, req PollRequest) ([]byte, error) {
	if e.Draining() {
		return nil, ErrDraining
	}
	if err := e.awaitReady(ctx); err != nil {
		return nil, err
	}
	if req.V != protocol.Version {
		return nil, protocol.Errorf(protocol.CodeUnsupportedVersion, "protocol version %d is not supported; this server speaks %d", req.V, protocol.Version)
	}
	r := e.resource(req.Resource)
	if r == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownResource, "no resource %q", protocol.Truncate(req.Resource, 64))
	}
	if len(req.Conditions) > protocol.MaxConditionsN {
		return nil, protocol.Errorf(protocol.CodeTooManyConditions, "at most %d conditions", protocol.MaxConditionsN)
	}
	scope, perr := parseConditions(r.schema, req.Conditions, e.cfg.MaxConditions, e.cfg.MaxConditionValues)
	if perr != nil {
		return nil, perr
	}
	var cur protocol.Cursor
	if req.Cursor != "" {
		var err error
		if cur, err = protocol.ParseCursor(req.Cursor); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidCursor, "the cursor is not one this server issued")
		}
	}
	if req.Limit < 0 {
		return nil, protocol.Errorf(protocol.CodeBadFrame, "limit must not be negative")
	}
	limit := e.normalizeLimit(req.Limit)
	if err := r.authorize(ctx, p, scope); err != nil {
		return nil, err
	}
	switch {
	case req.Cursor != "" && cur.Epoch != e.epoch:
		e.stats.resets.Add(1)
		return protocol.Reset("", protocol.ResetEpochChanged), nil
	case req.Cursor == "" || cur.Snapshot:
		pg, err := e.snapshotPage(ctx, r, p, scope, cur.After, cur.Snapshot, limit)
		if err != nil {
			return nil, err
		}
		start := pg.pos
		if cur.Snapshot {
			start = feed.Position(cur.Pos)
		}
		next := protocol.Cursor{Epoch: e.epoch, Pos: uint64(start)}
		if pg.read == limit {
			next.Snapshot, next.After = true, pg.lastKey
		}
		return encodePollPage(pg, next.String(), true), nil
	default:
		hw, err := e.feed.Head(ctx)
		if err != nil {
			return nil, err
		}
		if feed.Position(cur.Pos) > hw {
			e.stats.resets.Add(1)
			return protocol.Reset("", protocol.ResetCursorAhead), nil
		}
		pg, err := e.replayPage(ctx, r, p, scope, feed.Position(cur.Pos), hw, limit)
		if errors.Is(err, feed.ErrCursorExpired) {
			e.stats.resets.Add(1)
			return protocol.Reset("", protocol.ResetCursorExpired), nil
		}
		if err != nil {
			return nil, err
		}
		return encodePollPage(pg, e.cursorString(pg.next), !pg.done), nil
	}
}

func encodePollPage(pg page, cursor string, more bool) []byte {
	b := protocol.AppendPollStart(make([]byte, 0, len(pg.entries())+128), cursor, more)
	b = append(b, pg.entries()...)
	return protocol.AppendChangesEnd(b)
}
