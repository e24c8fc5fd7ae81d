package client

import (
	"bytes"
	"encoding/json"
	"reflect"

	"github.com/tidesync/tide/core/protocol"
)

// Own writes converge. A Handler's scope skips a live entry of this
// client's own origin only when it is the echo of a row the client already
// delivered to the app in a mutation's ack (Result.Entries): the same op
// and the same row, with no other entry of that row delivered to the scope
// since the ack. Every other entry is delivered, whatever its origin: rows
// a mutator wrote with plain SQL (the ack does not carry them), the delete
// of a row the write moved out of the scope or out of the caller's sight,
// a later version. A synced scope applies every entry to its store, where
// an echo of a row it already shows changes nothing.
//
// The bookkeeping is per Handler scope: on an ack, each entry of a
// resource the scope follows is noted as an echo to expect; an entry of
// that row delivered to the scope, or skipped as its echo, clears the
// note, and notes whose ack cursor the scope has passed are dropped, so the
// notes stay as few as the acks in flight.

// rowID names a row: its resource and primary key.
type rowID struct{ resource, key string }

// echo is the row an ack delivered (nil row: a delete), expected back as
// a live entry of the client's origin.
type echo struct {
	row    json.RawMessage
	cursor string // the ack's cursor
}

// noteEchoes records the entries of an ack of the mutation of resource
// (the entries' default) as echoes each Handler scope may skip. The caller
// holds c.lmu.
func (c *Client) noteEchoesLocked(resource, cursor string, entries []protocol.Entry) {
	if len(entries) == 0 {
		return
	}
	c.mu.Lock()
	var scopes []*scopeState
	for _, st := range c.scopes {
		if st.copy == nil {
			scopes = append(scopes, st)
		}
	}
	c.mu.Unlock()
	for _, st := range scopes {
		for _, e := range entries {
			if e.Resource == "" {
				e.Resource = resource
			}
			if !st.norm.has(e.Resource) {
				continue
			}
			if st.echoes == nil {
				st.echoes = map[rowID]echo{}
			}
			var row json.RawMessage
			if e.Op != "delete" {
				row = e.Row
			}
			st.echoes[rowID{e.Resource, e.Key}] = echo{row: row, cursor: cursor}
		}
	}
}

// dropEchoes returns entries without the echoes st may skip (only when
// live is set: catch-up entries are all delivered) and updates st's notes
// for a batch at cursor.
func (c *Client) dropEchoes(st *scopeState, live bool, entries []protocol.Entry, cursor string) []protocol.Entry {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if len(st.echoes) == 0 {
		return entries
	}
	origin := c.cfg.Origin
	out := entries[:0]
	for _, e := range entries {
		id := rowID{e.Resource, e.Key}
		ec, ok := st.echoes[id]
		if ok {
			delete(st.echoes, id) // skipped or not, the app's copy is now this entry's
		}
		if ok && live && e.Origin != "" && e.Origin == origin && sameEntry(e, ec.row) {
			continue
		}
		out = append(out, e)
	}
	for id, ec := range st.echoes {
		if !newer(ec.cursor, cursor) {
			delete(st.echoes, id) // the scope is past the ack: its echo came
		}
	}
	return out
}

// sameEntry reports whether e puts row (nil: a delete) in place: the same
// op, and rows equal as JSON values (the server may encode an ack's row
// and a pushed row apart, with the same content).
func sameEntry(e protocol.Entry, row json.RawMessage) bool {
	if e.Op == "delete" || row == nil {
		return e.Op == "delete" && row == nil
	}
	if bytes.Equal(e.Row, row) {
		return true
	}
	a, errA := toJSONValue(e.Row)
	b, errB := toJSONValue(row)
	return errA == nil && errB == nil && reflect.DeepEqual(a, b)
}
