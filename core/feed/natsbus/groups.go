package natsbus

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed"
)

// Commit groups: the replicator publishes whole groups (feed.TailCommits)
// and each message says how many changes of its group follow it (rest), at
// the next stream sequences. Tail returns whole groups: a batch that ends
// inside one waits for the rest of the group, as far as the node's
// interest goes, and a full batch leaves its trailing group for the next.

// groupOf is the part of a message body receive reads.
type groupOf struct {
	Tx   uint64 `json:"tx"`
	Rest int    `json:"rest"`
}

// group reads the commit group of a message's body; zero if the body does
// not say (or is not a change: commitLocked then skips it).
func group(data []byte) groupOf {
	var g groupOf
	if json.Unmarshal(data, &g) != nil || checkRest(g.Tx, g.Rest) != nil {
		return groupOf{}
	}
	return g
}

// wholeGroups completes batch (up to limit messages, just received from
// rd) to end at a commit boundary: while the group of its last message may
// go on with messages of rd's filter, it waits for them; a full batch
// leaves its trailing group in rd.held for the next read, unless the group
// fills the batch. It returns nil when kick fired, the reader failed or ctx
// ended (the messages are then in rd.held, or read again by the next
// reader).
func (b *Bus) wholeGroups(ctx context.Context, rd *reader, kick <-chan struct{}, batch []jetstream.Msg, limit int) []jetstream.Msg {
	retry := time.Millisecond
	for len(batch) < limit {
		end, open := b.groupEnd(batch)
		if !open || b.filterDone(ctx, rd, batch, end) {
			return batch
		}
		t := time.NewTimer(retry)
		select {
		case m := <-rd.ch:
			batch = drain(rd, append(batch, m), limit)
			retry = time.Millisecond
		case <-t.C:
			retry = min(2*retry, 100*time.Millisecond)
		case err := <-rd.errc:
			rd.held = batch
			b.failed(rd, err)
			t.Stop()
			return nil
		case <-kick:
			rd.held = batch
			t.Stop()
			return nil
		case <-ctx.Done():
			rd.held = batch
			t.Stop()
			return nil
		}
		t.Stop()
	}
	last := group(batch[len(batch)-1].Data())
	if last.Tx == 0 {
		return batch
	}
	cut := len(batch) - 1
	for cut > 0 && group(batch[cut-1].Data()).Tx == last.Tx {
		cut--
	}
	if cut > 0 {
		rd.held = slices.Concat(batch[cut:], rd.held)
		batch = batch[:cut]
	}
	return batch
}

// groupEnd returns the stream sequence of the last message of the group
// of batch's last message, and whether that is after it.
func (b *Bus) groupEnd(batch []jetstream.Msg) (uint64, bool) {
	m := batch[len(batch)-1]
	g := group(m.Data())
	if g.Rest == 0 {
		return 0, false
	}
	md, err := m.Metadata()
	if err != nil {
		return 0, false
	}
	return md.Sequence.Stream + uint64(g.Rest), true
}

// filterDone reports whether rd has delivered every message of its filter
// up to stream sequence end, all of them in batch: the stream holds end,
// and afterwards the consumer has nothing pending and delivered nothing
// after batch. On a failed request it reports true (the batch is then
// returned as it is, as without groups).
func (b *Bus) filterDone(ctx context.Context, rd *reader, batch []jetstream.Msg, end uint64) bool {
	if len(rd.ch) > 0 {
		return false
	}
	md, err := batch[len(batch)-1].Metadata()
	if err != nil {
		return true
	}
	info, err := b.info(ctx)
	if err != nil {
		return true
	}
	if info.State.LastSeq < end {
		return false // the replicator is still storing the group
	}
	cctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	ci, err := rd.cons.Info(cctx)
	if err != nil {
		return true
	}
	return ci.NumPending == 0 && ci.Delivered.Consumer == md.Sequence.Consumer && len(rd.ch) == 0
}

// drain appends to batch the messages rd has ready, up to limit.
func drain(rd *reader, batch []jetstream.Msg, limit int) []jetstream.Msg {
	for len(batch) < limit {
		select {
		case m := <-rd.ch:
			batch = append(batch, m)
			continue
		default:
		}
		break
	}
	return batch
}

// restOf returns, for each of changes (a batch to publish, in position
// order), how many changes of its commit group follow it in the batch.
func restOf(changes []feed.Change) []int {
	rest := make([]int, len(changes))
	for i := len(changes) - 2; i >= 0; i-- {
		if feed.SameCommit(&changes[i], &changes[i+1]) {
			rest[i] = min(rest[i+1]+1, feed.MaxCommitGroup-1)
		}
	}
	return rest
}
