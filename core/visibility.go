package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/text"
)

// entryFor returns the entry a principal receives for a change on the
// device origin, or nil if it receives nothing. enc holds the change's shared encodings when the caller
// has them (fan-out); replay passes nil and encodes per page.
//
// This is the single place where what a subscriber sees of a change is
// decided, for replay, snapshot and live delivery alike. The change is in
// the subscriber's scope (the feed or the hub matched it); what remains is
// the resource's row filter:
//
//   - an upsert of a visible row is sent as is, with the change's origin
//     only if origin wrote it (entryBytes);
//   - an upsert of a row the principal may not see is sent as a delete, since
//     the subscriber may hold an older, visible version of it; the delete
//     carries no origin, so even the writer's own client drops the row.
//     When the feed recorded the previous version (Change.PrevKnown), the
//     delete goes only to those who may see that version: a row hidden
//     from a subscriber before and after, or new and hidden, sends nothing,
//     so its key never reaches a subscriber that never saw the row;
//   - a delete is sent if the deleted (old) row was visible, or if the feed
//     did not say what it was; otherwise the subscriber never had it.
//
// Fan-out calls it once per subscriber with the change's shared enc, from
// the tailer's goroutine only: the row is decoded once per change, into
// enc.view, whatever the number of subscribers. Without a filter nothing is
// decoded and nothing allocated.
func (r *resource) entryFor(p authz.Principal, origin string, c *feed.Change, enc *entryBytes) []byte {
	return r.see(p, origin, c, enc, false)
}

// see is entryFor, with snapshot set for rows of a snapshot: the subscriber
// starts those from an empty copy, so a row it may not see is left out
// rather than sent as a delete.
//
// A row the filter lets through is then trimmed to the columns the
// principal may see (the resource's column policies, columns.go): the
// columns it may not see are left out of the row, and an upsert that
// changed none of the columns it may see is not sent at all.
func (r *resource) see(p authz.Principal, origin string, c *feed.Change, enc *entryBytes, snapshot bool) []byte {
	if enc == nil {
		enc = &entryBytes{} // replay and snapshot: encode only what is sent
	}
	if r.filter == nil && r.cols == nil {
		return enc.entry(c, origin)
	}
	visible, known := true, true
	if r.filter != nil {
		visible, known = r.filter.check(p, c, &enc.view)
	}
	switch {
	case c.Op == feed.OpUpsert && visible:
		return r.shown(p, origin, c, enc, snapshot)
	case c.Op == feed.OpUpsert && snapshot:
		return nil
	case c.Op == feed.OpUpsert && c.PrevKnown:
		if r.filter.checkPrev(p, c, &enc.view) {
			return enc.view.hiddenDelete(c)
		}
		return nil // it never saw the row: not even its key
	case c.Op == feed.OpUpsert || !known:
		return enc.view.hiddenDelete(c)
	case visible:
		return enc.entry(c, origin)
	}
	return nil
}

// perPrincipal reports whether what a subscriber receives of the
// resource's changes may depend on its principal: the resource has a row
// filter or column policies.
func (r *resource) perPrincipal() bool { return r.filter != nil || r.cols != nil }

// rowView caches, per change, what row filters need: the decoded row and the
// delete entry sent in place of a hidden upsert.
type rowView struct {
	decoded bool
	row     any // the decoded row; nil if the change has none or it did not decode
	hidden  []byte

	prevDecoded bool
	prev        any // the decoded previous row (Change.Prev); nil if none or it did not decode

	// arena, when set, is where row is decoded: rows of one page share
	// allocations (rowDecoder.decodeIn) instead of one each.
	arena *any
	// spans, when set (with arena), locate the row's values (the feed's
	// feed.SnapshotPage.Spans).
	spans []protocol.ValueSpan

	diff *columnDiff // which columns the change changed, for column policies (columns.go)
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
	row := f.row(c, v)
	if row == nil {
		return false, false
	}
	return f.call(p, row), true
}

// checkPrev reports whether p may have seen the change's previous version
// (Change.Prev, which the caller knows the feed recorded). No previous row:
// false. A previous row that does not decode, or lacks a column the filter
// reads, counts as seen, so the subscriber drops whatever it may hold.
func (f *rowFilter) checkPrev(p authz.Principal, c *feed.Change, v *rowView) bool {
	if len(c.Prev) == 0 {
		return false
	}
	prev := f.prev(c, v)
	if prev == nil {
		return true
	}
	return f.call(p, prev)
}

// row returns the change's decoded row, decoding it on first use for the
// change (v), or nil if the change has none or it does not decode.
func (d *rowDecoder) row(c *feed.Change, v *rowView) any {
	if !v.decoded {
		v.decoded = true
		if len(c.Row) > 0 {
			var row any
			var err error
			if v.arena != nil {
				row, err = d.decodeIn(c.Row, v.spans, v.arena)
			} else {
				row, err = d.decode(c.Row)
			}
			if err != nil {
				if n := d.badRows.Add(1); n&(n-1) == 0 { // log the 1st, 2nd, 4th, 8th… only
					d.log.Error("tide: a row does not decode for its row filter or column policies; it is hidden", "key", c.Key, "pos", c.Pos, "err", err, "count", n)
				}
			}
			v.row = row
		}
	}
	return v.row
}

// prev returns the change's decoded previous version (Change.Prev),
// decoding it on first use for the change (v), or nil if the change has
// none, or it does not decode or lacks a column (decodePrev).
func (d *rowDecoder) prev(c *feed.Change, v *rowView) any {
	if !v.prevDecoded {
		v.prevDecoded = true
		if len(c.Prev) > 0 {
			if row, err := d.decodePrev(c.Prev); err == nil {
				v.prev = row
			}
		}
	}
	return v.prev
}

// decodePrev decodes a previous version, which a feed may have recorded
// with only the columns the engine reads of it (Schema.PrevColumns): one
// that lacks any of them is refused, so that a filter or a column policy
// never decides on a zero value it did not get.
func (d *rowDecoder) decodePrev(row json.RawMessage) (any, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(row, &obj); err != nil {
		return nil, err
	}
	for _, col := range d.prevCols {
		if _, ok := obj[col]; !ok {
			return nil, fmt.Errorf("the previous version lacks column %s", col)
		}
	}
	return d.decode(row)
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

// guardPolicy wraps a resource's policy so that a token's grants restrict
// every resource whatever its policy says, and a panicking policy denies
// instead of crashing the server. A nil policy stays nil (deny).
func guardPolicy(policy authz.Policy) authz.Policy {
	if policy == nil {
		return nil
	}
	return func(ctx context.Context, r authz.Request) (err error) {
		if err := authz.CheckGrants(r); err != nil {
			return err
		}
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("the policy of %s panicked: %v", r.Resource, v)
			}
		}()
		return policy(ctx, r)
	}
}

// rowFilter is a resource's authz.RowFilter with its row type erased: rows
// are decoded once per change (rowDecoder) and the result handed to every
// subscriber's check (visible).
type rowFilter struct {
	*rowDecoder
	visible func(p authz.Principal, row any) bool
	panics  atomic.Int64
}

func newRowFilter[T any](d *rowDecoder, f authz.RowFilter[T]) *rowFilter {
	return &rowFilter{rowDecoder: d, visible: func(p authz.Principal, row any) bool { return f(p, row.(*T)) }}
}

// rowDecoder decodes a resource's rows, with their type erased, for its
// row filter and its column policies, which share it (and so each
// change's decoded row, rowView).
type rowDecoder struct {
	decode func(row json.RawMessage) (any, error)
	// decodeIn is decode into the next free row of an arena (nil at
	// first, then the decoder's own), which it grows by rowArenaLen rows
	// at a time: one allocation for that many rows. Every decoded row
	// keeps its own memory, as with decode. With spans (the feed's, see
	// feed.SnapshotPage.Spans) it decodes each value where they say.
	decodeIn func(row json.RawMessage, spans []protocol.ValueSpan, arena *any) (any, error)
	prevCols []string // what a previous version must hold (Schema.PrevColumns)
	log      *slog.Logger
	badRows  atomic.Int64
}

func newRowDecoder[T any](c *protocol.RowCodec, log *slog.Logger) *rowDecoder {
	return &rowDecoder{
		// Rows come from feeds, which never modify them: the decoded
		// strings share the row's bytes instead of copying them.
		decode: func(row json.RawMessage) (any, error) {
			v := new(T)
			if err := c.DecodeShared(row, reflect.ValueOf(v).Elem()); err != nil {
				return nil, err
			}
			return v, nil
		},
		decodeIn: func(row json.RawMessage, spans []protocol.ValueSpan, arena *any) (any, error) {
			rows, _ := (*arena).(*[]T)
			if rows == nil {
				rows = new([]T)
				*arena = rows
			}
			if len(*rows) == 0 {
				*rows = make([]T, rowArenaLen)
			}
			v := &(*rows)[0]
			*rows = (*rows)[1:]
			var err error
			if spans != nil {
				err = c.DecodeSpans(row, spans, reflect.ValueOf(v).Elem())
			} else {
				err = c.DecodeShared(row, reflect.ValueOf(v).Elem())
			}
			if err != nil {
				return nil, err
			}
			return v, nil
		},
		log: log,
	}
}

// rowArenaLen is how many rows a page's filter decodes per allocation.
const rowArenaLen = 256

// authorize runs the resource's policy for p on sc. No policy means deny.
// Denials wrap authz.ErrUnauthenticated or authz.ErrForbidden; any other
// policy error is wrapped as is and also denies.
func (r *resource) authorize(ctx context.Context, p authz.Principal, sc feed.Scope) error {
	if r.policy == nil {
		return fmt.Errorf("%w: resource %s has no policy", authz.ErrForbidden, r.schema.Name)
	}
	err := r.policy(ctx, authz.Request{Principal: p, Resource: r.schema.Name, Conditions: conditionsMap(sc)})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, authz.ErrUnauthenticated) || errors.Is(err, authz.ErrForbidden):
		// Name what was refused: the resource and conditions are the
		// caller's own request, so this tells it nothing new.
		return fmt.Errorf("%s: %w", describeScope(sc), err)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("policy: %w", err)
}

// describeScope renders a scope as a client asked for it, for messages:
// "todos where project_id = p7".
func describeScope(sc feed.Scope) string {
	var b strings.Builder
	b.WriteString(sc.Schema.Name)
	for i, c := range sc.Conds {
		if i == 0 {
			b.WriteString(" where ")
		} else {
			b.WriteString(" and ")
		}
		b.WriteString(sc.Schema.ScopeColumn(c.Col).Name)
		if len(c.Values) == 1 {
			b.WriteString(" = ")
			b.WriteString(text.Truncate(c.Values[0], 64))
		} else {
			b.WriteString(" in (")
			for j, v := range c.Values {
				if j > 0 {
					b.WriteString(", ")
				}
				if j == 8 {
					b.WriteString("…")
					break
				}
				b.WriteString(text.Truncate(v, 64))
			}
			b.WriteString(")")
		}
	}
	return b.String()
}
