package core

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/tidesync/tide/core/feed"
)

// InspectQuery asks why a principal's connections did or did not get a
// row (Engine.Inspect).
type InspectQuery struct {
	Principal string // the principal's id
	Origin    string // optional: only the connections of this device origin
	Resource  string // the resource's name
	Key       string // canonical text of the row's primary key
}

// Inspector verdicts, per subscription (InspectSubscription.Verdict) and for
// the whole report (InspectReport.Verdict).
const (
	// VerdictDelivered: the row's last change is at or below the
	// subscription's delivered cursor and the principal may see the row.
	VerdictDelivered = "delivered"
	// VerdictPending: the row's last change is not delivered yet: above
	// the delivered cursor, waiting in the connection's send queue, or the
	// subscription is catching up.
	VerdictPending = "pending"
	// VerdictFiltered: the resource's row filter hides the row from the
	// principal.
	VerdictFiltered = "filtered"
	// VerdictOutOfScope: the row is not in the subscription's scope (or
	// does not exist).
	VerdictOutOfScope = "out_of_scope"
	// VerdictRefused: the resource's policy refuses the subscription's
	// scope to the principal now.
	VerdictRefused = "refused"
	// VerdictDesynced: a live change did not fit the connection's send
	// queue; the subscription is replayed from its delivered cursor once the
	// queue drains.
	VerdictDesynced = "desynced"
	// VerdictNotSubscribed: the principal is connected, but no
	// subscription follows the resource.
	VerdictNotSubscribed = "not_subscribed"
	// VerdictNotConnected: the principal has no connection on this node.
	VerdictNotConnected = "not_connected"
)

// InspectReport is the answer of Engine.Inspect: for each of a principal's
// connections on this node, each subscription following the resource and
// whether it got the row.
type InspectReport struct {
	Node      string `json:"node"`
	Principal string `json:"principal"`
	Resource  string `json:"resource"`
	Key       string `json:"key"`
	// Verdict sums up the subscriptions: not_connected, not_subscribed,
	// delivered if any subscription got the row, else the first
	// subscription's verdict.
	Verdict string `json:"verdict"`
	Head    uint64 `json:"head"` // the feed's head position
	// Row says what the feed holds for the key: "found", "not found",
	// "unknown" (the feed cannot look it up by key: each subscription's
	// scope is read for it instead), or "not read" (not connected).
	Row string `json:"row"`
	// LastChange is the position of the row's last change, if the feed
	// could tell (feed.LastChanger); LastChangeOp is its operation.
	LastChange   *uint64              `json:"last_change,omitempty"`
	LastChangeOp string               `json:"last_change_op,omitempty"`
	Connections  []InspectConn        `json:"connections"`
	rowScope     []string             // the row's scope values, if found
	rowChange    *feed.Change         // the row's current version, if found
	scans        map[string]scopeScan // by scope key: the followed scopes read for the key
}

// InspectConn is one connection of the principal.
type InspectConn struct {
	Origin        string                `json:"origin"`
	QueueBytes    int                   `json:"queue_bytes"`   // bytes queued or being written to the socket
	QueueEntries  int                   `json:"queue_entries"` // queued frames and live batches not yet taken by the writer
	Subscriptions []InspectSubscription `json:"subscriptions"`
}

// InspectSubscription is one subscription following the resource.
type InspectSubscription struct {
	ID    string `json:"id"`
	Scope string `json:"scope"` // e.g. "todos where project_id = p7"
	// State is catching_up, live or desynced.
	State string `json:"state"`
	// InScope reports whether the row's current version is in the scope.
	InScope bool `json:"in_scope"`
	// Policy is "allowed" or "denied" (PolicyError says why), the
	// resource's policy run now for the connection's principal and scope.
	Policy      string `json:"policy"`
	PolicyError string `json:"policy_error,omitempty"`
	// Filter is "visible", "hidden" or "none" (no row filter, or no row to
	// filter); FilterReason says why a row is hidden.
	Filter       string `json:"filter"`
	FilterReason string `json:"filter_reason,omitempty"`
	Delivered    uint64 `json:"delivered"` // the delivered cursor's position
	Lag          uint64 `json:"lag"`       // head − delivered
	// Queued counts this subscription's live entries waiting in the send
	// queue.
	Queued  int    `json:"queued"`
	Desyncs uint64 `json:"desyncs"` // times a live change did not fit the send queue
	Resyncs uint64 `json:"resyncs"` // replays from the delivered cursor that followed
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
}

// inspectScanRows bounds the rows the inspector reads of a scope to find a
// key when the feed cannot look keys up (feed.LastChanger).
const inspectScanRows = 100_000

// Inspect reports, for every connection of q.Principal on this node (of
// device q.Origin, if set) and every subscription of it that follows
// q.Resource, whether the row q.Key reached it, and if not why: the
// subscription's scope, whether the row is in it, the policy's and the
// row filter's decision now, the position of the row's last change, the
// delivered cursor, the lag and the send queue. It answers for this node
// only (Node names it); ask each node for a principal connected to several.
// An unknown resource is ErrInspectUnknownResource. A connection that has
// no subscription yet counts as connected only when q.Origin is empty (its
// origin is not known before its first subscription).
func (e *Engine) Inspect(ctx context.Context, q InspectQuery) (InspectReport, error) {
	rep := InspectReport{Node: e.Node(), Principal: q.Principal, Resource: q.Resource, Key: q.Key, Connections: []InspectConn{}}
	r := e.resource(q.Resource)
	if r == nil {
		return rep, ErrInspectUnknownResource
	}
	head, err := e.feed.Head(ctx)
	if err != nil {
		return rep, err
	}
	rep.Head = uint64(head)

	// The principal's connections that have subscriptions: their origin was
	// set by hello before the first subscription, under c.mu since.
	e.mu.Lock()
	conns := make([]*conn, 0, 4)
	for c := range e.conns {
		if c.currentPrincipal().ID == q.Principal {
			conns = append(conns, c)
		}
	}
	e.mu.Unlock()

	type subOf struct {
		s *subscription
		t target
	}
	type connOf struct {
		c    *conn
		ic   InspectConn
		subs []subOf
	}
	var found []connOf
	anyConn := false
	for _, c := range conns {
		c.mu.Lock()
		if len(c.subs) == 0 || c.closing {
			known := len(c.subs) > 0
			c.mu.Unlock()
			if q.Origin == "" && !known {
				anyConn = true // connected, origin unknown until it subscribes
			}
			continue
		}
		if q.Origin != "" && c.origin != q.Origin {
			c.mu.Unlock()
			continue
		}
		anyConn = true
		co := connOf{c: c, ic: InspectConn{Origin: c.origin, QueueBytes: c.out.bytes, QueueEntries: len(c.out.items)}}
		for _, s := range c.subs {
			if t := s.targets.of(q.Resource); t != nil {
				co.subs = append(co.subs, subOf{s, *t})
			}
		}
		c.mu.Unlock()
		slices.SortFunc(co.subs, func(a, b subOf) int { return strings.Compare(a.s.id, b.s.id) })
		found = append(found, co)
	}
	if !anyConn {
		rep.Verdict, rep.Row = VerdictNotConnected, "not read"
		return rep, nil
	}

	if err := e.inspectRow(ctx, r, &rep); err != nil {
		return rep, err
	}
	if rep.Row == "unknown" {
		// The feed could not look the key up alone: read the scopes
		// followed for it, then ask for its last change in the row's scope.
		rep.scans = map[string]scopeScan{}
		for _, co := range found {
			for _, so := range co.subs {
				k := so.t.scope.Key()
				if _, done := rep.scans[k]; done {
					continue
				}
				ch, complete, err := e.findInScope(ctx, so.t, q.Key)
				if err != nil {
					return rep, err
				}
				rep.scans[k] = scopeScan{found: ch != nil, complete: complete}
				if ch != nil && rep.rowChange == nil {
					rep.Row, rep.rowChange, rep.rowScope = "found", ch, ch.Scope
					if err := e.inspectLastChange(ctx, r, &rep, ch.Scope); err != nil {
						return rep, err
					}
				}
			}
		}
	}
	for _, co := range found {
		for _, so := range co.subs {
			is, err := e.inspectSub(ctx, co.c, so.s, so.t, &rep)
			if err != nil {
				return rep, err
			}
			co.ic.Subscriptions = append(co.ic.Subscriptions, is)
		}
		if co.ic.Subscriptions == nil {
			co.ic.Subscriptions = []InspectSubscription{}
		}
		rep.Connections = append(rep.Connections, co.ic)
	}
	rep.Verdict = VerdictNotSubscribed
	first := true
	for _, ic := range rep.Connections {
		for _, is := range ic.Subscriptions {
			if first || is.Verdict == VerdictDelivered {
				rep.Verdict = is.Verdict
				first = false
			}
		}
	}
	return rep, nil
}

// scopeScan is what reading a scope for a key found.
type scopeScan struct{ found, complete bool }

// inspectLastChange asks the feed for the row's last change in its scope.
func (e *Engine) inspectLastChange(ctx context.Context, r *resource, rep *InspectReport, scope []string) error {
	lc, ok := e.feed.(feed.LastChanger)
	if !ok {
		return nil
	}
	c, found, err := lc.LastChange(ctx, feed.KeyQuery{Schema: r.schema, Key: rep.Key, Scope: scope})
	if err != nil || !found {
		return err
	}
	pos := uint64(c.Pos)
	rep.LastChange, rep.LastChangeOp = &pos, c.Op.String()
	return nil
}

// ErrInspectUnknownResource is returned by Engine.Inspect for a resource
// the engine does not serve.
var ErrInspectUnknownResource = errors.New("tide: inspect: unknown resource")

// inspectRow looks the row up by key through the feed, if the feed can.
func (e *Engine) inspectRow(ctx context.Context, r *resource, rep *InspectReport) error {
	lc, ok := e.feed.(feed.LastChanger)
	if !ok {
		rep.Row = "unknown"
		return nil
	}
	c, found, err := lc.LastChange(ctx, feed.KeyQuery{Schema: r.schema, Key: rep.Key})
	if err != nil {
		return err
	}
	if !found {
		rep.Row = "unknown" // older than the log retains: look it up by scope
		return nil
	}
	pos := uint64(c.Pos)
	rep.LastChange, rep.LastChangeOp = &pos, c.Op.String()
	if c.Op == feed.OpDelete {
		rep.Row = "not found"
		return nil
	}
	rep.Row = "found"
	rep.rowScope = c.Scope
	rep.rowChange = &c
	return nil
}

// findInScope reads t's scope for the key (the fallback of a feed that
// cannot look keys up), at most inspectScanRows rows.
func (e *Engine) findInScope(ctx context.Context, t target, key string) (*feed.Change, bool, error) {
	q := feed.SnapshotQuery{Scope: t.scope, Limit: e.cfg.MaxPageSize}
	for read := 0; read < inspectScanRows; {
		pg, err := e.feed.Snapshot(ctx, q)
		if err != nil {
			return nil, false, err
		}
		for i := range pg.Rows {
			if pg.Rows[i].Key == key {
				c := pg.Rows[i]
				return &c, true, nil
			}
		}
		read += len(pg.Rows)
		if len(pg.Rows) < q.Limit {
			return nil, true, nil
		}
		q.After, q.HasAfter = pg.Rows[len(pg.Rows)-1].Key, true
	}
	return nil, false, nil
}

// inspectSub reports on one subscription.
func (e *Engine) inspectSub(ctx context.Context, c *conn, s *subscription, t target, rep *InspectReport) (InspectSubscription, error) {
	p := c.currentPrincipal()
	s.mu.Lock()
	is := InspectSubscription{
		ID: s.id, Scope: describeScope(t.scope), State: stateName(s.state),
		Delivered: uint64(s.delivered), Desyncs: s.desyncs, Resyncs: s.resyncs,
	}
	state := s.state
	s.mu.Unlock()
	if rep.Head > is.Delivered {
		is.Lag = rep.Head - is.Delivered
	}
	queuedLast := false
	c.mu.Lock()
	for _, it := range c.out.items {
		if it.sub != s {
			continue
		}
		is.Queued += it.live.len()
		if rep.LastChange != nil && slices.Contains(it.live.pos, feed.Position(*rep.LastChange)) {
			queuedLast = true
		}
	}
	c.mu.Unlock()

	// The policy, now.
	if err := t.res.authorize(ctx, p, t.scope); err != nil {
		if ctx.Err() != nil {
			return is, ctx.Err()
		}
		is.Policy, is.PolicyError = "denied", err.Error()
	} else {
		is.Policy = "allowed"
	}

	// The row and the scope.
	row := rep.rowChange
	rowReason := ""
	switch {
	case rep.Row == "found":
		is.InScope = t.scope.Match(rep.rowScope)
		if !is.InScope {
			rowReason = "the row is in another scope: " + describeRowScope(t.scope.Schema, rep.rowScope)
		}
	case rep.Row == "not found":
		rowReason = "row not found (last change: a delete)"
	default:
		switch sc := rep.scans[t.scope.Key()]; {
		case sc.complete:
			rowReason = "row not found in this scope"
		default:
			rowReason = "row not found among the scope's first rows"
		}
	}

	// The row filter.
	is.Filter = "none"
	visible := true
	if row != nil && t.res.filter != nil {
		vis, known := t.res.filter.check(p, row, &rowView{})
		switch {
		case vis:
			is.Filter = "visible"
		case known:
			is.Filter, is.FilterReason, visible = "hidden", "the row filter returns false for this principal", false
		default:
			is.Filter, is.FilterReason, visible = "hidden", "the row does not decode for the row filter", false
		}
	}

	switch {
	case is.Policy == "denied":
		is.Verdict, is.Reason = VerdictRefused, is.PolicyError
	case !is.InScope:
		is.Verdict, is.Reason = VerdictOutOfScope, rowReason
	case !visible:
		is.Verdict, is.Reason = VerdictFiltered, is.FilterReason
	case state == subDesynced:
		is.Verdict, is.Reason = VerdictDesynced, "a live change did not fit the send queue; a replay from the delivered cursor follows once the queue drains"
	case state == subCatchingUp:
		is.Verdict, is.Reason = VerdictPending, "the subscription is catching up"
	case rep.LastChange != nil && *rep.LastChange > is.Delivered:
		is.Verdict, is.Reason = VerdictPending, "the row's last change is above the delivered cursor"
	case queuedLast:
		is.Verdict, is.Reason = VerdictPending, "the row's last change waits in the send queue"
	case rep.LastChange == nil && is.Delivered < rep.Head:
		is.Verdict, is.Reason = VerdictPending, "the row's last change is unknown and the delivered cursor is below the head"
	default:
		is.Verdict, is.Reason = VerdictDelivered, "the row's last change is at or below the delivered cursor"
	}
	return is, nil
}

func stateName(st subState) string {
	switch st {
	case subLive:
		return "live"
	case subDesynced:
		return "desynced"
	}
	return "catching_up"
}

// describeRowScope renders a row's scope values: "project_id = p8".
func describeRowScope(s *feed.Schema, vals []string) string {
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteString(" and ")
		}
		if i < len(s.Scope) {
			b.WriteString(s.ScopeColumn(i).Name)
			b.WriteString(" = ")
		}
		b.WriteString(v)
	}
	return b.String()
}
