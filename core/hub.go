package core

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// liveBatch is a run of live entries for one subscription, in position
// order: what the fan-out hands a subscription for one dispatched batch of
// changes. Without a row filter, every subscription of a scope group shares
// one liveBatch's slices, so a change costs the group one encoding and each
// subscriber one queue append per batch, not per change. The slices are
// never modified once built.
type liveBatch struct {
	entries [][]byte
	pos     []feed.Position
	bytes   int // total length of entries
}

func (b *liveBatch) add(entry []byte, pos feed.Position) {
	b.entries = append(b.entries, entry)
	b.pos = append(b.pos, pos)
	b.bytes += len(entry)
}

func (b liveBatch) len() int { return len(b.entries) }

// last returns the position of the batch's last entry; the batch must not be
// empty.
func (b liveBatch) last() feed.Position { return b.pos[len(b.pos)-1] }

// after returns the part of b above position p, sharing b's memory.
func (b liveBatch) after(p feed.Position) liveBatch {
	i := 0
	for i < len(b.pos) && b.pos[i] <= p {
		i++
	}
	if i == 0 {
		return b
	}
	out := liveBatch{entries: b.entries[i:], pos: b.pos[i:]}
	for _, e := range out.entries {
		out.bytes += len(e)
	}
	return out
}

// groupAdded records a new scope group. The caller holds the hub's write
// lock.
func (h *hub) groupAdded(sc feed.Scope) {
	in := h.e.bus.interest
	if in == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, t := range topicsOf(sc) {
		in.counts[t]++
		if in.counts[t] != 1 {
			continue
		}
		if _, ok := in.drops[t]; ok {
			delete(in.drops, t) // the bus never stopped delivering it
		} else {
			in.adds[t] = struct{}{}
		}
	}
}

// groupRemoved records a deleted scope group. The caller holds the hub's
// write lock.
func (h *hub) groupRemoved(sc feed.Scope) {
	in := h.e.bus.interest
	if in == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, t := range topicsOf(sc) {
		if in.counts[t]--; in.counts[t] > 0 {
			continue
		}
		delete(in.counts, t)
		if _, ok := in.adds[t]; ok {
			delete(in.adds, t) // the bus was never told
		} else {
			in.drops[t] = struct{}{}
		}
	}
}

// entryBytes holds the encodings of one change, each made once per change
// and shared by every subscription it reaches.
//
// An entry carries the change's origin only to the device that wrote it
// (the connection or poll whose own origin is the change's): every other
// subscriber gets the same entry without it, so a device's id is never
// shown to anyone else. Both forms are shared: the one with the origin is
// encoded with the change, the one without only when a change that has an
// origin reaches a subscriber of another device (bare).
type entryBytes struct {
	upsert []byte         // the change as an upsert entry, with its origin (upserts only)
	delete []byte         // the change as a delete entry, with its origin (deletes only; a hidden upsert gets view.hiddenDelete)
	view   rowView        // what row filters need, computed on first use (pages.go)
	named  []byte         // the shared entry naming its resource, for groups of several resources (targets.go)
	trims  []trimmedEntry // the upsert without the columns some subscribers may not see (columns.go)

	// bare holds the same entries without the change's origin, for every
	// other device; only for a change that has one, allocated on first
	// use so that the common change without an origin costs nothing more.
	bare *bareEntries
}

// bareEntries are a change's entries without its origin (entryBytes.bare).
type bareEntries struct {
	upsert, delete, named []byte
}

// bareOf returns eb.bare, allocating it.
func (eb *entryBytes) bareOf() *bareEntries {
	if eb.bare == nil {
		eb.bare = &bareEntries{}
	}
	return eb.bare
}

// of returns the change's shared entry as its writer receives it: its
// upsert or its delete, with its origin.
func (eb *entryBytes) of(c *feed.Change) []byte {
	if c.Op == feed.OpUpsert {
		return eb.upsert
	}
	return eb.delete
}

// shownOrigin returns the origin an entry of c carries for the device
// origin: the change's own if that device wrote it, else none.
func shownOrigin(c *feed.Change, origin string) string {
	if c.Origin == origin {
		return c.Origin
	}
	return ""
}

// entry returns the change's entry (its upsert or its delete) as the
// device origin receives it, encoding it on first use.
func (eb *entryBytes) entry(c *feed.Change, origin string) []byte {
	own := c.Origin == "" || c.Origin == origin
	var p *[]byte
	switch {
	case c.Op == feed.OpUpsert && own:
		p = &eb.upsert
	case c.Op == feed.OpUpsert:
		p = &eb.bareOf().upsert
	case own:
		p = &eb.delete
	default:
		p = &eb.bareOf().delete
	}
	if *p == nil {
		if c.Op == feed.OpUpsert {
			*p = protocol.AppendEntry(make([]byte, 0, len(c.Row)+len(c.Key)+48), "upsert", c.Key, c.Row, shownOrigin(c, origin))
		} else {
			*p = protocol.AppendEntry(nil, "delete", c.Key, nil, shownOrigin(c, origin))
		}
	}
	return *p
}

// namedEntry returns the change's entry naming its resource, as the device
// origin receives it, encoding it on first use.
func (eb *entryBytes) namedEntry(c *feed.Change, origin string) []byte {
	p := &eb.named
	if c.Origin != "" && c.Origin != origin {
		p = &eb.bareOf().named
	}
	if *p == nil {
		*p = namedEntry(eb.entry(c, origin), c.Resource)
	}
	return *p
}

// encodeEntries encodes c for the wire, as its writer receives it.
func encodeEntries(c *feed.Change) entryBytes {
	var eb entryBytes
	eb.entry(c, c.Origin)
	return eb
}

// hub indexes the live subscriptions by resource and scope and fans each
// change out to them. Subscriptions with identical scopes share a group, so a
// change is matched once per group, not once per subscriber, and encoded once
// for everyone.
//
// Registration takes the write lock; dispatch holds the read lock for a whole
// batch. A subscription registered between two batches therefore sees every
// change of every later batch, which is what makes "register live interest,
// then pin the replay high-water" gap-free.
type hub struct {
	e      *Engine
	mu     sync.RWMutex
	res    map[string]*resIndex
	kicks  []*conn  // dispatch's scratch list of connections to start writers for
	active []*group // dispatch's scratch list of groups with matched changes
	seen   [][]byte // flush's scratch list of a subscriber's entries

	writers chan *conn   // unbuffered: parked writer goroutines take connections to write for (sendqueue.go)
	parked  atomic.Int64 // writers parked on writers

	flushBuf      []byte        // the dispatching goroutine's frame buffer for direct writes
	flushJobs     chan flushJob // parts of a dispatch's connections for the flushers
	startFlushers sync.Once
}

// resIndex holds the groups of one resource. A group is indexed under the
// values of its first condition's column; groups without conditions match
// every change.
type resIndex struct {
	groups map[string]*group     // by scope key
	all    []*group              // groups without conditions
	byCol  []map[string][]*group // [scope column] value → groups whose first condition is on that column
}

type group struct {
	scope feed.Scope
	res   *resource
	// targets are the group's scopes: one, or for subscriptions of several
	// resources, one per resource; the group is indexed under each
	// resource, and a dispatch hands each subscription all its changes of
	// every resource in one batch.
	targets targets
	subs    []*subscription
	pend    []pending // changes of the batch being dispatched that match
}

// pending is a change matched to a group during a dispatch, with its
// shared encoding.
type pending struct {
	c   *feed.Change
	enc *entryBytes
}

func newHub(e *Engine) *hub {
	return &hub{e: e, res: map[string]*resIndex{}, writers: make(chan *conn)}
}

// add registers s under its scopes.
func (h *hub) add(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := s.scopes()
	key := ts.key()
	first := h.res[s.scope.Schema.Name]
	var g *group
	if first != nil {
		g = first.groups[key]
	}
	if g == nil {
		g = &group{scope: s.scope, res: s.res, targets: ts}
		for _, t := range g.targets {
			h.index(t.scope).addGroup(key, t.scope, g)
			h.groupAdded(t.scope)
		}
	}
	g.subs = append(g.subs, s)
}

// index returns the index of sc's resource, creating it.
func (h *hub) index(sc feed.Scope) *resIndex {
	ri := h.res[sc.Schema.Name]
	if ri == nil {
		ri = &resIndex{groups: map[string]*group{}, byCol: make([]map[string][]*group, len(sc.Schema.Scope))}
		h.res[sc.Schema.Name] = ri
	}
	return ri
}

// addGroup indexes g under key and the values of sc's first condition.
func (ri *resIndex) addGroup(key string, sc feed.Scope, g *group) {
	ri.groups[key] = g
	if len(sc.Conds) == 0 {
		ri.all = append(ri.all, g)
		return
	}
	c := sc.Conds[0]
	if ri.byCol[c.Col] == nil {
		ri.byCol[c.Col] = map[string][]*group{}
	}
	for _, v := range c.Values {
		ri.byCol[c.Col][v] = append(ri.byCol[c.Col][v], g)
	}
}

// remove unregisters s; removing an unregistered subscription is a no-op.
func (h *hub) remove(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ri := h.res[s.scope.Schema.Name]
	if ri == nil {
		return
	}
	key := s.scopes().key()
	g := ri.groups[key]
	if g == nil {
		return
	}
	i := slices.Index(g.subs, s)
	if i < 0 {
		return
	}
	last := len(g.subs) - 1
	g.subs[i] = g.subs[last]
	g.subs[last] = nil
	g.subs = g.subs[:last]
	if len(g.subs) > 0 {
		return
	}
	for _, t := range g.targets {
		if ri := h.res[t.scope.Schema.Name]; ri != nil {
			ri.removeGroup(key, t.scope, g)
		}
		h.groupRemoved(t.scope)
	}
}

// removeGroup undoes addGroup.
func (ri *resIndex) removeGroup(key string, sc feed.Scope, g *group) {
	delete(ri.groups, key)
	if len(sc.Conds) == 0 {
		ri.all = deleteGroup(ri.all, g)
		return
	}
	c := sc.Conds[0]
	for _, v := range c.Values {
		if gs := deleteGroup(ri.byCol[c.Col][v], g); len(gs) > 0 {
			ri.byCol[c.Col][v] = gs
		} else {
			delete(ri.byCol[c.Col], v)
		}
	}
}

func deleteGroup(gs []*group, g *group) []*group {
	i := slices.Index(gs, g)
	if i < 0 {
		return gs
	}
	return slices.Delete(gs, i, i+1)
}

// dispatch fans a batch of changes, in position order, out to every matching
// subscription. Each change is matched once per scope group and encoded once;
// then each group hands each of its subscriptions all its changes of the
// batch at once (see liveBatch). Once the whole batch is queued, it writes
// the connections it queued entries for (flushKicked, see trySendBatch),
// after releasing the hub's lock. Only the tailer calls it.
func (h *hub) dispatch(changes []feed.Change) {
	h.mu.RLock()
	active := h.active[:0]
	for i := range changes {
		c := &changes[i]
		ri := h.res[c.Resource]
		if ri == nil {
			continue
		}
		var enc *entryBytes // encoded lazily, once, if anyone matches
		for _, g := range ri.all {
			enc, active = g.match(c, enc, active)
		}
		for col, idx := range ri.byCol {
			if idx == nil || col >= len(c.Scope) {
				continue
			}
			for _, g := range idx[c.Scope[col]] {
				enc, active = g.match(c, enc, active)
			}
		}
	}
	kicks := h.kicks[:0]
	for _, g := range active {
		g.flush(&kicks, &h.seen)
		clear(g.pend)
		g.pend = g.pend[:0]
	}
	clear(active)
	h.active = active[:0]
	h.e.cache.recent.add(changes)
	// The writes need no index: subscriptions may come and go meanwhile
	// (a removed one's entries are skipped when written).
	h.mu.RUnlock()
	h.flushKicked(kicks)
	clear(kicks)
	h.kicks = kicks[:0]
}

// match queues c for the group if its scope matches, encoding the change
// on first use; it returns the (possibly new) encoding and the list of
// groups with queued changes.
func (g *group) match(c *feed.Change, enc *entryBytes, active []*group) (*entryBytes, []*group) {
	if g.targets.multi() {
		if !g.targets.match(c) {
			return enc, active
		}
	} else if !g.scope.Match(c.Scope) {
		return enc, active
	}
	if enc == nil {
		e := encodeEntries(c)
		enc = &e
	}
	if len(g.pend) == 0 {
		active = append(active, g)
	}
	g.pend = append(g.pend, pending{c, enc})
	return enc, active
}

// flush hands the group's matched changes to its subscriptions. Every
// subscription that sees the changes as they are (no row filter, or a
// filter that shows it every row) gets one shared batch per view of the
// changes' origins (views): one for the writer's device, one without
// origins for everyone else. A principal that a filter hides rows from or
// a column policy hides columns from, or a device that wrote some of a
// batch's changes but not all that carry an origin, gets a batch of its
// own, which the next subscribers that see the same entries share
// (subscribers whose policies hide the same columns).
func (g *group) flush(kicks *[]*conn, scratch *[][]byte) {
	if g.targets.multi() {
		g.flushMulti(kicks)
		return
	}
	v := g.views(false)
	if !g.res.perPrincipal() {
		for _, s := range g.subs {
			s.push(v.of(s.c.origin), kicks)
		}
		return
	}
	seen := (*scratch)[:0]
	var others []liveBatch // batches of their own that several subscribers may share
	for _, s := range g.subs {
		p, origin := s.principal(), s.c.origin
		base := v.of(origin)
		seen = seen[:0]
		same := true
		for i, pc := range g.pend {
			e := g.res.entryFor(p, origin, pc.c, pc.enc)
			seen = append(seen, e)
			same = same && sameBytes(e, base.entries[i])
		}
		if same {
			s.push(base, kicks)
			continue
		}
		shared := false
		for _, b := range others {
			if shared = b.holds(seen); shared {
				s.push(b, kicks) // another subscriber sees the batch alike
				break
			}
		}
		if shared {
			continue
		}
		var b liveBatch
		for i, e := range seen {
			if e != nil {
				b.add(e, g.pend[i].c.Pos)
			}
		}
		if b.len() > 0 {
			s.push(b, kicks)
			if len(others) < maxSharedViews {
				others = append(others, b)
			}
		}
	}
	clear(seen)
	*scratch = seen[:0]
}

// maxSharedViews bounds the batches of one flush that subscribers who see
// the changes otherwise than base share (one per set of rows and columns
// seen): each subscriber compares its entries with each of them.
const maxSharedViews = 4

// holds reports whether b is exactly the non-nil entries of seen (the same
// encodings, not only equal ones).
func (b liveBatch) holds(seen [][]byte) bool {
	n := 0
	for _, e := range seen {
		if e == nil {
			continue
		}
		if n >= len(b.entries) || !sameBytes(e, b.entries[n]) {
			return false
		}
		n++
	}
	return n == len(b.entries) && n > 0
}

// batchViews are the shared batches of a group's matched changes, one per
// way a device may see their origins.
type batchViews struct {
	g       *group
	named   bool     // entries name their resource (groups of several resources)
	origins []string // the distinct origins of the changes, usually none or one
	own     liveBatch
	bare    liveBatch // without origins: built on first use, when origins is not empty
}

// views builds the group's shared batch of its matched changes, each entry
// as its writer receives it.
func (g *group) views(named bool) batchViews {
	v := batchViews{g: g, named: named}
	for _, pc := range g.pend {
		if o := pc.c.Origin; o != "" && !slices.Contains(v.origins, o) {
			v.origins = append(v.origins, o)
		}
	}
	v.own = g.batchFor("", named, true)
	return v
}

// of returns the batch the device origin receives: the shared batch with
// origins when the batch's changes carry none or only origin's, the shared
// one without when none is origin's, and otherwise (a device that wrote
// some of the batch, others wrote the rest) a batch of its own.
func (v *batchViews) of(origin string) liveBatch {
	switch {
	case len(v.origins) == 0 || len(v.origins) == 1 && v.origins[0] == origin:
		return v.own
	case !slices.Contains(v.origins, origin):
		if v.bare.entries == nil {
			v.bare = v.g.batchFor("", v.named, false)
		}
		return v.bare
	}
	return v.g.batchFor(origin, v.named, false)
}

// batchFor returns the group's matched changes as the device origin
// receives them (own: as their writers do).
func (g *group) batchFor(origin string, named, own bool) liveBatch {
	b := liveBatch{entries: make([][]byte, 0, len(g.pend)), pos: make([]feed.Position, 0, len(g.pend))}
	for _, pc := range g.pend {
		o := origin
		if own {
			o = pc.c.Origin
		}
		if named {
			b.add(pc.enc.namedEntry(pc.c, o), pc.c.Pos)
		} else {
			b.add(pc.enc.entry(pc.c, o), pc.c.Pos)
		}
	}
	return b
}

// sameBytes reports whether a and b are the same slice (not just equal
// contents): whether a filter handed back the change's shared encoding.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// advance records that every change up to pos counts as dispatched without
// having been dispatched here (the tailer's start, a jump over changes every
// subscription replays, topics a bus starts delivering from pos): the
// engine's memory of recent changes no longer covers what came before.
func (h *hub) advance(pos feed.Position) {
	h.mu.Lock()
	h.e.cache.recent.reset(pos)
	h.mu.Unlock()
}

// desyncAll marks every subscription for a replay from its delivered cursor.
func (h *hub) desyncAll() {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, ri := range h.res {
		for _, g := range ri.groups {
			for _, s := range g.subs {
				s.desync()
			}
		}
	}
}

// followInterest makes a bus that delivers only what this node needs
// (feed.Interested) deliver every change of a followed resource, for good:
// the next syncInterest tells the bus.
func (h *hub) followInterest(s *feed.Schema) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.groupAdded(feed.Scope{Schema: s})
}

// concerned adds to out the live subscriptions of the named resource that
// rr concerns.
func (h *hub) concerned(name string, rr *resRecheck, out map[*subscription]struct{}) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	ri := h.res[name]
	if ri == nil {
		return
	}
	principals := map[string]bool{}
	for _, g := range ri.groups {
		every := rr.all
		clear(principals)
		for _, t := range rr.targets {
			if every {
				break
			}
			if !t.covers(g.scope) {
				continue
			}
			if !t.byPrincipal {
				every = true
			}
			principals[t.principal] = true
		}
		if !every && len(principals) == 0 {
			continue
		}
		for _, s := range g.subs {
			if every || principals[s.principal().ID] {
				out[s] = struct{}{}
			}
		}
	}
}
