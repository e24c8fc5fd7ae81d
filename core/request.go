package core

import (
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
