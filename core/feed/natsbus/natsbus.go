package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed"
)

// Defaults of Options.
const (
	DefaultPrefix            = "tide"
	DefaultMaxAge            = 24 * time.Hour
	DefaultMaxMsgs           = 10_000_000
	DefaultMaxBytes          = 4 << 30 // 4 GiB
	DefaultDuplicates        = 2 * time.Minute
	DefaultMaxFilterSubjects = 256
	DefaultRequestTimeout    = 5 * time.Second
	DefaultPrefetch          = 1024
	DefaultHeartbeat         = 5 * time.Second
)

// Options configures a Bus. The zero value is ready to use; every field
// documents its zero-value default. Every node of an app must use the same
// Prefix, Stream and limits (New updates the stream's limits to its own).
type Options struct {
	// Prefix starts every subject: changes are published under
	// "<Prefix>.change.<resource>.<tenant>". One or more tokens of ASCII
	// letters, digits, '-' and '_' separated by dots. Zero value: "tide".
	Prefix string
	// Stream is the JetStream stream holding the changes (subjects
	// "<Prefix>.change.>"). Zero value: Prefix upper-cased with dots as
	// underscores, plus "_CHANGES" ("TIDE_CHANGES").
	Stream string

	// MaxAge, MaxMsgs and MaxBytes are the stream's retention limits: the
	// oldest changes are dropped past any of them. A node that falls further
	// behind resyncs its subscriptions from Postgres (never a gap). Zero
	// values: 24 hours, 10,000,000 messages, 4 GiB. Negative: unlimited
	// (MaxAge cannot be unlimited: a bus must forget).
	MaxAge   time.Duration
	MaxMsgs  int64
	MaxBytes int64
	// Duplicates is JetStream's de-duplication window: a message whose
	// Nats-Msg-Id ("<epoch>.<pos>") was stored within it is acknowledged as
	// a duplicate and not stored again. It must cover a replicator
	// failover. Zero value: 2 minutes (at most MaxAge).
	Duplicates time.Duration
	// Replicas is the stream's replication factor in a NATS cluster. Zero
	// value: 1.
	Replicas int
	// MemoryStorage keeps the stream in memory instead of on disk (tests).
	MemoryStorage bool

	// MaxFilterSubjects bounds the filter subjects of a node's consumer;
	// past it the resources with the most tenants are consumed whole
	// ("<prefix>.change.<resource>.*"). Zero value: 256.
	MaxFilterSubjects int
	// RequestTimeout bounds each JetStream API request and publish
	// acknowledgement. Zero value: 5 s.
	RequestTimeout time.Duration
	// Prefetch is the most messages a node's consumer buffers ahead of the
	// engine. Zero value: 1024.
	Prefetch int
	// Heartbeat is the idle heartbeat of a node's pull requests; two missed
	// heartbeats make the node recreate its consumer. Zero value: 5 s.
	Heartbeat time.Duration

	// Logger receives operational events. Zero value: slog.Default().
	Logger *slog.Logger

	// multiFilter overrides the server-version check (tests): 0 detect,
	// 1 force multiple filter subjects off, 2 force them on.
	multiFilter int
	// idleProbe is how long a reader waits without messages before it
	// probes whether it may move seq forward. Zero value: 30 s.
	idleProbe time.Duration
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Stream == "" {
		o.Stream = defaultStream(o.Prefix)
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxMsgs == 0 {
		o.MaxMsgs = DefaultMaxMsgs
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Duplicates <= 0 {
		o.Duplicates = min(DefaultDuplicates, o.MaxAge)
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxFilterSubjects <= 0 {
		o.MaxFilterSubjects = DefaultMaxFilterSubjects
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Prefetch <= 0 {
		o.Prefetch = DefaultPrefetch
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.idleProbe <= 0 {
		o.idleProbe = 30 * time.Second
	}
	return o
}

// Bus is the NATS JetStream bus. On a node's engine it is the Bus
// (core.Config.Bus): Tail reads the changes of the topics the node's
// subscriptions need. On the node's replicator it is the Publisher
// (replicator.Config.Publisher): the elected leader publishes the change log
// into the stream. A Bus is safe for concurrent use; Tail must be called by
// one goroutine at a time (the engine's tailer).
type Bus struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	feed   feed.Feed
	opts   Options
	log    *slog.Logger
	all    string // "<prefix>.change.>"
	stats  counters
	wg     sync.WaitGroup // consumer deletions

	// Consumer side, guarded by mu. See interest.go, reader.go, tail.go
	// and retention.go.
	mu       sync.Mutex
	want     map[feed.Topic]struct{}
	wantSubj map[string]struct{} // exact subjects of tenant topics
	wantRes  map[string]struct{} // "<prefix>.change.<resource>." of whole-resource topics
	gen      uint64              // bumped whenever the reader must be rebuilt
	kick     chan struct{}       // closed and replaced when gen moves or want empties
	cver     uint64              // bumped whenever seq/kp are moved outside Tail
	started  bool                // Tail has been called
	needPos  bool                // seq must be found for pos before reading
	pos      feed.Position       // the last position Tail returned (the engine's `after`)
	kp       feed.Position       // every interesting change at or below kp has been returned or is covered
	covered  feed.Position       // position of the last message seen (returned or skipped), at least pos
	seq      uint64              // every interesting message at or below seq has been seen
	rd       *reader             // the current reader, built for rdGen
	rdGen    uint64
	closed   bool

	// Publisher side, guarded by pubMu. See publish.go.
	pubMu sync.Mutex
	pub   pubState
}

var _ feed.Bus = (*Bus)(nil)
var _ feed.Interested = (*Bus)(nil)

// New returns a bus on nc for the engine whose feed is f (the bus reads
// its epoch, to recognize messages of its own change log). It creates the
// stream, or updates its limits to opts. It does not close nc.
func New(ctx context.Context, nc *nats.Conn, f feed.Feed, opts Options) (*Bus, error) {
	if nc == nil || f == nil {
		return nil, errors.New("natsbus: New needs a NATS connection and the engine's feed")
	}
	opts = opts.withDefaults()
	if err := validPrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if err := validStream(opts.Stream); err != nil {
		return nil, err
	}
	if opts.Duplicates > opts.MaxAge {
		return nil, fmt.Errorf("natsbus: Duplicates %s exceeds MaxAge %s", opts.Duplicates, opts.MaxAge)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(opts.RequestTimeout), jetstream.WithDefaultTimeout(opts.RequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("natsbus: %w", err)
	}
	b := &Bus{
		nc: nc, js: js, feed: f, opts: opts, log: opts.Logger,
		all:      opts.Prefix + ".change.>",
		want:     map[feed.Topic]struct{}{},
		wantSubj: map[string]struct{}{},
		wantRes:  map[string]struct{}{},
		kick:     make(chan struct{}),
	}
	if b.stream, err = b.ensureStream(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// StreamConfig returns the configuration New gives the stream (Name is
// the stream's name), for provisioning or inspecting it with other tools.
func (b *Bus) StreamConfig() jetstream.StreamConfig {
	o := b.opts
	st := jetstream.FileStorage
	if o.MemoryStorage {
		st = jetstream.MemoryStorage
	}
	return jetstream.StreamConfig{
		Name:        o.Stream,
		Description: "tide change log (" + o.Prefix + ")",
		Subjects:    []string{b.all},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      o.MaxAge,
		MaxMsgs:     o.MaxMsgs,
		MaxBytes:    o.MaxBytes,
		Duplicates:  o.Duplicates,
		Replicas:    o.Replicas,
		Storage:     st,
	}
}

func (b *Bus) ensureStream(ctx context.Context) (jetstream.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	s, err := b.js.CreateOrUpdateStream(ctx, b.StreamConfig())
	if err != nil {
		return nil, fmt.Errorf("natsbus: stream %s: %w", b.opts.Stream, err)
	}
	return s, nil
}

// info returns the stream's info.
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

// Close stops the node's consumer. It does not close the NATS connection.
// Tail returns an error afterwards.
func (b *Bus) Close() error {
	if rd := b.shut(); rd != nil {
		b.stopReader(rd)
	}
	b.wg.Wait()
	return nil
}

// shut marks the bus closed, wakes Tail and takes the current reader out of
// use, returning it to stop.
func (b *Bus) shut() *reader {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	rd := b.rd
	b.rd = nil
	b.bumpLocked()
	return rd
}

// ErrClosed is returned by Tail after Close.
var ErrClosed = errors.New("natsbus: bus is closed")

// supportsMultiFilter reports whether the connected server takes several
// filter subjects per consumer (nats-server 2.10 or later).
func (b *Bus) supportsMultiFilter() bool {
	switch b.opts.multiFilter {
	case 1:
		return false
	case 2:
		return true
	}
	v := strings.TrimPrefix(b.nc.ConnectedServerVersion(), "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 10
}
