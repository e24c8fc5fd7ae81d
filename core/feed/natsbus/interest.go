package natsbus

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/tidesync/tide/core/feed"
)

// Interest: the topics the node's subscriptions need, and the filter of the
// node's consumer.
//
// Consumer state (Bus.mu): `pos` is the last position Tail returned, which
// is the `after` of the engine's next call; `seq` is the stream sequence up
// to which every message of the node's interest has been seen; `covered` is
// the position of the message at `seq` (the last one seen, returned or
// skipped), at least pos; `kp` is a position such that every change of the
// node's interest at or below it has been returned or is covered by the
// subscriptions' replays. A reader (reader.go) is one ephemeral consumer,
// filtered to the interest, that starts at seq+1.
//
// The swap is gap-free: interest growth (AddInterest) bumps `gen` unless
// the current reader's filter already covers the new topics, and returns
// `covered`. Tail commits a batch (moves seq and pos and returns it) only
// under mu and only if gen has not moved since the batch's reader was built;
// otherwise it discards the batch and builds a reader with the new filter
// from seq+1 (tail.go). So every change Tail returns after AddInterest
// returned comes from a reader whose filter has the new topics and which
// started right after the last message seen: every change of a new topic
// above `covered` is returned. Those at or below it were returned, or
// skipped while nobody needed them; the engine pins the new subscription's
// high-water at `covered` or above, so its replay from the feed covers them
// (feed.Interested).

// AddInterest implements feed.Interested: it returns the position of the
// last message the node has seen, and every change of the topics above it
// is returned by Tail calls made after it returns. It does no I/O, except
// when the node had no interest at all: then it looks up the stream's last
// message, so the node's reader can start there instead of reading what
// arrived while nobody on the node listened (the engine replays it from
// the feed instead).
func (b *Bus) AddInterest(ctx context.Context, topics []feed.Topic) (feed.Position, error) {
	var ff *point
	if b.idle() {
		ff = b.lastPoint(ctx)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, ErrClosed
	}
	bump := len(b.want) == 0
	if ff != nil && len(b.want) == 0 && b.started && ff.seq >= b.seq {
		// Nobody on this node needed anything up to the stream's last
		// message; the new subscription replays up to its position.
		b.seq, b.needPos = ff.seq, false
		b.kp, b.covered = max(b.kp, ff.pos), max(b.covered, ff.pos)
		b.cver++
		b.stats.fastForward.Add(1)
	}
	for _, t := range topics {
		if _, ok := b.want[t]; ok {
			continue
		}
		b.want[t] = struct{}{}
		if t.All {
			b.wantRes[b.resPrefix(t.Resource)] = struct{}{}
		} else {
			b.wantSubj[subject(b.opts.Prefix, t.Resource, t.Tenant)] = struct{}{}
		}
		if b.rd == nil || b.rdGen != b.gen || !b.rd.covers(b, t) {
			bump = true
		}
	}
	if bump {
		b.bumpLocked()
	}
	return max(b.covered, b.pos), nil
}

// idle reports whether Tail has run while the node had no interest at all.
func (b *Bus) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.want) == 0 && b.started
}

// point is a place in the stream: a sequence and the position of the
// message there (0 if none).
type point struct {
	seq uint64
	pos feed.Position
}

// lastPoint returns the stream's last message, or nil if it cannot tell
// (errors, a message of another change log).
func (b *Bus) lastPoint(ctx context.Context) *point {
	info, err := b.info(ctx)
	if err != nil {
		return nil
	}
	st := info.State
	if st.Msgs == 0 {
		return &point{seq: st.LastSeq}
	}
	m, err := b.getMsg(ctx, st.LastSeq)
	if err != nil {
		return nil
	}
	meta, err := decodeMeta(m.Header)
	if err != nil || meta.Epoch != b.feed.Epoch() {
		return nil
	}
	return &point{seq: m.Sequence, pos: meta.Pos}
}

// DropInterest implements feed.Interested. The node's consumer keeps its
// filter until the interest next grows (messages of dropped topics are
// filtered locally meanwhile), or stops when no interest is left.
func (b *Bus) DropInterest(topics []feed.Topic) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range topics {
		delete(b.want, t)
	}
	clear(b.wantSubj)
	clear(b.wantRes)
	for t := range b.want {
		if t.All {
			b.wantRes[b.resPrefix(t.Resource)] = struct{}{}
		} else {
			b.wantSubj[subject(b.opts.Prefix, t.Resource, t.Tenant)] = struct{}{}
		}
	}
	if len(b.want) == 0 {
		b.bumpLocked()
	}
}

// interestedLocked reports whether a message subject is of a topic the node
// needs.
func (b *Bus) interestedLocked(subj string) bool {
	if _, ok := b.wantSubj[subj]; ok {
		return true
	}
	i := strings.LastIndexByte(subj, '.')
	if i < 0 {
		return false
	}
	_, ok := b.wantRes[subj[:i+1]]
	return ok
}

// resPrefix returns "<prefix>.change.<resource>.", the start of the
// subjects of every tenant of a resource.
func (b *Bus) resPrefix(resource string) string {
	return b.opts.Prefix + ".change." + token(resource) + "."
}

// bumpLocked invalidates the current reader and wakes Tail.
func (b *Bus) bumpLocked() {
	b.gen++
	close(b.kick)
	b.kick = make(chan struct{})
}

// filterFor returns the filter subjects for an interest: exact subjects,
// "<resource>.*" for whole resources, collapsed to fit MaxFilterSubjects
// and what the server supports (one filter subject before nats-server
// 2.10; the node then filters the rest itself).
func (b *Bus) filterFor(want map[feed.Topic]struct{}) []string {
	byRes := map[string][]string{} // resource → tenant subjects; nil slice with key present means whole
	whole := map[string]bool{}
	for t := range want {
		if t.All {
			whole[t.Resource] = true
		} else {
			byRes[t.Resource] = append(byRes[t.Resource], subject(b.opts.Prefix, t.Resource, t.Tenant))
		}
	}
	for r := range whole {
		byRes[r] = nil
	}
	resources := slices.Sorted(maps.Keys(byRes))
	count := func() int {
		n := 0
		for _, r := range resources {
			n += max(1, len(byRes[r]))
		}
		return n
	}
	limit := b.opts.MaxFilterSubjects
	if !b.supportsMultiFilter() {
		limit = 1
	}
	// Collapse the resources with the most tenants first.
	byCount := slices.Clone(resources)
	slices.SortStableFunc(byCount, func(x, y string) int { return cmp.Compare(len(byRes[y]), len(byRes[x])) })
	for _, r := range byCount {
		if count() <= limit {
			break
		}
		whole[r], byRes[r] = true, nil
	}
	if count() > limit {
		return []string{b.all}
	}
	var out []string
	for _, r := range resources {
		if whole[r] {
			out = append(out, resourceSubject(b.opts.Prefix, r))
		} else {
			s := byRes[r]
			slices.Sort(s)
			out = append(out, slices.Compact(s)...)
		}
	}
	return out
}
