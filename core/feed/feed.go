package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tidesync/tide/core/protocol"
)

// Position is a point in a feed's commit order. Zero is the beginning of the
// feed, before any change.
type Position uint64

// Op is the kind of a change.
type Op uint8

// Change operations.
const (
	OpUpsert Op = iota + 1 // the row exists with this content in this scope
	OpDelete               // the row no longer exists in this scope (a tombstone)
)

// String returns "upsert" or "delete", the names used on the wire.
func (o Op) String() string {
	switch o {
	case OpUpsert:
		return "upsert"
	case OpDelete:
		return "delete"
	}
	return "invalid"
}

// Change is one row upsert or delete of a resource at a position.
//
// Changes are shared between the tailer and every subscription they reach, so
// they must not be modified once a feed has returned them.
type Change struct {
	Pos      Position
	Resource string // Schema.Name
	Op       Op
	Key      string   // canonical text of the primary key (protocol.EncodeKey of its parts)
	Scope    []string // canonical text of the scope columns, in Schema.Scope order
	// Row is the row as a JSON object keyed by column name: the new row for
	// an upsert, the old row for a delete. Row filters read it; a delete is
	// sent to clients without it.
	Row    json.RawMessage
	Origin string // origin of the writer, "" if none was set

	// PrevKnown, on an upsert, says the feed recorded what the row was in
	// this scope just before it: Prev, the previous row as a JSON object
	// keyed by column name, or nil if the row did not exist in this scope
	// (an insert, or the upsert half of a move between scopes). Row
	// filters read it: an upsert a subscriber may not see becomes a delete
	// only for the subscribers who may have seen the previous version, so
	// the key of a row hidden from a subscriber all along never reaches
	// it. A feed that does not record it leaves PrevKnown false, and such
	// an upsert is a delete for every subscriber it is hidden from.
	//
	// Prev needs only the columns of Schema.PrevColumns (a feed may keep
	// just those, or the whole row); a Prev that lacks one of them, or does
	// not decode, counts as a version every subscriber may have seen, so
	// the delete goes to all it is hidden from, as without PrevKnown.
	// Resources without a row filter never read it.
	PrevKnown bool
	Prev      json.RawMessage

	// Tx groups changes that committed together: the changes of one
	// transaction carry the same non-zero Tx, and their positions are
	// contiguous (a commit's changes are never interleaved with another
	// commit's). A feed may put several transactions in one group (the
	// Postgres feed's groups are its sequencer's steps, which never split
	// a transaction); readers compare it only between changes of nearby
	// positions, to deliver a commit's changes together. Zero means the
	// feed does not say: such a change is a group of its own.
	Tx uint64
}

// SameCommit reports whether a and b are known to belong to one commit
// group (see Change.Tx).
func SameCommit(a, b *Change) bool { return a.Tx != 0 && a.Tx == b.Tx }

// Mutation is one write of a Writer.
type Mutation struct {
	Schema *Schema
	Op     Op
	Key    string          // canonical text of the primary key (protocol.EncodeKey of its parts)
	Scope  []string        // scope values of the new row (upserts only; must agree with Row)
	Row    json.RawMessage // the new row as a JSON object with every column (upserts only)
}

// ReplayQuery asks for the changes of one scope in (After, Until].
type ReplayQuery struct {
	Scope Scope
	After Position // exclusive lower bound: the subscriber's cursor
	Until Position // inclusive upper bound: the high-water pinned for this replay
	Limit int      // maximum number of changes; must be positive
}

// SnapshotQuery asks for one page of a scope's current rows in key order.
type SnapshotQuery struct {
	Scope Scope
	// After is the key of the last row of the previous page; it is used only
	// when HasAfter is set, since "" is a valid key.
	After    string
	HasAfter bool
	Limit    int // maximum number of rows; must be positive
}

// SnapshotPage is one page of a snapshot: rows as upsert changes, all
// consistent with the change log at Pos (every change at or below Pos is
// reflected, none above it).
type SnapshotPage struct {
	Rows []Change
	Pos  Position
	// Spans, when not nil, locates the values of every row in its Row: the
	// spans of Rows[i] are Spans[i*n:(i+1)*n], n being the number of the
	// schema's columns, in Columns order (see protocol.ValueSpan). A feed
	// that renders rows itself may fill it; the engine's row filters then
	// decode each value where it is instead of scanning the row.
	Spans []protocol.ValueSpan
	// Release, when not nil, hands the page's Rows and Spans arrays back to
	// the feed that read them, to hold a later page of the same read
	// (feed.SnapshotStreamer): call it at most once, when nothing reads
	// those two slices any more. What their elements point to (each row's
	// Row, Key and Scope) is not reused and stays valid.
	Release func()
}

// CountQuery asks how many changes one scope has in (After, Until] and how
// many rows it holds now, each counted only up to a cap, so the answer costs
// at most the cap's worth of reading whatever the size of the log or table.
type CountQuery struct {
	Scope Scope
	After Position // exclusive lower bound of the changes counted
	Until Position // inclusive upper bound of the changes counted
	// MaxChanges caps the changes counted; zero skips the count.
	MaxChanges int
	// MaxRows caps the rows counted; zero skips the count.
	MaxRows int
}

// Counts is the answer to a CountQuery.
type Counts struct {
	Changes int // min(changes of the scope in (After, Until], MaxChanges)
	Rows    int // min(current rows of the scope, MaxRows)
}

// Counter is implemented by feeds that can count a scope's backlog and its
// current rows up to a cap. The engine asks when a client resumes far
// behind the head: a backlog large for its scope is sent as the
// scope's rows (a reset and a snapshot) instead. A feed without it always
// replays.
type Counter interface {
	// Count returns the capped counts of q. Rows are the rows Snapshot
	// would return for q.Scope, changes those Replay would return for
	// (q.After, q.Until]. It returns ErrCursorExpired if MaxChanges is
	// positive and q.After is older than what is retained.
	Count(ctx context.Context, q CountQuery) (Counts, error)
}

// SampleQuery asks how many of a few positions hold a change of Scope.
type SampleQuery struct {
	Scope Scope
	// After is the exclusive lower bound of the backlog sampled: every
	// position in At is above it.
	After Position
	// At are the positions looked at, at most MaxSample of them; a
	// position listed twice counts once.
	At []Position
}

// MaxSample bounds SampleQuery.At.
const MaxSample = 4096

// Sampler is implemented by feeds that can tell which of a few given
// positions hold a change of a scope, for about the cost of looking each
// one up. Deciding how to send a backlog, the engine then learns from a
// sample of its positions that the scope's changes are surely more than a
// count would have to reach, and skips the count.
type Sampler interface {
	// SampleChanges returns how many of the positions q.At hold a change
	// Replay would return for q.Scope. It returns ErrCursorExpired if
	// q.After is older than what is retained, and an error for a position
	// not above q.After or more than MaxSample positions.
	SampleChanges(ctx context.Context, q SampleQuery) (int, error)
}

// CheckSample checks a SampleQuery's positions against its bounds (see
// Sampler), for feeds to call first.
func CheckSample(q SampleQuery) error {
	if q.Scope.Schema == nil {
		return errors.New("feed: SampleChanges scope has no schema")
	}
	if len(q.At) > MaxSample {
		return fmt.Errorf("feed: SampleChanges: %d positions, at most %d", len(q.At), MaxSample)
	}
	for _, p := range q.At {
		if p <= q.After {
			return fmt.Errorf("feed: SampleChanges: position %d is not after %d", p, q.After)
		}
	}
	return nil
}

// RowEstimator is implemented by feeds that can tell, without reading a
// table, about how many rows it holds (from the database's statistics).
// Deciding how to send a backlog, the engine then need not count the
// scope's rows when its whole table holds few enough of them: it counts
// only the changes. The estimate should be at least the rows of any scope
// of the table while the statistics are current; one that is too low can
// only make the engine send a snapshot where replaying the changes would
// have cost less (both deliver the same state), never lose or leak a
// change.
type RowEstimator interface {
	// EstimateRows returns about how many rows the table of s holds, or
	// ok false if the feed cannot tell (say, no statistics yet).
	EstimateRows(ctx context.Context, s *Schema) (n int, ok bool, err error)
}

// SnapshotStreamer is implemented by feeds that read a snapshot's pages
// in one pass, cheaper than a Snapshot call per page.
type SnapshotStreamer interface {
	// SnapshotPages reads the pages Snapshot would return for q and the
	// pages after it (each of up to q.Limit rows, after the previous
	// page's last key), all consistent at one Pos, and passes each to fn
	// in order. It stops after the last page (shorter than q.Limit,
	// possibly empty), when fn returns an error (which it returns), or
	// after any full page at the feed's discretion (to bound how long it
	// holds a snapshot of its store): the caller then goes on after that
	// page's last key. Pages are the caller's to keep.
	SnapshotPages(ctx context.Context, q SnapshotQuery, fn func(SnapshotPage) error) error
}

// Feed is a commit-ordered change log. Implementations must be safe for
// concurrent use; every method honours ctx.
type Feed interface {
	// Epoch identifies this log. Cursors carry it, so a cursor from another
	// log (another database, or an in-memory feed before a restart) is
	// recognised as unusable instead of being misread. It is 1 to 64 ASCII
	// letters, digits, '-' or '_', fixed for the log's lifetime. A feed that
	// learns it from its store may return "" until Head first succeeds.
	Epoch() string

	// Head returns the newest position at or below which every change is
	// readable: 0 for a fresh feed. It never decreases. It need not be the
	// position of a change (positions may have gaps).
	Head(ctx context.Context) (Position, error)

	// Tail blocks until at least one change after `after` is readable, then
	// returns up to limit (positive) of them in position order, across all
	// resources.
	// It returns ErrCursorExpired if `after` is older than what is retained.
	Tail(ctx context.Context, after Position, limit int) ([]Change, error)

	// Replay returns up to q.Limit changes of q.Scope with q.After < Pos <=
	// q.Until, in position order. A result shorter than q.Limit means there
	// are no more. It returns ErrCursorExpired if q.After is older than what
	// is retained.
	Replay(ctx context.Context, q ReplayQuery) ([]Change, error)

	// Snapshot returns up to q.Limit of the scope's current rows with keys
	// after q.After, in the feed's key order, consistent at the page's Pos.
	// A page shorter than q.Limit is the last. The key order is the feed's
	// choice (bytewise for memfeed, the column type's order for Postgres)
	// but must be total and the same for sorting and for the After
	// comparison, so that paging visits every row once. Rows carry the
	// page's Pos and no origin.
	Snapshot(ctx context.Context, q SnapshotQuery) (SnapshotPage, error)
}

// Writer is implemented by feeds that can write rows themselves. The
// in-memory feed is written only through it; the Postgres feed also captures
// the app's own SQL writes.
type Writer interface {
	// Apply writes the mutations atomically, in order, tagged with origin
	// ("" for none). When Apply returns nil the changes are committed and
	// Head covers them. Deleting a missing row is not an error and produces
	// no change.
	Apply(ctx context.Context, origin string, muts ...Mutation) error
}

// ErrInvalidMutation is wrapped by the error a Writer returns for a
// mutation it refuses (no schema, no row for an upsert, a row that is not a
// JSON object, scope values that do not match the schema). Nothing is
// written.
var ErrInvalidMutation = errors.New("feed: invalid mutation")

// ErrCursorExpired means a position is older than what the feed retains: the
// subscriber must drop its copy of the scope and take a fresh snapshot.
var ErrCursorExpired = errors.New("feed: cursor is older than the retained change log")

// ErrNotInstalled is wrapped by the errors of a feed whose store lacks the
// tables the feed needs: the Postgres feed before its Migrate first ran.
// While the engine's feed says so, subscriptions are refused with
// protocol.CodeNotMigrated instead of waiting.
var ErrNotInstalled = errors.New("feed: the change log is not installed")

// ErrNotCaptured is wrapped by the error of CaptureChecker.CheckCapture for
// a resource whose changes the feed does not record.
var ErrNotCaptured = errors.New("feed: the resource's changes are not captured")

// CaptureChecker is implemented by feeds that record a resource's changes
// only once something installed its capture (the Postgres feed's Migrate).
// The engine asks before a subscription starts, and refuses one whose
// resource is not captured with protocol.CodeNotCaptured rather than send
// a snapshot that no live change would follow.
type CaptureChecker interface {
	// CheckCapture returns nil if the feed records the changes of s as
	// declared, an error wrapping ErrNotCaptured that says what to call if
	// it does not, or another error if it cannot tell.
	CheckCapture(ctx context.Context, s *Schema) error
}
