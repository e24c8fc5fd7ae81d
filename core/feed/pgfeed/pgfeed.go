package pgfeed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed/logrepl"
	"github.com/tidesync/tide/core/protocol"
)

// Defaults of Options.
const (
	DefaultSchema        = "tide"
	DefaultPollInterval  = time.Second
	DefaultMaxAge        = 7 * 24 * time.Hour
	DefaultMaxChanges    = 10_000_000
	DefaultPruneInterval = time.Minute

	DefaultSequencerInterval = 50 * time.Millisecond
	DefaultSequencerBatch    = 1000
)

// Options configures a Feed. The zero value is ready to use; every field
// documents its zero-value default.
type Options struct {
	// Schema is the Postgres schema holding tide's tables and functions
	// (the change log, its metadata, the capture functions). It must be
	// lower-case letters, digits and underscores, at most 40 bytes. Zero
	// value: "tide".
	Schema string

	// PollInterval bounds how long a blocked Tail waits without a
	// notification before it reads the change log anyway, should a
	// notification be lost (for example while the listening connection
	// reconnects). Zero value: 1 s.
	PollInterval time.Duration

	// MaxAge is the age past which Prune drops changes, and the idempotency
	// keys of mutations (a mutation older than it is refused). Zero value:
	// 7 days.
	// Negative: changes are never dropped for their age.
	MaxAge time.Duration
	// MaxChanges is the most changes Prune keeps. Zero value: 10,000,000.
	// Negative: changes are never dropped for their number.
	MaxChanges int64
	// PruneInterval is how often the pruner started by StartPruner runs.
	// Zero value: 1 minute.
	PruneInterval time.Duration

	// SequencerInterval is the longest the sequencer (see StartSequencer)
	// waits between two looks at the changes that committed without a
	// position yet. While it reads the WAL stream (see PollOnly) it looks
	// as soon as a synced commit shows there, and this interval is a safety
	// net. When it polls, it looks every millisecond right after changes
	// arrived and less often the longer none do: the pause is an eighth of
	// the time since the last change, within [1 ms, SequencerInterval],
	// which bounds the delay a commit after a quiet spell adds before
	// tailers see it. Zero value: 50 ms.
	SequencerInterval time.Duration
	// SequencerBatch is the most transactions one sequencing step gives
	// positions to (a transaction is never split). Zero value: 1000.
	SequencerBatch int
	// PollOnly makes the sequencer find new changes by polling alone. By
	// default, while a feed holds the sequencer role it also reads the
	// database's WAL stream (as a standby would, keeping none of it) and
	// looks as soon as the WAL shows a write to tide's outbox, which takes
	// the poll's delay off every commit. The stream needs a role that may
	// replicate (REPLICATION or superuser) and a free WAL sender
	// (max_wal_senders); without them, or with synchronous_standby_names
	// set, the feed polls. Zero value: false.
	PollOnly bool

	// Capture is how changes are recorded: CaptureTrigger (the zero
	// value) with a row trigger in each writer's transaction, or
	// CaptureLogical from the logical replication stream (see Capture).
	Capture Capture
	// Slot is the replication slot of CaptureLogical. It must be 1 to 63
	// lower-case letters, digits and underscores, unique on the server
	// (slots are shared by all its databases). Zero value:
	// logrepl.SlotName(Schema), Schema + "_logrepl".
	Slot string

	// Node names this node to operators: the connections that hold a
	// database-wide role carry it in their application_name ("tide
	// sequencer <Node>", see RoleAppName), so tide status, the status page
	// and metrics say which node holds what. Zero value: feed.DefaultNode(),
	// the host name and process id.
	Node string

	// Logger receives operational events (listener reconnects, pruning).
	// Zero value: slog.Default().
	Logger *slog.Logger

	// brokenCapture installs a deliberately unsound capture (positions
	// taken at write time, not commit time, in ticks the capture writes
	// itself; no step runs) so tests can show that they detect it. Set
	// only from export_test.go.
	brokenCapture bool
	// tuneLogical, set only from export_test.go, adjusts the logical
	// capture consumer's configuration (its batch bounds).
	tuneLogical func(*logrepl.Config)
	// logicalFault, set only from export_test.go, is called by the
	// logical capture before ("commit") and after ("committed") each
	// batch's local commit, with the changes the batch wrote; an error it
	// returns fails the batch there.
	logicalFault func(stage string, changes int) error
	// logicalRewrite, set only from export_test.go, makes the logical
	// capture write again what it wrote before (no skip): the unsound
	// capture its crash test must catch.
	logicalRewrite bool
}

// withDefaults returns o with zero values replaced by their defaults.
func (o Options) withDefaults() Options {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxChanges == 0 {
		o.MaxChanges = DefaultMaxChanges
	}
	if o.PruneInterval <= 0 {
		o.PruneInterval = DefaultPruneInterval
	}
	if o.SequencerInterval <= 0 {
		o.SequencerInterval = DefaultSequencerInterval
	}
	o.SequencerInterval = max(o.SequencerInterval, time.Millisecond)
	if o.SequencerBatch <= 0 {
		o.SequencerBatch = DefaultSequencerBatch
	}
	if o.Slot == "" {
		o.Slot = logrepl.SlotName(o.Schema)
	}
	if o.Node == "" {
		o.Node = feed.DefaultNode()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// maxSchemaLen leaves room in 63-byte Postgres names for the suffixes tide
// derives from the schema name (trigger and channel names).
const maxSchemaLen = 40

// ErrClosed is returned by Tail once Close has been called.
var ErrClosed = errors.New("pgfeed: feed is closed")

// Feed is the Postgres change feed. It implements feed.Feed and feed.Writer
// and is safe for concurrent use. Create it with New, install its schema and
// the capture of each resource with Migrate, and stop its background work
// with Close.
type Feed struct {
	pool *pgxpool.Pool
	opts Options
	n    names
	log  *slog.Logger

	epoch     atomic.Pointer[string]
	cursorKey atomic.Pointer[[]byte] // read once (cursorkey.go)
	plans     sync.Map               // *feed.Schema → *plan
	captured  sync.Map               // *feed.Schema → struct{}: its capture is installed as declared

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	closed      bool
	listening   bool          // the listener goroutine runs
	pruning     bool          // the pruner goroutine runs
	sequencerOn bool          // the sequencer candidate runs
	wake        chan struct{} // closed and replaced on every doorbell

	// listener state, for tests and Stats.
	listenerPID   atomic.Uint32
	connects      atomic.Int64
	notifications atomic.Int64
	polls         atomic.Int64
	onConnect     func() // test hook, called after each LISTEN

	revWatchPID atomic.Uint32 // backend of the latest revocation watcher, for tests

	// sequencer state, for tests and Stats.
	sequencing     atomic.Bool
	sequencerPID   atomic.Uint32
	sequencerTerms atomic.Int64
	sequencerSteps atomic.Int64
	sequenced      atomic.Int64
	waker          atomic.Pointer[walWaker]       // the current term's WAL wake-up, or nil
	stepped        atomic.Pointer[steppedChanges] // the changes of this node's latest step, for its tailers
	walWakeups     atomic.Int64                   // looks the WAL stream started
	walRefused     atomic.Bool                    // the WAL stream failed for good once (logged)
	logicalSkipped atomic.Int64                   // transactions delivered again and skipped
	marks          marks                          // the logical capture's WAL marks (catchUp)
	slotActive     atomic.Bool                    // the slot's figures, as slotWatch last read them
	slotLag        atomic.Int64
	slotRetained   atomic.Int64
	onStreamWait   func() // test hook: the sequencer waits for the WAL stream to ring
	onWALRefused   func() // test hook: the WAL stream failed for good
}

var (
	_ feed.Feed           = (*Feed)(nil)
	_ feed.Writer         = (*Feed)(nil)
	_ feed.CaptureChecker = (*Feed)(nil)
	_ feed.CursorKeyer    = (*Feed)(nil)
)

// New returns a feed reading and writing through pool. It validates opts and
// does no I/O: call Migrate before serving (it is safe on every boot), and
// Close when done. pool's search_path decides how unqualified table names
// of resources resolve, here and in Migrate.
func New(pool *pgxpool.Pool, opts Options) (*Feed, error) {
	if pool == nil {
		return nil, errors.New("pgfeed: nil pool")
	}
	opts = opts.withDefaults()
	if err := validName(opts.Schema, maxSchemaLen); err != nil {
		return nil, fmt.Errorf("pgfeed: Options.Schema: %w", err)
	}
	switch opts.Capture {
	case CaptureTrigger:
	case CaptureLogical:
		if err := validName(opts.Slot, 63); err != nil {
			return nil, fmt.Errorf("pgfeed: Options.Slot: %w", err)
		}
	default:
		return nil, fmt.Errorf("pgfeed: Options.Capture: unknown mode %d", opts.Capture)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := newNames(opts.Schema)
	if opts.brokenCapture {
		// The broken capture ticks its own changes: nothing else steps.
		n.headSQL = `SELECT ` + n.headExpr + `, m.epoch FROM ` + n.meta + ` m`
	}
	return &Feed{
		pool:   pool,
		opts:   opts,
		n:      n,
		log:    opts.Logger,
		ctx:    ctx,
		cancel: cancel,
		wake:   make(chan struct{}),
	}, nil
}

// Schema returns the Postgres schema holding the feed's tables.
func (f *Feed) Schema() string { return f.opts.Schema }

// Close stops the feed's background goroutines (the listener, the sequencer
// candidate and the pruner)
// and waits for them. It does not close the pool. Tail returns ErrClosed
// afterwards; the other methods keep working. Close is idempotent.
func (f *Feed) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
	return nil
}

// Epoch returns the change log's random 16-character identifier, stored in
// the database when Migrate first ran. It returns "" until Migrate or Head
// has read it.
func (f *Feed) Epoch() string {
	if p := f.epoch.Load(); p != nil {
		return *p
	}
	return ""
}

func (f *Feed) setEpoch(e string) error {
	if !protocol.ValidEpoch(e) {
		return fmt.Errorf("pgfeed: %s.meta holds an invalid epoch %q", f.opts.Schema, e)
	}
	if old := f.epoch.Load(); old != nil && *old != e {
		// The database was replaced under a running feed: refuse to mix logs.
		return fmt.Errorf("pgfeed: epoch changed from %q to %q; the change log was recreated, restart the server", *old, e)
	}
	f.epoch.Store(&e)
	return nil
}

// Head returns the newest position at or below which every change is
// readable: the largest committed position (sequencing makes the committed
// positions a prefix of the numbering, see the package documentation), or
// the pruned floor if that is larger. First, if changes committed without a
// position yet, it gives them theirs (a sequencing step), so the head
// covers every change committed before Head was called. It also loads the
// epoch.
func (f *Feed) Head(ctx context.Context) (feed.Position, error) {
	if f.logical() {
		if err := f.catchUp(ctx); err != nil {
			return 0, err
		}
	}
	var head int64
	var epoch string
	err := f.pool.QueryRow(ctx, f.n.headSQL).Scan(&head, &epoch)
	if err != nil {
		return 0, f.notInstalled("head", err)
	}
	if err := f.setEpoch(epoch); err != nil {
		return 0, err
	}
	return feed.Position(head), nil
}

// wrap adds context to a database error, with a hint when tide's tables are
// missing.
func (f *Feed) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	if isUndefinedTable(err) || isUndefinedFunction(err) {
		return fmt.Errorf("pgfeed: %s: %w (has Migrate run for schema %q?)", what, err, f.opts.Schema)
	}
	return fmt.Errorf("pgfeed: %s: %w", what, err)
}

// notInstalled wraps an error of a statement that reads only tide's own
// tables: a missing table or function means Migrate has not run (or not
// since an upgrade), and the error wraps feed.ErrNotInstalled.
func (f *Feed) notInstalled(what string, err error) error {
	if isUndefinedTable(err) || isUndefinedFunction(err) {
		return fmt.Errorf("pgfeed: %s: %w: schema %q lacks tide's tables; call Migrate with the engine's schemas (tide.Open does): %w", what, feed.ErrNotInstalled, f.opts.Schema, err)
	}
	return f.wrap(what, err)
}

// names are the SQL names derived from the schema name.
type names struct {
	schema       string // quoted schema
	changes      string // qualified, quoted
	outbox       string // unsequenced changes
	seqFn        string // the sequencer function
	stepRowsFn   string // a step returning the changes it gave positions to (see stepRowsFunction)
	stepFn       string // begins a step: the step lock, and the sequence past the reservation after a restart
	meta         string
	resources    string
	migrations   string
	keys         string // idempotency keys of mutations
	seq          string
	seqLit       string // the sequence as a string literal, for nextval
	ticks        string // the positions of committed transactions (see ticks.go)
	logicalState string // the logical capture's last written transaction end (logical.go)
	captureSeq   string // numbers changes in the order they are captured (cseq)
	ordGUC       string // the setting counting a transaction's changes (ord)
	channel      string // raw NOTIFY channel name
	lockA        int32  // sequencing lock: pg_advisory_xact_lock(lockA, key), one step at a time
	sequencerA   int32  // the sequencer role: pg_try_advisory_lock(sequencerA, key), session-level
	migrateA     int32  // migration lock: pg_advisory_lock(migrateA, key)
	pruneA       int32  // pruning lock: pg_try_advisory_xact_lock(pruneA, key)
	key          int32  // second key, derived from the schema name

	headExpr         string // scalar subquery: the head
	headSQL, tailSQL string
	stepRowsSQL      string // a step returning its changes, in scanChanges's layout (before in place of the floor)
}

// Advisory lock classes ("tide", "tidm", "tidp", "tids" as big-endian
// int32s). The
// second key is a checksum of the schema name, so two tide schemas in one
// database never wait for each other.
const (
	lockClassCapture   = 0x74696465
	lockClassMigrate   = 0x7469646d
	lockClassPrune     = 0x74696470
	lockClassSequencer = 0x74696473
)

func newNames(schema string) names {
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	n := names{
		schema:       pgx.Identifier{schema}.Sanitize(),
		changes:      q("changes"),
		outbox:       q("outbox"),
		seqFn:        q("sequence"),
		stepRowsFn:   q("step_rows"),
		stepFn:       q("begin_step"),
		meta:         q("meta"),
		resources:    q("resources"),
		migrations:   q("schema_migrations"),
		keys:         q("mutation_keys"),
		seq:          q("pos_seq"),
		ticks:        q("ticks"),
		logicalState: q("logical_state"),
		captureSeq:   q("capture_seq"),
		ordGUC:       ordSetting(schema),
		channel:      shortIdent(schema + "_changes"),
		lockA:        lockClassCapture,
		sequencerA:   lockClassSequencer,
		migrateA:     lockClassMigrate,
		pruneA:       lockClassPrune,
		key:          int32(crc32.ChecksumIEEE([]byte(schema))),
	}
	n.seqLit = quoteLit(n.seq)
	n.headExpr = `(SELECT greatest((SELECT t.next - 1 FROM ` + n.ticks + ` t ORDER BY t.pos DESC LIMIT 1), m.floor) FROM ` + n.meta + ` m)`
	// Head first ticks whatever has committed (a no-op when nothing is
	// pending), so it covers every change committed before it.
	n.headSQL = `SELECT s.head, m.epoch FROM ` + n.seqFn + `(0, 0, 0, 0) s, ` + n.meta + ` m`
	n.tailSQL = `SELECT f.floor, coalesce(c.pos, 0), coalesce(c.resource, ''), coalesce(c.op, 0), coalesce(c.key, ''), c.scope, c.data, coalesce(c.origin, ''), c.prev, coalesce(c.tx, 0)
FROM (SELECT (SELECT floor FROM ` + n.meta + `) AS floor) f
LEFT JOIN LATERAL (SELECT * FROM ` + n.ticked("$1", maxPosSQL, "", "$2") + ` ORDER BY c.tick, c.pos LIMIT $2) c ON true ORDER BY c.pos`
	n.stepRowsSQL = `SELECT s.before, s.pos, s.resource, s.op, s.key, s.scope, s.data, coalesce(s.origin, ''), s.prev, s.tx FROM ` + n.stepRowsFn + `($1) s`
	return n
}

// move returns a WITH clause that moves outbox rows into the change log
// with positions, whole transactions ordered by their largest outbox id and
// rows by id; its CTE i returns the new positions. using, if not empty,
// names a CTE of the transactions (xid) to move; otherwise every row the
// statement's snapshot sees moves. v5 moves what schema version 5 added:
// the rows' previous versions and their transaction ids.
func (n names) move(v5 bool, using string) string { return n.moveReturning(v5, using, "pos") }

// moveReturning is move with the log columns its i returns.
func (n names) moveReturning(v5 bool, using, returning string) string {
	cols, ret := "o.id, o.xid, o.resource, o.op, o.key, o.scope, o.data, o.origin", "resource, op, key, scope, data, origin"
	if v5 {
		cols, ret = cols+", o.prev", ret+", prev, xid"
	}
	del := "DELETE FROM " + n.outbox + " o"
	if using != "" {
		del += " USING " + using + " WHERE o.xid = " + using + ".xid"
	}
	return `d AS (
  ` + del + ` RETURNING ` + cols + `
), i AS (
  INSERT INTO ` + n.changes + ` (pos, ` + ret + `)
  SELECT pg_catalog.nextval(` + n.seqLit + `), s.` + strings.ReplaceAll(ret, ", ", ", s.") + `
  FROM (SELECT d.*, max(d.id) OVER (PARTITION BY d.xid) AS last FROM d) s
  ORDER BY s.last, s.id
  RETURNING ` + returning + `
)`
}

// validName checks a name tide puts into SQL identifiers: lower-case
// letters, digits and underscores, not starting with a digit.
func validName(s string, max int) error {
	if s == "" {
		return errors.New("empty name")
	}
	if len(s) > max {
		return fmt.Errorf("%q is longer than %d bytes", s, max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || c >= '0' && c <= '9' && i > 0) {
			return fmt.Errorf("%q must be lower-case letters, digits and underscores, not starting with a digit", s)
		}
	}
	return nil
}

// shortIdent returns s if it fits in a Postgres identifier (63 bytes), or a
// prefix of it with a hash of the whole, so distinct long names stay
// distinct.
func shortIdent(s string) string {
	if len(s) <= 63 {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return s[:54] + "_" + hex.EncodeToString(h[:4])
}

// quoteLit quotes s as an SQL string literal (standard_conforming_strings).
func quoteLit(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// tableIdent quotes a possibly schema-qualified table name.
func tableIdent(table string) string {
	return pgx.Identifier(strings.Split(table, ".")).Sanitize()
}
