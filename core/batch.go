package core

import "github.com/tidesync/tide/core/feed"

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
