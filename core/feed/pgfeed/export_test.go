package pgfeed

import (
	"context"

	"github.com/tidesync/tide/core/feed"
)

// Broken returns opts with the deliberately unsound capture: positions are
// taken when a row is written (a plain AFTER trigger calling nextval, no
// commit-order lock), so transactions that commit out of order expose holes.
// The torture test shows that its checks catch it.
func Broken(opts Options) Options {
	opts.brokenCapture = true
	return opts
}

// ReplaySQL returns the replay statement of q and its arguments.
func (f *Feed) ReplaySQL(q feed.ReplayQuery) (string, []any) { return f.replaySQL(q) }

// SnapshotSQL returns the snapshot statement of q and its arguments.
func (f *Feed) SnapshotSQL(ctx context.Context, q feed.SnapshotQuery) (string, []any, error) {
	p, err := f.planFor(ctx, q.Scope.Schema)
	if err != nil {
		return "", nil, err
	}
	sql, args := f.snapshotSQL(p, q, true)
	return sql, args, nil
}

// ListenerPID returns the backend pid of the listening connection, 0 before
// the first connection.
func (f *Feed) ListenerPID() uint32 { return f.listenerPID.Load() }

// SequencerPID returns the backend pid of the sequencer's connection while
// this feed holds the role, 0 otherwise.
func (f *Feed) SequencerPID() uint32 { return f.sequencerPID.Load() }

// OutboxTable returns the qualified outbox table.
func (f *Feed) OutboxTable() string { return f.n.outbox }

// OnListen sets a hook called after every LISTEN; set it before the first
// Tail.
func (f *Feed) OnListen(hook func()) { f.onConnect = hook }

// Names exposes SQL names for tests.
func (f *Feed) ChangesTable() string { return f.n.changes }
func (f *Feed) MetaTable() string    { return f.n.meta }
func (f *Feed) TriggerName(resource string) string {
	return f.triggerName(resource)
}
