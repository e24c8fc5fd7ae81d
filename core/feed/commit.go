package feed

import "context"

// MaxCommitGroup bounds the changes of one commit group (Change.Tx) a
// reader holds to deliver them together. A larger group (a bulk import; on
// Postgres, a backlog the sequencer moved in one step, or a change log
// restored from a dump) is delivered in pieces, as without groups.
const MaxCommitGroup = 1 << 14

// CommitCut returns where the trailing commit group of changes (not empty)
// starts: len(changes) if the last change is a group of its own (Tx zero),
// 0 if every change belongs to it.
func CommitCut(changes []Change) int {
	last := &changes[len(changes)-1]
	if last.Tx == 0 {
		return len(changes)
	}
	i := len(changes) - 1
	for i > 0 && SameCommit(&changes[i-1], last) {
		i--
	}
	return i
}

// TailCommits reads b after `after` like Bus.Tail, but never ends a batch
// inside a commit group: a full batch's trailing group is left for the
// next read (the caller reads on from the last change returned), and a
// group larger than the batch is read whole, up to MaxCommitGroup changes.
// A shorter result already ends at a commit boundary (the Bus contract).
func TailCommits(ctx context.Context, b Bus, after Position, limit int) ([]Change, error) {
	for {
		changes, err := b.Tail(ctx, after, limit)
		if err != nil || len(changes) < limit {
			return changes, err
		}
		if cut := CommitCut(changes); cut > 0 {
			return changes[:cut], nil
		} else if limit < MaxCommitGroup {
			limit = min(2*limit, MaxCommitGroup)
			continue
		}
		return changes, nil
	}
}
