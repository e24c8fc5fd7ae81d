package natsbus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed"
)

// The consumer side.
//
// State (Bus.mu): `pos` is the last position Tail returned, which is the
// `after` of the engine's next call; `seq` is the stream sequence up to
// which every message of the node's interest has been seen; `covered` is
// the position of the message at `seq` (the last one seen, returned or
// skipped), at least pos; `kp` is a position such that every change of the
// node's interest at or below it has been returned or is covered by the
// subscriptions' replays. A reader is one ephemeral consumer, filtered to
// the interest, that starts at seq+1.
//
// Interest growth (AddInterest) bumps `gen` unless the current reader's
// filter already covers the new topics, and returns `covered`. Tail commits
// a batch (moves seq and pos and returns it) only under mu and only if gen
// has not moved since the batch's reader was built; otherwise it discards
// the batch and builds a reader with the new filter from seq+1. So every
// change Tail returns after AddInterest returned comes from a reader whose
// filter has the new topics and which started right after the last message
// seen: every change of a new topic above `covered` is returned. Those at or
// below it were returned, or skipped while nobody needed them; the engine
// pins the new subscription's high-water at `covered` or above, so its
// replay from the feed covers them (feed.Interested).
//
// Loss is detected in three ways: a delivery gap of the consumer (its
// consumer sequence skips: a disconnect lost messages in flight) rebuilds
// the reader from seq+1; a stream-sequence jump past messages the filter did
// not match is checked against the stream's first sequence (retention
// removes the oldest messages first, so if the first sequence is at most
// seq+1 nothing after seq was removed), else ErrCursorExpired; and a message
// whose chain started after kp (Meta.Base > kp: the stream was empty or had
// to restart past the feed's retention, so changes after kp may never have
// been published) yields ErrCursorExpired.

// reader is one ephemeral consumer and the channel its messages arrive on.
type reader struct {
	cons  jetstream.Consumer
	cc    jetstream.ConsumeContext
	ch    chan jetstream.Msg
	errc  chan error
	done  chan struct{}
	stop  atomic.Bool
	all   bool                // the filter is "<prefix>.change.>"
	exact map[string]struct{} // exact subjects in the filter
	res   map[string]struct{} // "<prefix>.change.<resource>." of "<resource>.*" filters

	lastDseq  uint64 // consumer sequence of the last delivery; only the handler touches it
	processed uint64 // consumer sequence of the last message Tail committed (Bus.mu)
}

func (r *reader) handle(m jetstream.Msg) {
	if r.stop.Load() {
		return
	}
	md, err := m.Metadata()
	if err != nil {
		r.fail(err)
		return
	}
	if md.Sequence.Consumer != r.lastDseq+1 {
		r.fail(fmt.Errorf("natsbus: consumer delivery gap: %d after %d", md.Sequence.Consumer, r.lastDseq))
		return
	}
	r.lastDseq = md.Sequence.Consumer
	select {
	case r.ch <- m:
	case <-r.done:
	}
}

func (r *reader) fail(err error) {
	r.stop.Store(true)
	select {
	case r.errc <- err:
	default:
	}
}

// covers reports whether the reader's filter delivers topic t.
func (r *reader) covers(b *Bus, t feed.Topic) bool {
	if r.all {
		return true
	}
	if _, ok := r.res[b.resPrefix(t.Resource)]; ok {
		return true
	}
	if t.All {
		return false
	}
	_, ok := r.exact[Subject(b.opts.Prefix, t.Resource, t.Tenant)]
	return ok
}

func (b *Bus) resPrefix(resource string) string {
	return b.opts.Prefix + ".change." + Token(resource) + "."
}

// bumpLocked invalidates the current reader and wakes Tail.
func (b *Bus) bumpLocked() {
	b.gen++
	close(b.kick)
	b.kick = make(chan struct{})
}

// AddInterest implements feed.Interested: it returns the position of the
// last message the node has seen, and every change of the topics above it
// is returned by Tail calls made after it returns. It does no I/O, except
// when the node had no interest at all: then it looks up the stream's last
// message, so the node's reader can start there instead of reading what
// arrived while nobody on the node listened (the engine replays it from
// the feed instead).
func (b *Bus) AddInterest(ctx context.Context, topics []feed.Topic) (feed.Position, error) {
	b.mu.Lock()
	idle := len(b.want) == 0 && b.started
	b.mu.Unlock()
	var ff *point
	if idle {
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
			b.wantSubj[Subject(b.opts.Prefix, t.Resource, t.Tenant)] = struct{}{}
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
			b.wantSubj[Subject(b.opts.Prefix, t.Resource, t.Tenant)] = struct{}{}
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

// Tail implements feed.Bus: it returns up to limit changes after `after`
// of the topics the node is interested in, in position order, blocking
// until there is at least one. It returns feed.ErrCursorExpired when the
// stream no longer holds (or never held) every such change after `after`;
// the engine then resyncs from the feed and calls Tail from the feed's head.
func (b *Bus) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("natsbus: Tail limit must be positive, got %d", limit)
	}
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, ErrClosed
		}
		if !b.started || after != b.pos {
			// First call, or a resync from the feed's head.
			b.started, b.pos, b.kp, b.needPos = true, after, after, true
			b.covered = max(b.covered, after)
			b.cver++
			b.bumpLocked()
		}
		if err := ctx.Err(); err != nil {
			b.mu.Unlock()
			return nil, err
		}
		if len(b.want) == 0 {
			rd, kick := b.rd, b.kick
			b.rd = nil
			b.mu.Unlock()
			if rd != nil {
				b.stopReader(rd)
			}
			select {
			case <-kick:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		gen, cver, kick := b.gen, b.cver, b.kick
		if b.needPos {
			b.mu.Unlock()
			seq, err := b.position(ctx, after)
			b.mu.Lock()
			if b.cver != cver {
				b.mu.Unlock()
				continue
			}
			if err != nil {
				if errors.Is(err, feed.ErrCursorExpired) {
					b.stats.expired.Add(1)
					b.started = false
				}
				b.mu.Unlock()
				return nil, err
			}
			b.seq, b.needPos = seq, false
			b.cver++
			b.bumpLocked()
			b.mu.Unlock()
			continue
		}
		rd := b.rd
		if rd == nil || b.rdGen != gen {
			want, start := maps.Clone(b.want), b.seq+1
			b.rd = nil
			b.mu.Unlock()
			if rd != nil {
				b.stopReader(rd)
			}
			nrd, err := b.newReader(ctx, start, want)
			if err != nil {
				return nil, err
			}
			b.mu.Lock()
			if b.gen != gen || b.closed {
				b.mu.Unlock()
				b.stopReader(nrd)
				continue
			}
			b.rd, b.rdGen, rd = nrd, gen, nrd
		}
		seq := b.seq
		b.mu.Unlock()

		batch, err := b.receive(ctx, rd, kick, limit)
		if err != nil {
			return nil, err
		}
		if len(batch) == 0 {
			if batch != nil {
				b.probe(ctx, rd, gen, seq) // idle for a while
			}
			continue // woken: the interest or the reader changed
		}
		seqs := make([]uint64, len(batch))
		var dseq uint64
		for i, m := range batch {
			md, err := m.Metadata()
			if err != nil {
				return nil, b.abandon(rd, err)
			}
			seqs[i], dseq = md.Sequence.Stream, md.Sequence.Consumer
		}
		expired := false
		if from, jumped := firstJump(seqs, seq); jumped {
			first, err := b.firstSeq(ctx)
			if err != nil {
				// Unverified: read these messages again later.
				return nil, b.abandon(rd, err)
			}
			expired = first > from+1
		}
		b.mu.Lock()
		if b.gen != gen {
			b.mu.Unlock()
			continue // a reader with the new interest re-reads from seq+1
		}
		var out []feed.Change
		if !expired {
			out, expired = b.commitLocked(batch, seqs)
			rd.processed = dseq
		}
		if expired {
			b.stats.expired.Add(1)
			b.started = false
			b.bumpLocked()
			b.mu.Unlock()
			return nil, feed.ErrCursorExpired
		}
		b.mu.Unlock()
		if len(out) > 0 {
			b.stats.returned.Add(int64(len(out)))
			return out, nil
		}
	}
}

// receive waits for the reader's next messages and returns up to limit of
// them; nil when kick fired or the reader failed (it is then replaced); an
// empty batch when nothing arrived for the idle-probe interval.
func (b *Bus) receive(ctx context.Context, rd *reader, kick <-chan struct{}, limit int) ([]jetstream.Msg, error) {
	idle := time.NewTimer(b.opts.idleProbe)
	defer idle.Stop()
	select {
	case <-idle.C:
		return []jetstream.Msg{}, nil
	case m := <-rd.ch:
		batch := []jetstream.Msg{m}
		for len(batch) < limit {
			select {
			case m := <-rd.ch:
				batch = append(batch, m)
				continue
			default:
			}
			break
		}
		b.stats.received.Add(int64(len(batch)))
		return batch, nil
	case err := <-rd.errc:
		b.stats.readerFails.Add(1)
		b.log.Warn("natsbus: consumer failed; recreating it from the last message returned", "stream", b.opts.Stream, "err", err)
		b.mu.Lock()
		if b.rd == rd {
			b.bumpLocked()
		}
		b.mu.Unlock()
		return nil, nil
	case <-kick:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// abandon replaces rd (its undelivered messages are read again by the next
// reader) and returns err.
func (b *Bus) abandon(rd *reader, err error) error {
	b.stats.readerFails.Add(1)
	b.mu.Lock()
	if b.rd == rd {
		b.bumpLocked()
	}
	b.mu.Unlock()
	return fmt.Errorf("natsbus: %w", err)
}

// probe moves seq forward while the node's topics are quiet, so that a
// message arriving after a long silence is not mistaken for one after a
// retention gap. If the consumer has nothing pending after the stream's
// last sequence L was read, Tail has committed everything it delivered, and
// afterwards the stream's first sequence is still at most seq+1 (retention
// removed nothing unseen), then every message of the filter up to L has
// been seen.
func (b *Bus) probe(ctx context.Context, rd *reader, gen, seq uint64) {
	before, err := b.info(ctx)
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	ci, err := rd.cons.Info(cctx)
	if err != nil {
		return
	}
	after, err := b.info(ctx)
	if err != nil {
		return
	}
	b.stats.probes.Add(1)
	last := before.State.LastSeq
	if last <= seq || ci.NumPending != 0 || after.State.FirstSeq > seq+1 {
		return
	}
	m, err := b.getMsg(ctx, last)
	if err != nil || m.Sequence != last {
		return
	}
	meta, err := DecodeMeta(m.Header)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen == gen && b.seq == seq && b.rd == rd && len(rd.ch) == 0 && ci.Delivered.Consumer == rd.processed {
		b.seq, b.covered = last, max(b.covered, meta.Pos)
	}
}

// firstJump returns the sequence before the first message of seqs that
// does not directly follow its predecessor (starting after seq).
func firstJump(seqs []uint64, seq uint64) (uint64, bool) {
	prev := seq
	for _, s := range seqs {
		if s <= prev {
			continue
		}
		if s != prev+1 {
			return prev, true
		}
		prev = s
	}
	return 0, false
}

// commitLocked turns a verified batch into the changes to return, moving
// seq, pos and kp. It reports expired if a message's chain started after
// kp.
func (b *Bus) commitLocked(batch []jetstream.Msg, seqs []uint64) ([]feed.Change, bool) {
	epoch := b.feed.Epoch()
	seq, pos, kp, covered := b.seq, b.pos, b.kp, b.covered
	var out []feed.Change
	for i, m := range batch {
		if seqs[i] <= seq {
			continue // delivered again
		}
		seq = seqs[i]
		if p, err := strconv.ParseUint(m.Headers().Get(HeaderPos), 10, 64); err == nil {
			covered = max(covered, feed.Position(p))
		}
		if !b.interestedLocked(m.Subject()) {
			b.stats.filtered.Add(1)
			continue
		}
		meta, c, err := DecodeMessage(m.Headers(), m.Data())
		if err != nil {
			b.stats.invalid.Add(1)
			b.log.Error("natsbus: skipping a message that is not a tide change", "stream", b.opts.Stream, "seq", seqs[i], "subject", m.Subject(), "err", err)
			continue
		}
		if meta.Epoch != epoch {
			b.stats.foreign.Add(1)
			continue
		}
		if c.Pos <= pos {
			b.stats.old.Add(1)
			continue
		}
		if meta.Base > kp {
			return nil, true
		}
		out = append(out, c)
		pos, kp = c.Pos, max(kp, c.Pos)
	}
	b.seq, b.pos, b.kp, b.covered = seq, pos, kp, max(covered, pos)
	return out, false
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
	meta, err := DecodeMeta(m.Header)
	if err != nil || meta.Epoch != b.feed.Epoch() {
		return nil
	}
	return &point{seq: m.Sequence, pos: meta.Pos}
}

// position returns the sequence after which the first message with a
// position above `after` is, checking that the stream holds every change
// after `after` from there (feed.ErrCursorExpired otherwise). It binary
// searches the stream, reading one message's headers per step.
func (b *Bus) position(ctx context.Context, after feed.Position) (uint64, error) {
	b.stats.positions.Add(1)
	info, err := b.info(ctx)
	if err != nil {
		return 0, err
	}
	st := info.State
	if st.Msgs == 0 {
		return st.LastSeq, nil
	}
	epoch := b.feed.Epoch()
	posOf := func(m *jetstream.RawStreamMsg) (Meta, bool) {
		meta, err := DecodeMeta(m.Header)
		return meta, err == nil && meta.Epoch == epoch
	}
	// Smallest s in [lo, hi) whose next message is past `after`.
	lo, hi := st.FirstSeq, st.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := b.getMsg(ctx, mid)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			hi = mid
			continue
		}
		if err != nil {
			return 0, err
		}
		if meta, ok := posOf(m); ok && meta.Pos > after {
			hi = mid
		} else {
			lo = max(mid, m.Sequence) + 1
		}
	}
	if lo > st.LastSeq {
		return st.LastSeq, nil // nothing after `after` yet
	}
	m, err := b.getMsg(ctx, lo)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return st.LastSeq, nil
	}
	if err != nil {
		return 0, err
	}
	meta, ok := posOf(m)
	if !ok || meta.Prev > after || meta.Base > after {
		// Changes in (after, Prev] were in messages the stream dropped, or
		// were never published (the chain starts after `after`).
		return 0, feed.ErrCursorExpired
	}
	return m.Sequence - 1, nil
}

func (b *Bus) info(ctx context.Context) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	info, err := b.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("natsbus: stream %s info: %w", b.opts.Stream, err)
	}
	return info, nil
}

// getMsg returns the first message at or after seq.
func (b *Bus) getMsg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	return b.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(b.all))
}

func (b *Bus) firstSeq(ctx context.Context) (uint64, error) {
	b.stats.checks.Add(1)
	info, err := b.info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.FirstSeq, nil
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
			byRes[t.Resource] = append(byRes[t.Resource], Subject(b.opts.Prefix, t.Resource, t.Tenant))
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
			out = append(out, ResourceSubject(b.opts.Prefix, r))
		} else {
			s := byRes[r]
			slices.Sort(s)
			out = append(out, slices.Compact(s)...)
		}
	}
	return out
}

// newReader creates an ephemeral consumer of the interest starting at
// stream sequence start, and starts consuming it.
func (b *Bus) newReader(ctx context.Context, start uint64, want map[feed.Topic]struct{}) (*reader, error) {
	subjects := b.filterFor(want)
	r := &reader{
		ch:    make(chan jetstream.Msg, b.opts.Prefetch),
		errc:  make(chan error, 1),
		done:  make(chan struct{}),
		exact: map[string]struct{}{},
		res:   map[string]struct{}{},
	}
	for _, s := range subjects {
		switch {
		case s == b.all:
			r.all = true
		case strings.HasSuffix(s, ".*"):
			r.res[strings.TrimSuffix(s, "*")] = struct{}{}
		default:
			r.exact[s] = struct{}{}
		}
	}
	cfg := jetstream.ConsumerConfig{
		Description:       "tide node",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       max(start, 1),
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: max(time.Minute, 4*b.opts.Heartbeat),
	}
	if len(subjects) == 1 {
		cfg.FilterSubject = subjects[0]
	} else {
		cfg.FilterSubjects = subjects
	}
	cctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	cons, err := b.stream.CreateConsumer(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("natsbus: create consumer: %w", err)
	}
	r.cons = cons
	r.cc, err = cons.Consume(r.handle,
		jetstream.PullMaxMessages(b.opts.Prefetch),
		jetstream.PullHeartbeat(b.opts.Heartbeat),
		jetstream.PullExpiry(max(30*time.Second, 4*b.opts.Heartbeat)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { r.fail(err) }),
	)
	if err != nil {
		b.deleteConsumer(cons)
		return nil, fmt.Errorf("natsbus: consume: %w", err)
	}
	b.stats.readers.Add(1)
	return r, nil
}

// stopReader stops a reader and deletes its consumer in the background.
func (b *Bus) stopReader(r *reader) {
	r.stop.Store(true)
	close(r.done)
	r.cc.Stop()
	b.deleteConsumer(r.cons)
}

func (b *Bus) deleteConsumer(cons jetstream.Consumer) {
	name := cons.CachedInfo().Name
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.RequestTimeout)
		defer cancel()
		_ = b.stream.DeleteConsumer(ctx, name) // else the server drops it when inactive
	}()
}
