package natsbus

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed"
)

// Reading: Tail plans each step under Bus.mu (plan), does its I/O without
// the lock, and commits the result in one short critical section that
// first checks the state it planned on has not moved (reposition,
// startReader, commit). A batch is committed only if the interest did not
// grow since its reader was built (interest.go), and de-duplicated by
// stream sequence and by position.

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
		p, err := b.plan(ctx, after)
		if err != nil {
			return nil, err
		}
		switch p.step {
		case stepWait:
			if p.old != nil {
				b.stopReader(p.old)
			}
			select {
			case <-p.kick:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case stepPosition:
			if err := b.reposition(ctx, after, p.cver); err != nil {
				return nil, err
			}
		case stepNewReader:
			if p.old != nil {
				b.stopReader(p.old)
			}
			if err := b.startReader(ctx, p); err != nil {
				return nil, err
			}
		case stepRead:
			if out, err := b.read(ctx, p, limit); err != nil || len(out) > 0 {
				return out, err
			}
		}
	}
}

// tailStep is what Tail does next.
type tailStep int

const (
	stepWait      tailStep = iota // no interest: stop the reader and wait for some
	stepPosition                  // find the stream sequence after which the changes after pos are
	stepNewReader                 // replace the reader by one for the current interest
	stepRead                      // read a batch from the reader
)

// tailPlan is Tail's next step and the state it was planned on.
type tailPlan struct {
	step tailStep
	gen  uint64                  // b.gen
	cver uint64                  // b.cver
	kick chan struct{}           // b.kick
	seq  uint64                  // b.seq
	rd   *reader                 // stepRead: the reader to read
	old  *reader                 // stepWait, stepNewReader: the reader taken out of use, to stop (nil if none)
	want map[feed.Topic]struct{} // stepNewReader: the interest to filter
}

// plan decides Tail's next step. A call with another `after` than the last
// position returned (the first call, or a resync from the feed's head)
// starts over: the stream is searched for `after` again.
func (b *Bus) plan(ctx context.Context, after feed.Position) (tailPlan, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return tailPlan{}, ErrClosed
	}
	if !b.started || after != b.pos {
		b.started, b.pos, b.kp, b.needPos = true, after, after, true
		b.covered = max(b.covered, after)
		b.cver++
		b.bumpLocked()
	}
	if err := ctx.Err(); err != nil {
		return tailPlan{}, err
	}
	p := tailPlan{gen: b.gen, cver: b.cver, kick: b.kick, seq: b.seq}
	switch {
	case len(b.want) == 0:
		p.step, p.old, b.rd = stepWait, b.rd, nil
	case b.needPos:
		p.step = stepPosition
	case b.rd == nil || b.rdGen != b.gen:
		p.step, p.old, b.rd = stepNewReader, b.rd, nil
		p.want = maps.Clone(b.want)
	default:
		p.step, p.rd = stepRead, b.rd
	}
	return p, nil
}

// startReader creates a reader of p's interest from the sequence after
// p.seq and makes it the current one, unless the interest moved meanwhile
// (Tail then plans again).
func (b *Bus) startReader(ctx context.Context, p tailPlan) error {
	rd, err := b.newReader(ctx, p.seq+1, p.want)
	if err != nil {
		return err
	}
	if !b.install(rd, p.gen) {
		b.stopReader(rd)
	}
	return nil
}

// install makes rd, built for gen, the current reader; false if gen moved
// or the bus closed.
func (b *Bus) install(rd *reader, gen uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen != gen || b.closed {
		return false
	}
	b.rd, b.rdGen = rd, gen
	return true
}

// read receives a batch from p.rd, checks it for retention loss and commits
// it. It returns no changes and no error when Tail must plan again: woken
// (the interest or the reader changed), idle, or nothing in the batch was
// for the node.
func (b *Bus) read(ctx context.Context, p tailPlan, limit int) ([]feed.Change, error) {
	batch, err := b.receive(ctx, p.rd, p.kick, limit)
	if err != nil {
		return nil, err
	}
	if len(batch) == 0 {
		if batch != nil {
			b.probe(ctx, p.rd, p.gen, p.seq) // idle for a while
		}
		return nil, nil
	}
	seqs, dseq, err := sequences(batch)
	if err != nil {
		return nil, b.abandon(p.rd, err)
	}
	dropped, err := b.droppedUnread(ctx, seqs, p.seq)
	if err != nil {
		// Unverified: read these messages again later.
		return nil, b.abandon(p.rd, err)
	}
	return b.commit(p, batch, seqs, dseq, dropped)
}

// receive waits for the reader's next messages and returns up to limit of
// them, ending at a commit boundary (wholeGroups); nil when kick fired or
// the reader failed (it is then replaced); an empty batch when nothing
// arrived for the idle-probe interval.
func (b *Bus) receive(ctx context.Context, rd *reader, kick <-chan struct{}, limit int) ([]jetstream.Msg, error) {
	batch, held := rd.held, len(rd.held)
	rd.held = nil
	if len(batch) > limit { // a smaller limit than the last read's
		batch, rd.held = batch[:limit:limit], batch[limit:]
	}
	if held == 0 {
		idle := time.NewTimer(b.opts.idleProbe)
		defer idle.Stop()
		select {
		case <-idle.C:
			return []jetstream.Msg{}, nil
		case m := <-rd.ch:
			batch = []jetstream.Msg{m}
		case err := <-rd.errc:
			b.failed(rd, err)
			return nil, nil
		case <-kick:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	batch = b.wholeGroups(ctx, rd, kick, drain(rd, batch, limit), limit)
	if batch == nil {
		return nil, ctx.Err()
	}
	b.stats.received.Add(int64(len(batch) + len(rd.held) - held))
	return batch, nil
}

// failed replaces a reader whose consumer failed.
func (b *Bus) failed(rd *reader, err error) {
	b.stats.readerFails.Add(1)
	b.log.Warn("natsbus: consumer failed; recreating it from the last message returned", "stream", b.opts.Stream, "err", err)
	b.retire(rd)
}

// sequences returns the stream sequence of each message of a batch and the
// consumer sequence of the last.
func sequences(batch []jetstream.Msg) (seqs []uint64, dseq uint64, err error) {
	seqs = make([]uint64, len(batch))
	for i, m := range batch {
		md, err := m.Metadata()
		if err != nil {
			return nil, 0, err
		}
		seqs[i], dseq = md.Sequence.Stream, md.Sequence.Consumer
	}
	return seqs, dseq, nil
}

// commit commits a batch of p's reader, unless the interest moved since p
// was planned (a reader with the new interest then reads it again from
// seq+1). If retention dropped unread messages or a message's chain started
// after kp, it returns feed.ErrCursorExpired.
func (b *Bus) commit(p tailPlan, batch []jetstream.Msg, seqs []uint64, dseq uint64, dropped bool) ([]feed.Change, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen != p.gen {
		return nil, nil
	}
	expired := dropped
	var out []feed.Change
	if !expired {
		out, expired = b.commitLocked(batch, seqs)
		p.rd.processed = dseq
	}
	if expired {
		b.expireLocked()
		b.bumpLocked()
		return nil, feed.ErrCursorExpired
	}
	b.stats.returned.Add(int64(len(out)))
	return out, nil
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
		meta, c, err := decodeMessage(m.Headers(), m.Data())
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
