package natsbus

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed"
)

// Fallback to the feed: when the stream no longer holds (or never held)
// every change of the node's interest after the position Tail was asked
// for, Tail returns feed.ErrCursorExpired, and the engine replays every
// subscription from Postgres and calls Tail again from the feed's head.
//
// Loss is detected in three ways: a delivery gap of the consumer (its
// consumer sequence skips: a disconnect lost messages in flight) rebuilds
// the reader from seq+1 (reader.go); a stream-sequence jump past messages
// the filter did not match is checked against the stream's first sequence
// (retention removes the oldest messages first, so if the first sequence is
// at most seq+1 nothing after seq was removed), else ErrCursorExpired; and
// a message whose chain started after kp (msgMeta.Base > kp: the stream was
// empty or had to restart past the feed's retention, so changes after kp
// may never have been published) yields ErrCursorExpired.

// expireLocked records that Tail returns feed.ErrCursorExpired: its next
// call starts over from the position it is given.
func (b *Bus) expireLocked() {
	b.stats.expired.Add(1)
	b.started = false
}

// reposition finds where in the stream the changes after `after` start and
// moves seq there, unless seq was moved meanwhile (cver is the b.cver Tail
// planned with; it then plans again).
func (b *Bus) reposition(ctx context.Context, after feed.Position, cver uint64) error {
	seq, err := b.position(ctx, after)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cver != cver {
		return nil
	}
	if err != nil {
		if errors.Is(err, feed.ErrCursorExpired) {
			b.expireLocked()
		}
		return err
	}
	b.seq, b.needPos = seq, false
	b.cver++
	b.bumpLocked()
	return nil
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
	posOf := func(m *jetstream.RawStreamMsg) (msgMeta, bool) {
		meta, err := decodeMeta(m.Header)
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

// droppedUnread reports whether retention removed messages the node had
// not seen: seqs (a batch read after seq) jump, and the stream's first
// sequence is past the jump. A jump over messages the filter did not match
// is no loss.
func (b *Bus) droppedUnread(ctx context.Context, seqs []uint64, seq uint64) (bool, error) {
	from, jumped := firstJump(seqs, seq)
	if !jumped {
		return false, nil
	}
	first, err := b.firstSeq(ctx)
	if err != nil {
		return false, err
	}
	return first > from+1, nil
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

// firstSeq returns the stream's first sequence (a retention check).
func (b *Bus) firstSeq(ctx context.Context) (uint64, error) {
	b.stats.checks.Add(1)
	info, err := b.info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.FirstSeq, nil
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
	meta, err := decodeMeta(m.Header)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen == gen && b.seq == seq && b.rd == rd && len(rd.ch) == 0 && ci.Delivered.Consumer == rd.processed {
		b.seq, b.covered = last, max(b.covered, meta.Pos)
	}
}
