package core

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/text"
)

// target is one resource of a subscription and its scope. A subscription
// follows one or more of them under one cursor: a subscription of several
// resources (say the todos, comments and attachments of a project) gets
// their changes in one commit-ordered stream, each entry naming its
// resource, and the changes of one commit in one frame.
type target struct {
	res   *resource
	scope feed.Scope
}

// targets are a subscription's resources, sorted by name, without
// duplicates.
type targets []target

// multi reports whether entries must name their resource: the
// subscription has several.
func (ts targets) multi() bool { return len(ts) > 1 }

// followGen sums the targets' resources' follow counters (follower.go): it
// moves when any of them does.
func (ts targets) followGen() uint64 {
	var n uint64
	for _, t := range ts {
		n += t.res.followGen.Load()
	}
	return n
}

// of returns the target of resource name, or nil.
func (ts targets) of(name string) *target {
	for i := range ts {
		if ts[i].scope.Schema.Name == name {
			return &ts[i]
		}
	}
	return nil
}

// index returns the position of resource name in ts, or -1.
func (ts targets) index(name string) int {
	for i := range ts {
		if ts[i].scope.Schema.Name == name {
			return i
		}
	}
	return -1
}

// scopes returns the subscription's targets: its one scope when it was
// made without a list.
func (s *subscription) scopes() targets {
	if len(s.targets) == 0 {
		return targets{{s.res, s.scope}}
	}
	return s.targets
}

// key identifies the subscription's scopes: subscriptions with equal keys
// share a fan-out group. A single scope keeps its own key.
func (ts targets) key() string {
	if len(ts) == 1 {
		return ts[0].scope.Key()
	}
	keys := make([]string, len(ts))
	for i, t := range ts {
		keys[i] = t.scope.Key()
	}
	return strings.Join(keys, " + ")
}

// match reports whether c is in one of the scopes.
func (ts targets) match(c *feed.Change) bool {
	t := ts.of(c.Resource)
	return t != nil && t.scope.Match(c.Scope)
}

// authorize runs every resource's own policy; the first that denies
// refuses the whole subscription, its error naming the resource.
func (ts targets) authorize(ctx context.Context, p authz.Principal) error {
	for _, t := range ts {
		if err := t.res.authorize(ctx, p, t.scope); err != nil {
			return err
		}
	}
	return nil
}

// checkCapture checks that the feed records every resource's changes.
func (e *Engine) checkCaptures(ctx context.Context, ts targets) error {
	for _, t := range ts {
		if err := e.checkCapture(ctx, t.res); err != nil {
			return err
		}
	}
	return nil
}

// parseTargets resolves the resources a subscribe names (resource alone, or
// the list resources) and parses the conditions against each: every
// resource must have the scope columns the conditions name, with the same
// kinds.
func (e *Engine) parseTargets(resource string, resources []string, conds map[string]json.RawMessage) (targets, *protocol.Error) {
	if len(resources) == 0 {
		resources = []string{resource}
	} else if err := protocol.CheckResources(resource, resources); err != nil {
		return nil, err
	}
	ts := make(targets, 0, len(resources))
	for _, name := range resources {
		r := e.resource(name)
		if r == nil {
			return nil, protocol.Errorf(protocol.CodeUnknownResource, "no resource %q", text.Truncate(name, 64))
		}
		if len(conds) > protocol.MaxConditionsN {
			return nil, protocol.Errorf(protocol.CodeTooManyConditions, "at most %d conditions", protocol.MaxConditionsN)
		}
		scope, err := parseConditions(r.schema, conds, e.cfg.MaxConditions, e.cfg.MaxConditionValues)
		if err != nil {
			if len(resources) > 1 {
				err = protocol.Errorf(err.Code, "%s: %s", r.schema.Name, err.Message)
			}
			return nil, err
		}
		ts = append(ts, target{res: r, scope: scope})
	}
	slices.SortFunc(ts, func(a, b target) int { return cmp.Compare(a.res.schema.Name, b.res.schema.Name) })
	return ts, nil
}

// A snapshot cursor of a subscription of several resources says which
// resource the snapshot is in: After is the resource's name, then, once a
// row of it was delivered, a NUL byte and the key of that row. Resource
// names never hold a NUL.

// multiAfter encodes a snapshot position of a subscription of several
// resources.
func multiAfter(resource, key string, hasKey bool) string {
	if !hasKey {
		return resource
	}
	return resource + "\x00" + key
}

// parseMultiAfter decodes multiAfter's encoding against ts: the index of
// the resource and the key after which its snapshot continues. A resource
// that is not one of ts is an invalid cursor.
func parseMultiAfter(ts targets, after string) (i int, key string, hasKey bool, ok bool) {
	name, key, hasKey := strings.Cut(after, "\x00")
	i = ts.index(name)
	return i, key, hasKey, i >= 0
}

// mergedReplay reads the changes of every target in (after, until], at
// most limit of each, and merges them in position order: the changes up to
// the lowest position every read got to (next), which are all the
// subscription's changes in (after, next]. Each resource is read as a
// single-resource subscription reads it (sharing reads with those), the
// resources at the same time.
func (e *Engine) mergedReplay(ctx context.Context, ts targets, after, until feed.Position, limit int) ([]feed.Change, feed.Position, bool, error) {
	reads := make([]replaySlice, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reads[i], errs[i] = e.sharedReplay(ctx, feed.ReplayQuery{Scope: t.scope, After: after, Until: until, Limit: limit})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, feed.ErrCursorExpired) {
			return nil, 0, false, feed.ErrCursorExpired
		}
		return nil, 0, false, err
	}
	next, done := until, true
	for _, sl := range reads {
		next = min(next, sl.next)
		done = done && sl.done
	}
	var out []feed.Change
	for _, sl := range reads {
		for _, c := range sl.changes {
			if c.Pos > next {
				break
			}
			out = append(out, c)
		}
	}
	sortByPos(out)
	return out, next, done, nil
}

func sortByPos(cs []feed.Change) {
	slices.SortFunc(cs, func(a, b feed.Change) int { return cmp.Compare(a.Pos, b.Pos) })
}

// multiReplay reads the next changes of a subscription of several
// resources in (after, until]: about limit of each resource, ending at a
// commit boundary, so a client never holds part of a transaction. A read
// that ends inside a commit group leaves that group to the next read; a
// group larger than the read is read on and returned whole (up to
// maxCommitGroup changes). Every change of the subscription up to next has
// been returned; done says nothing is left up to until.
func (e *Engine) multiReplay(ctx context.Context, ts targets, p authz.Principal, after, until feed.Position, limit int) ([]feed.Change, feed.Position, bool, error) {
	release, err := e.acquireCatchUp(ctx, p)
	if err != nil {
		return nil, 0, false, err
	}
	defer release()
	var changes []feed.Change
	for at := after; ; {
		more, next, done, err := e.mergedReplay(ctx, ts, at, until, limit)
		if err != nil {
			return nil, 0, false, err
		}
		changes = append(changes, more...)
		if done || len(changes) == 0 {
			return changes, next, done, nil
		}
		switch cut := commitCut(changes); {
		case cut == 0 && len(changes) < maxCommitGroup && next > at:
			at = next // one group fills the read: read on
			continue
		case cut > 0 && cut < len(changes):
			// The trailing group may go on after next.
			return changes[:cut], changes[cut].Pos - 1, false, nil
		}
		return changes, next, false, nil
	}
}

// multiPage encodes changes (read by multiReplay, after the position
// after) as a page for p on the device origin, each entry naming its
// resource.
func multiPage(ts targets, p authz.Principal, origin string, changes []feed.Change, after feed.Position) page {
	pg := newPage(changes)
	pg.last = after
	for i := range changes {
		c := &changes[i]
		pg.addChange(ts.of(c.Resource).res, p, origin, c, nil, false, true)
		pg.last = c.Pos
	}
	return pg
}

// multiReplayPage is replayPage for a subscription of several resources
// (the polling route): the first page of at most limit changes (more for a
// larger commit group) of what multiReplay reads.
func (e *Engine) multiReplayPage(ctx context.Context, ts targets, p authz.Principal, origin string, after, until feed.Position, limit int) (page, error) {
	changes, next, done, err := e.multiReplay(ctx, ts, p, after, until, limit)
	if err != nil {
		return page{}, err
	}
	if n := pageEnd(changes, limit); n < len(changes) {
		changes, next, done = changes[:n], changes[n-1].Pos, false
	}
	pg := multiPage(ts, p, origin, changes, after)
	pg.next, pg.done = next, done
	return pg, nil
}

// pageEnd returns how many of changes (read from memory, in position
// order) the next page of a subscription of several resources takes: up to
// limit, ending at a commit boundary; a group larger than limit whole.
func pageEnd(changes []feed.Change, limit int) int {
	n := min(len(changes), limit)
	if n == len(changes) {
		return n
	}
	for end := n; end > 0; end-- {
		if !feed.SameCommit(&changes[end-1], &changes[end]) {
			return end
		}
	}
	for n < len(changes) && n < maxCommitGroup && feed.SameCommit(&changes[n-1], &changes[n]) {
		n++
	}
	return n
}

// flushMulti is flush for a group of several resources: entries name their
// resource, and each resource's row filter decides on its own changes.
// Every subscription gets all its changes of the dispatched batch, of every
// resource, in one batch, so a commit's changes leave in one frame.
func (g *group) flushMulti(kicks *[]*conn) {
	v := g.views(true)
	filtered := false
	for _, pc := range g.pend {
		filtered = filtered || g.targets.of(pc.c.Resource).res.perPrincipal()
	}
	if !filtered {
		for _, s := range g.subs {
			s.push(v.of(s.c.origin), kicks)
		}
		return
	}
	for _, s := range g.subs {
		p, origin := s.principal(), s.c.origin
		base := v.of(origin)
		var b liveBatch
		same := true
		for i, pc := range g.pend {
			e := base.entries[i]
			if r := g.targets.of(pc.c.Resource).res; r.perPrincipal() {
				if seen := r.entryFor(p, origin, pc.c, pc.enc); !sameBytes(seen, pc.enc.entry(pc.c, origin)) {
					e = nil
					if seen != nil {
						e = pc.enc.namedFor(seen, pc.c.Resource)
					}
				}
			}
			same = same && sameBytes(e, base.entries[i])
			if e != nil {
				b.add(e, pc.c.Pos)
			}
		}
		if same {
			s.push(base, kicks)
		} else if b.len() > 0 {
			s.push(b, kicks)
		}
	}
}

// namedEntry returns a copy of entry naming its resource (entries are
// shared: never appended to in place).
func namedEntry(entry []byte, resource string) []byte {
	b := make([]byte, 0, len(entry)+len(resource)+16)
	return appendResource(append(b, entry...), resource)
}

// readMulti reads the replay of a subscription of several resources in
// (from, until] and hands it to send in pages of at most s.limit changes
// (more for a larger commit group), each ending at a commit boundary. It
// stops at the end, at an error (handed to send), or when send returns
// false.
func (s *subscription) readMulti(ctx context.Context, from, until feed.Position, send func(page, error) bool) {
	for after := from; ; {
		changes, next, done, err := s.c.e.multiReplay(ctx, s.targets, s.principal(), after, until, s.limit)
		if err != nil {
			send(page{}, err)
			return
		}
		for len(changes) > 0 {
			n := pageEnd(changes, s.limit)
			if !send(multiPage(s.targets, s.principal(), s.c.origin, changes[:n], after), nil) {
				return
			}
			after, changes = changes[n-1].Pos, changes[n:]
		}
		if done {
			return
		}
		after = next
	}
}
