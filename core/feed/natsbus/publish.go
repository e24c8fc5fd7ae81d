package natsbus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// The publisher side, used by the one elected replicator.
//
// Every publish carries Nats-Expected-Last-Sequence: the stream stores a
// message only if its last sequence is the one this publisher stored (or
// found) last. So a failed or lost publish can never be followed by a
// stored later one (no hole), and a leader that lost the election while a
// new one publishes is refused at its next publish (a fence) instead of
// interleaving. Nats-Msg-Id ("<epoch>.<pos>") de-duplicates what slips
// through within the Duplicates window.

type pubState struct {
	resumed bool
	epoch   string
	prev    feed.Position // position of the last change in the chain
	base    feed.Position // the chain's base
	last    uint64        // the stream's last sequence as this publisher knows it
}

// ErrFenced is wrapped by Publish's error when the stream moved under the
// publisher (another leader published): call Resume again.
var ErrFenced = errors.New("natsbus: the stream moved under this publisher (another replicator published)")

// Resume starts a publishing term for the change log with this epoch. It
// reads the stream's last message and returns its position: the leader
// publishes the changes after it. If the stream is empty, its last message
// is of another epoch, or fresh is set (the feed no longer retains the
// changes after the last published one), it starts a new chain after head
// and returns head; nodes whose knowledge is older resync from Postgres.
func (b *Bus) Resume(ctx context.Context, epoch string, head feed.Position, fresh bool) (feed.Position, error) {
	if !protocol.ValidEpoch(epoch) {
		return 0, fmt.Errorf("natsbus: Resume: invalid epoch %q", epoch)
	}
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	b.pub.resumed = false
	info, err := b.info(ctx)
	if err != nil {
		return 0, err
	}
	st := info.State
	p := pubState{resumed: true, epoch: epoch, prev: head, base: head, last: st.LastSeq}
	if st.Msgs > 0 && !fresh {
		m, err := b.getMsg(ctx, st.LastSeq)
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, err
		}
		if err == nil {
			if meta, merr := decodeMeta(m.Header); merr == nil && meta.Epoch == epoch {
				p.prev, p.base, p.last = meta.Pos, meta.Base, m.Sequence
			}
		}
	}
	if p.prev == head && p.base == head {
		b.log.Info("natsbus: starting a new chain", "stream", b.opts.Stream, "after", head, "fresh", fresh)
	}
	b.pub = p
	return p.prev, nil
}

// Publish publishes changes, in position order and each after the last
// published, pipelining the acknowledgements. changes should end at a
// commit boundary (feed.TailCommits): each message says how many changes
// of its group follow it in changes, and nodes deliver a group together. It returns how many were
// stored and how many the stream acknowledged as duplicates (already
// stored by another publisher). Any error, a duplicate included (the
// stream moved under this publisher: ErrFenced), ends the term's
// publishing: the caller must Resume before publishing again. Publishes
// are conditional on the stream's last sequence, so no change is ever
// stored after a hole or twice.
func (b *Bus) Publish(ctx context.Context, changes []feed.Change) (stored, duplicates int, err error) {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	if !b.pub.resumed {
		return 0, 0, errors.New("natsbus: Publish before Resume")
	}
	p := b.pub
	futures := make([]jetstream.PubAckFuture, 0, len(changes))
	fail := func(e error) (int, int, error) {
		b.pub.resumed = false
		return stored, duplicates, e
	}
	prev := p.prev
	rest := restOf(changes)
	for i := range changes {
		c := &changes[i]
		if c.Pos <= prev {
			return fail(fmt.Errorf("natsbus: change at %d is not after %d", c.Pos, prev))
		}
		msg, err := encodeMessage(b.opts.Prefix, c, msgMeta{Epoch: p.epoch, Pos: c.Pos, Prev: prev, Base: p.base, Rest: rest[i]})
		if err != nil {
			return fail(err)
		}
		f, err := b.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequence(p.last+uint64(i)), jetstream.WithRetryAttempts(0))
		if err != nil {
			return fail(fmt.Errorf("natsbus: publish: %w", err))
		}
		futures = append(futures, f)
		prev = c.Pos
	}
	// Wait for every acknowledgement, so the counts are exact. Once one
	// failed, a later one can still be stored only if it extends exactly
	// the stream's last sequence that this publisher expected, which keeps
	// the chain consistent.
	var first error
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				duplicates++
				b.stats.duplicates.Add(1)
				if first == nil {
					first = fmt.Errorf("%w: position %d was already stored", ErrFenced, changes[i].Pos)
				}
				continue
			}
			stored++
			b.stats.published.Add(1)
			b.pub.prev, b.pub.last = changes[i].Pos, ack.Sequence
		case err := <-f.Err():
			if first != nil {
				continue
			}
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
				b.stats.fenced.Add(1)
				first = fmt.Errorf("%w: %v", ErrFenced, err)
			} else {
				first = fmt.Errorf("natsbus: publish position %d: %w", changes[i].Pos, err)
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	if first != nil {
		return fail(first)
	}
	return stored, duplicates, nil
}
