package client

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"github.com/tidesync/tide/core/protocol"
)

// The replica is the client-kept local store: for each synced scope the
// server's rows at the scope's cursor (the base), and the mutation log on
// top of it. What the app reads (the view) is the base with the log's row
// changes applied in log order. The log holds, in this order:
//
//   - landed results: mutations the server acknowledged, whose rows stay on
//     top of the base until every subscription covering them has reached
//     the ack's cursor (from then on the base has them);
//   - pending writes: optimistic changes not yet answered, in sequence
//     order.
//
// Rolling back a write is removing it from the log, and replaying the
// others is recomputing the view, so the rebase on an ack for key K — roll
// back K and every later write newest-first, land the server's rows under
// K's strategy, replay the rest in sequence order — is: take K out, put its
// landed rows after everything that stays beneath it (earlier pending
// writes, and landed results, kept in the order of their ack cursors), and
// put the later pending writes back on top. Every function here is pure bookkeeping; the
// Client serializes calls (Client.lmu) and persists the results.

// scopeCopy is the local copy of one synced scope.
type scopeCopy struct {
	norm   normScope
	base   map[string]json.RawMessage // the server's rows at cursor; replaced, never modified in place
	cursor string                     // the applied (and persisted) cursor of base
	// refused: the server refused the scope's subscription, and no batch
	// has been applied since. Such a scope brings nothing until it is
	// allowed again, so it holds no mutation back from settling.
	refused bool
	view    map[string]json.RawMessage // base with the log applied; may be base itself

	ver     uint64        // incremented once per change of view
	changed chan struct{} // closed and replaced when view changes
}

func newScopeCopy(n normScope) *scopeCopy {
	return &scopeCopy{norm: n, base: map[string]json.RawMessage{}, view: map[string]json.RawMessage{}, changed: make(chan struct{})}
}

// logItem is one mutation in the log.
type logItem struct {
	key            string
	seq            int64
	resource, name string
	args           json.RawMessage
	at             int64
	strategy       Strategy
	strategyName   string
	traceparent    string // the caller's trace context, sent with the frame

	// ops are the row changes the item puts on top of the base: a pending
	// write's optimistic changes, or an acknowledged one's landed rows
	// (with its optimistic changes of rows the ack did not name, which
	// its subscriptions will bring).
	ops    []protocol.Entry
	acked  bool
	cursor string // acked: the ack's cursor
	closes int    // connections it was sent on that the server closed unanswered

	handle *PendingMutation // nil for an ack of an unknown key
}

// resources are the resources the item's rows belong to.
func (it *logItem) resources() []string {
	out := []string{}
	if it.resource != "" {
		out = append(out, it.resource)
	}
	for _, op := range it.ops {
		if !slices.Contains(out, op.Resource) {
			out = append(out, op.Resource)
		}
	}
	return out
}

type replica struct {
	scopes map[string]*scopeCopy // by digest
	log    []*logItem
	seq    int64 // the last client sequence number handed out
}

func newReplica() *replica { return &replica{scopes: map[string]*scopeCopy{}} }

func (r *replica) find(key string) int {
	return slices.IndexFunc(r.log, func(it *logItem) bool { return it.key == key })
}

// firstPending returns the index of the first pending write, or len(log).
func (r *replica) firstPending() int {
	i := slices.IndexFunc(r.log, func(it *logItem) bool { return !it.acked })
	if i < 0 {
		return len(r.log)
	}
	return i
}

// lookup returns the row (resource, key) holds on top of the bases and
// items: nil if absent.
func (r *replica) lookup(resource, key string, items []*logItem) json.RawMessage {
	var v json.RawMessage
	for _, d := range slices.Sorted(maps.Keys(r.scopes)) {
		sc := r.scopes[d]
		if sc.norm.has(resource) {
			if row, ok := sc.base[sc.norm.rowKey(resource, key)]; ok {
				v = row
				break
			}
		}
	}
	for _, it := range items {
		for _, op := range it.ops {
			if op.Resource == resource && op.Key == key {
				v = op.Row
			}
		}
	}
	return v
}

// computeView returns sc's base with the log applied.
func computeView(sc *scopeCopy, log []*logItem) map[string]json.RawMessage {
	var view map[string]json.RawMessage
	for _, it := range log {
		for _, op := range it.ops {
			if !sc.norm.has(op.Resource) {
				continue
			}
			if view == nil {
				view = maps.Clone(sc.base)
			}
			if op.Row != nil && matchesScope(sc.norm, op.Row) {
				view[sc.norm.rowKey(op.Resource, op.Key)] = op.Row
			} else {
				delete(view, sc.norm.rowKey(op.Resource, op.Key))
			}
		}
	}
	if view == nil {
		return sc.base
	}
	return view
}

// refresh recomputes the views of the scopes of the resources (all scopes
// when resources is nil) and returns the scopes whose view changed, each
// once, with its version bumped and its waiters woken.
func (r *replica) refresh(resources []string) []*scopeCopy {
	var changed []*scopeCopy
	for _, d := range slices.Sorted(maps.Keys(r.scopes)) {
		sc := r.scopes[d]
		if resources != nil && !slices.ContainsFunc(resources, sc.norm.has) {
			continue
		}
		if r.setView(sc, computeView(sc, r.log)) {
			changed = append(changed, sc)
		}
	}
	return changed
}

// setView installs view and reports whether it differs from the old one.
func (r *replica) setView(sc *scopeCopy, view map[string]json.RawMessage) bool {
	same := maps.EqualFunc(sc.view, view, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })
	sc.view = view
	if same {
		return false
	}
	sc.ver++
	close(sc.changed)
	sc.changed = make(chan struct{})
	return true
}

// applyBase applies one batch of the server to sc's base and returns the
// new base (sc is not modified: the caller installs it once persisted).
//
// n keys the rows (normScope.rowKey).
func applyBase(n normScope, base map[string]json.RawMessage, reset bool, entries []protocol.Entry) map[string]json.RawMessage {
	next := map[string]json.RawMessage{}
	if !reset {
		next = maps.Clone(base)
	}
	for _, e := range entries {
		switch e.Op {
		case "upsert":
			next[n.rowKey(e.Resource, e.Key)] = e.Row
		case "delete":
			delete(next, n.rowKey(e.Resource, e.Key))
		}
	}
	return next
}

// conflict is a Strategy error on one row of an ack.
type conflict struct {
	resource, key string
	err           error
}

// ack reconciles the server's ack of key: see the top of this file. It
// returns the item (nil for a duplicate ack of an item already landed),
// whether the key was known, and the conflicts its strategy reported.
func (r *replica) ack(key, cursor string, entries []protocol.Entry) (it *logItem, known bool, conflicts []conflict) {
	i := r.find(key)
	if i >= 0 && r.log[i].acked {
		return nil, true, nil // a repeated ack: already landed
	}
	var rest []*logItem
	var prefix []*logItem
	if i >= 0 {
		it, known = r.log[i], true
		prefix, rest = r.log[:i], r.log[i+1:]
	} else {
		it = &logItem{key: key, strategy: ServerWins{}, strategyName: strategyName(nil)}
		p := r.firstPending()
		prefix, rest = r.log[:p], r.log[p:]
	}
	var landedRest, pendingRest []*logItem
	for _, x := range rest {
		if x.acked {
			landedRest = append(landedRest, x)
		} else {
			pendingRest = append(pendingRest, x)
		}
	}
	beneath := slices.Concat(prefix, landedRest)
	// Landed results stay in server order: K's goes beneath those of later
	// commits (an ack that arrives late, e.g. after a resend), never
	// beneath a pending write.
	pos := len(beneath)
	for pos > 0 && beneath[pos-1].acked && newer(beneath[pos-1].cursor, cursor) {
		pos--
	}
	under := beneath[:pos]

	strategy := it.strategy
	if strategy == nil {
		strategy = ServerWins{}
	}
	var landed []protocol.Entry
	named := map[[2]string]bool{}
	for _, e := range entries {
		if e.Resource == "" {
			e.Resource = it.resource
		}
		named[[2]string{e.Resource, e.Key}] = true
		server := e.Row
		if e.Op == "delete" {
			server = nil
		}
		row := server
		if local, ok := lastOp(it.ops, e.Resource, e.Key); ok {
			base := r.lookup(e.Resource, e.Key, under)
			res, err := strategy.Resolve(local, base, server)
			if err == nil && res != nil {
				res, err = normRow(res)
			}
			if err != nil {
				conflicts = append(conflicts, conflict{resource: e.Resource, key: e.Key, err: err})
				res = server
			}
			row = res
		}
		landed = append(landed, rowEntry(e.Resource, e.Key, row))
	}
	// Rows the mutation changed locally that the ack does not name (the
	// mutator wrote them without tide seeing it, or not at all) keep their
	// local content until the subscriptions have caught up with the ack.
	var kept []protocol.Entry
	for _, op := range it.ops {
		if !named[[2]string{op.Resource, op.Key}] {
			kept = append(kept, op)
		}
	}
	it.ops = append(kept, landed...)
	it.acked, it.cursor = true, cursor
	r.log = slices.Concat(beneath[:pos], []*logItem{it}, beneath[pos:], pendingRest)
	return it, known, conflicts
}

// reject takes key's pending write out of the log: rolled back, the others
// replayed. It returns the item, nil if the key is unknown or landed.
func (r *replica) reject(key string) *logItem {
	i := r.find(key)
	if i < 0 || r.log[i].acked {
		return nil
	}
	it := r.log[i]
	r.log = slices.Delete(r.log, i, i+1)
	return it
}

// settle drops the landed items whose ack cursor every synced scope of
// their resources has reached, and returns them. A refused scope does not
// count: its cursor stays where it is until the server allows it again.
func (r *replica) settle() []*logItem {
	var done []*logItem
	r.log = slices.DeleteFunc(r.log, func(it *logItem) bool {
		if !it.acked {
			return false
		}
		res := it.resources()
		for _, sc := range r.scopes {
			if !sc.refused && slices.ContainsFunc(res, sc.norm.has) && newer(it.cursor, sc.cursor) {
				return false
			}
		}
		done = append(done, it)
		return true
	})
	return done
}

// pendingKeys lists the log's keys in log order.
func (r *replica) pendingKeys() []string {
	out := make([]string, len(r.log))
	for i, it := range r.log {
		out[i] = it.key
	}
	return out
}

func lastOp(ops []protocol.Entry, resource, key string) (json.RawMessage, bool) {
	for i := len(ops) - 1; i >= 0; i-- {
		if ops[i].Resource == resource && ops[i].Key == key {
			return ops[i].Row, true
		}
	}
	return nil, false
}

// rowEntry is an upsert of row, or a delete when row is nil.
func rowEntry(resource, key string, row json.RawMessage) protocol.Entry {
	if row == nil {
		return protocol.Entry{Op: "delete", Key: key, Resource: resource}
	}
	return protocol.Entry{Op: "upsert", Key: key, Row: row, Resource: resource}
}

// matchesScope reports whether row (a JSON object) satisfies the scope's
// conditions: the row's value of each condition column equals the
// condition's value or one of its "in" values.
func matchesScope(n normScope, row json.RawMessage) bool {
	if len(n.condMap) == 0 {
		return true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(row, &m) != nil {
		return false
	}
	for col, cond := range n.condMap {
		v, ok := m[col]
		if !ok {
			return false
		}
		got := scalarText(v)
		if got == "" {
			return false
		}
		var in struct {
			In []json.RawMessage `json:"in"`
		}
		if bytes.HasPrefix(cond, []byte("{")) {
			if json.Unmarshal(cond, &in) != nil {
				return false
			}
		} else {
			in.In = []json.RawMessage{cond}
		}
		if !slices.ContainsFunc(in.In, func(c json.RawMessage) bool { return scalarText(c) == got }) {
			return false
		}
	}
	return true
}

// scalarText is a scalar's canonical JSON, with an integer written as a
// string (the protocol's form for integers beyond JavaScript's range)
// unquoted so it equals the number; "" if v is not a scalar.
func scalarText(v json.RawMessage) string {
	x, err := toJSONValue(v)
	if err != nil {
		return ""
	}
	if s, ok := x.(string); ok && isInteger(s) {
		return s
	}
	raw, err := scalarJSON(x)
	if err != nil {
		return ""
	}
	return string(raw)
}
