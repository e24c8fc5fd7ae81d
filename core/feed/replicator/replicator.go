package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/backoff"
	"github.com/tidesync/tide/internal/pgconnect"
)

// Defaults of Config.
const (
	DefaultMinBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff    = 2 * time.Second
	DefaultCheckInterval = time.Second
	DefaultPruneInterval = time.Minute
	DefaultBatch         = 1024
)

// LockClass is the first key of the replicator's advisory lock ("tidr" as
// a big-endian int32); the second is the CRC-32 of the feed's schema name,
// as for pgfeed's own locks, so two tide schemas in one database elect
// independently.
const LockClass int32 = 0x74696472

// Publisher is the transport a leader publishes the change log to
// (natsbus.Bus implements it). Nil in Config means the Postgres bus: the
// change log itself is the bus, so there is nothing to publish.
type Publisher interface {
	// Resume starts a term. It returns the position of the last change the
	// transport holds, after which the leader publishes. If the transport
	// holds none (or fresh is set because the feed no longer retains the
	// changes after it), it starts after head and returns head.
	Resume(ctx context.Context, epoch string, head feed.Position, fresh bool) (feed.Position, error)
	// Publish publishes changes, in position order, each above the last
	// published. It returns how many were stored and how many the
	// transport already had (duplicates). After an error the leader calls
	// Resume again.
	Publish(ctx context.Context, changes []feed.Change) (stored, duplicates int, err error)
}

// Config configures a Replicator. Feed and Pool are required; every other
// field documents its zero-value default.
type Config struct {
	// Feed is the change log to tail (the node's pgfeed.Feed). Its schema
	// names the lock, so there is one leader per change log.
	Feed *pgfeed.Feed
	// Pool gives the connection settings of the dedicated connection that
	// holds the lock (a connection of its own, never one of the pool's, so
	// the lock lives exactly as long as that session).
	Pool *pgxpool.Pool
	// Publisher is where the leader publishes. Zero value: nil, the
	// Postgres bus (nothing is published; the leader only runs the
	// singleton work).
	Publisher Publisher

	// MinBackoff and MaxBackoff bound the full-jitter backoff between
	// attempts to take the lock (and between retries after errors): the
	// n-th wait is random in [0, min(MaxBackoff, MinBackoff·2^n)]. A
	// standby therefore retries at least every MaxBackoff, which bounds
	// how long a dead leader's lock stays unclaimed. A leader that lost
	// the lock waits MaxBackoff plus a jittered MaxBackoff before trying
	// again, so a standby takes over. Zero values: 100 ms and 2 s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// CheckInterval is how often the leader pings its lock connection;
	// a failed ping ends its term. Zero value: 1 s.
	CheckInterval time.Duration
	// PruneInterval is how often the leader runs the feed's Prune (the
	// retention of pgfeed; do not also call Feed.StartPruner, though that
	// is harmless). Zero value: 1 minute. Negative: the replicator does not
	// prune.
	PruneInterval time.Duration
	// Batch is the most changes read from the feed and published at once
	// (more for a commit group larger than it, up to feed.MaxCommitGroup):
	// a batch ends at a commit boundary, so nodes deliver each group
	// whole. Zero value: 1024.
	Batch int

	// Logger receives operational events. Zero value: slog.Default().
	Logger *slog.Logger
	// Tracer, if set, starts a "tide.replicator.publish" span per batch the
	// leader publishes (tideotel.New(tp) is one). Zero value: no spans.
	Tracer core.Tracer
}

func (c Config) withDefaults() Config {
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.CheckInterval <= 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = DefaultPruneInterval
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Role is a replicator's place in the election.
type Role int

// Roles.
const (
	RoleStarting Role = iota // not started, or before its first lock attempt answered
	RoleStandby              // another session holds the lock; retrying
	RoleLeader               // holds the lock: publishes (and prunes)
	RoleStopped              // closed
)

// String returns "starting", "standby", "leader" or "stopped".
func (r Role) String() string {
	switch r {
	case RoleStarting:
		return "starting"
	case RoleStandby:
		return "standby"
	case RoleLeader:
		return "leader"
	case RoleStopped:
		return "stopped"
	}
	return "invalid"
}

// MarshalText implements encoding.TextMarshaler.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Status is a snapshot of a replicator's state and counters.
//
// Ready is true when the node's role is healthy:
//   - leader: its lock connection answered its last ping, and its last
//     read of the feed and publish succeeded (or, with the Postgres bus,
//     there is nothing to publish);
//   - standby: its last attempt at the lock reached Postgres and was told
//     that another session holds it, so it can take over when that one dies.
//
// It is false while starting, after Close, while the feed's schema is not
// installed (Reason starts with "not migrated:"), and while the last
// attempt (connecting, locking, reading, publishing) failed; Reason then
// says why.
type Status struct {
	Role   Role      `json:"role"`             // leader, standby, starting or stopped
	Ready  bool      `json:"ready"`            // the role is healthy (see above)
	Reason string    `json:"reason,omitempty"` // why not ready
	Since  time.Time `json:"since"`            // when Role was entered
	// Terms counts the times this replicator became leader.
	Terms int64 `json:"terms"`
	// LostLock counts the terms that ended while the replicator ran: its
	// lock connection failed, so a standby may take over (a term ended by
	// Close is not counted).
	LostLock int64 `json:"lost_lock"`
	// LockPID is the Postgres backend process id of the dedicated
	// connection (0 when there is none): the session whose end releases the
	// lock.
	LockPID uint32 `json:"lock_pid,omitempty"`
	// Published counts changes stored by the transport; Skipped, changes
	// read at or below the last published position (repeats of the
	// at-least-once feed) or acknowledged by the transport as already
	// stored; OutOfOrder, changes read below the previous change of their
	// batch. Skipped and out-of-order changes are dropped.
	Published  int64 `json:"published"`
	Skipped    int64 `json:"skipped"`
	OutOfOrder int64 `json:"out_of_order"`
	// LastPublished is the position of the last change this replicator
	// published (or found published when its term began).
	LastPublished feed.Position `json:"last_published"`
	// Floor is the feed's retained floor after this replicator's last
	// prune (0 if it has not pruned).
	Floor feed.Position `json:"floor,omitempty"`
}

// Replicator is one node's candidate for the database's replicator role.
// Run one per app node; the Postgres advisory lock makes exactly one of them
// leader per change log. Create it with New, start it with Start, stop it
// with Close.
type Replicator struct {
	cfg  Config
	key  int32
	log  *slog.Logger
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	st      Status
	changed chan struct{} // closed and replaced on every update
}

// New validates cfg and returns a replicator. It does no I/O.
func New(cfg Config) (*Replicator, error) {
	if cfg.Feed == nil || cfg.Pool == nil {
		return nil, errors.New("replicator: Config.Feed and Config.Pool are required")
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Replicator{
		cfg:     cfg,
		key:     int32(crc32.ChecksumIEEE([]byte(cfg.Feed.Schema()))),
		log:     cfg.Logger,
		ctx:     ctx,
		stop:    cancel,
		done:    make(chan struct{}),
		st:      Status{Role: RoleStarting, Reason: "not started", Since: time.Now()},
		changed: make(chan struct{}),
	}, nil
}

// LockKey returns the two keys of the advisory lock the leader holds:
// pg_try_advisory_lock(LockClass, key).
func (r *Replicator) LockKey() (int32, int32) { return LockClass, r.key }

// Node returns the name this node goes by: its feed's (pgfeed.Options.Node).
func (r *Replicator) Node() string { return r.cfg.Feed.Node() }

// Roles implements feed.RoleReporter: this node's part in the replicator
// election, and the node holding the role, read from the database.
func (r *Replicator) Roles(ctx context.Context) ([]feed.Role, error) {
	role := feed.Role{Name: pgfeed.RoleReplicator, State: r.Status().Role.String()}
	h, err := pgfeed.LockHolder(ctx, r.cfg.Pool, LockClass, r.key)
	if err != nil {
		return nil, fmt.Errorf("replicator: reading the role's holder: %w", err)
	}
	if h != nil {
		role.HolderPID = h.PID
		role.Holder = h.Application
		if node, ok := pgfeed.ParseRoleAppName(pgfeed.RoleReplicator, h.Application); ok {
			role.Holder = node
		}
	}
	return []feed.Role{role}, nil
}

// Start runs the replicator on a goroutine until Close. It also makes the
// node's feed a candidate for the sequencer role (pgfeed.Feed.StartSequencer;
// the feed's Close stops it), so every node can take that role over, not
// only those that have tailed the feed. Calling it again does nothing.
func (r *Replicator) Start() {
	r.once.Do(func() {
		r.cfg.Feed.StartSequencer()
		go r.run()
	})
}

// Close stops the replicator: a leader stops publishing and closes its lock
// connection, which releases the lock for a standby. It waits for the
// replicator's goroutines. Close is idempotent.
func (r *Replicator) Close() error {
	r.stop()
	r.once.Do(func() { close(r.done) }) // never started: nothing to wait for
	<-r.done
	r.update(func(s *Status) {
		s.Role, s.Ready, s.Reason, s.LockPID, s.Since = RoleStopped, false, "closed", 0, time.Now()
	})
	return nil
}

// Status returns the replicator's current status.
func (r *Replicator) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// Wait blocks until ok holds for the status (checked now and after every
// update) and returns that status, or returns ctx's error.
func (r *Replicator) Wait(ctx context.Context, ok func(Status) bool) (Status, error) {
	for {
		r.mu.Lock()
		st, ch := r.st, r.changed
		r.mu.Unlock()
		if ok(st) {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// Handler returns the readiness endpoint of the replicator role. GET
// answers the Status as JSON, with 200 while this node is the ready leader
// and 503 otherwise: a standby reports not ready, as do a node that is
// starting, failing or closed. With ?role=any it answers 200 for any
// healthy role, standby included: use that form for load-balancer health,
// since every app node runs a replicator and a standby is a healthy node.
func (r *Replicator) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		st := r.Status()
		ok := st.Ready && (st.Role == RoleLeader || req.URL.Query().Get("role") == "any")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(st)
	})
}

func (r *Replicator) update(f func(*Status)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.st)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Replicator) setRole(role Role, ready bool, reason string, pid uint32) {
	r.update(func(s *Status) {
		if s.Role != role {
			s.Since = time.Now()
		}
		s.Role, s.Ready, s.Reason, s.LockPID = role, ready, reason, pid
	})
}

func (r *Replicator) setHealth(ready bool, reason string) {
	r.mu.Lock()
	same := r.st.Ready == ready && r.st.Reason == reason
	r.mu.Unlock()
	if !same {
		r.update(func(s *Status) { s.Ready, s.Reason = ready, reason })
	}
}

// run is the election loop: try the lock on a dedicated connection; lead
// while holding it; otherwise wait a jittered backoff and try again.
func (r *Replicator) run() {
	defer close(r.done)
	ctx := r.ctx
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			closeConn(conn)
		}
	}()
	attempt := 0
	for ctx.Err() == nil {
		if conn == nil {
			c, err := r.connect(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.setRole(r.Status().Role, false, "connect: "+err.Error(), 0)
				r.log.Warn("replicator: cannot connect to Postgres; retrying", "err", err, "attempt", attempt)
				r.sleep(ctx, attempt)
				attempt++
				continue
			}
			conn = c
		}
		pid := conn.PgConn().PID()
		if err := r.installed(ctx, conn); err != nil {
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, feed.ErrNotInstalled) {
				closeConn(conn)
				conn = nil
			}
			r.setRole(r.Status().Role, false, err.Error(), 0)
			r.log.Warn("replicator: "+err.Error(), "attempt", attempt)
			r.sleep(ctx, attempt)
			attempt++
			continue
		}
		got, err := r.tryLock(ctx, conn)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			closeConn(conn)
			conn = nil
			r.setRole(r.Status().Role, false, "lock: "+err.Error(), 0)
			r.log.Warn("replicator: lock attempt failed; retrying", "err", err, "attempt", attempt)
			r.sleep(ctx, attempt)
			attempt++
			continue
		}
		if !got {
			r.setRole(RoleStandby, true, "", pid)
			r.sleep(ctx, attempt)
			attempt++
			continue
		}
		r.lead(ctx, conn, pid)
		closeConn(conn) // releases the lock if the session still lives
		conn = nil
		attempt = 0
		if ctx.Err() != nil {
			return
		}
		r.update(func(s *Status) {
			s.Role, s.Ready, s.Reason, s.LockPID, s.Since = RoleStandby, false, "lost the lock; waiting before trying again", 0, time.Now()
			s.LostLock++
		})
		// Let a standby take over: they retry at least every MaxBackoff.
		if !backoff.Sleep(ctx, r.cfg.MaxBackoff+backoff.Delay(0, r.cfg.MaxBackoff, r.cfg.MaxBackoff)) {
			return
		}
	}
}

func (r *Replicator) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg := r.cfg.Pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = pgfeed.RoleAppName(pgfeed.RoleReplicator, r.cfg.Feed.Node())
	return pgconnect.Retry(ctx, r.log, "replicator", func(ctx context.Context) (*pgx.Conn, error) {
		cctx, cancel := context.WithTimeout(ctx, max(5*time.Second, r.cfg.CheckInterval))
		defer cancel()
		return pgx.ConnectConfig(cctx, cfg)
	})
}

// installed returns an error wrapping feed.ErrNotInstalled if the feed's
// schema lacks tide's tables: Migrate has not run, so there is nothing to
// replicate and the node is not ready.
func (r *Replicator) installed(ctx context.Context, conn *pgx.Conn) error {
	cctx, cancel := context.WithTimeout(ctx, max(5*time.Second, r.cfg.CheckInterval))
	defer cancel()
	var ok bool
	schema := r.cfg.Feed.Schema()
	if err := conn.QueryRow(cctx, "SELECT pg_catalog.to_regclass(pg_catalog.quote_ident($1) || '.meta') IS NOT NULL", schema).Scan(&ok); err != nil {
		return fmt.Errorf("check the feed's schema: %w", err)
	}
	if !ok {
		return fmt.Errorf("not migrated: %w: schema %q lacks tide's tables; call Migrate on the feed with the engine's schemas (tide.Open does)", feed.ErrNotInstalled, schema)
	}
	return nil
}

func (r *Replicator) tryLock(ctx context.Context, conn *pgx.Conn) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, max(5*time.Second, r.cfg.CheckInterval))
	defer cancel()
	var got bool
	err := conn.QueryRow(cctx, "SELECT pg_try_advisory_lock($1, $2)", LockClass, r.key).Scan(&got)
	return got, err
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

func (r *Replicator) sleep(ctx context.Context, attempt int) bool {
	return backoff.Sleep(ctx, backoff.Delay(attempt, r.cfg.MinBackoff, r.cfg.MaxBackoff))
}

// lead runs one term: it keeps checking the lock connection, prunes, and
// publishes, until the connection fails or ctx ends.
func (r *Replicator) lead(ctx context.Context, conn *pgx.Conn, pid uint32) {
	r.update(func(s *Status) {
		s.Role, s.Ready, s.Reason, s.LockPID, s.Since = RoleLeader, true, "", pid, time.Now()
		s.Terms++
	})
	r.log.Info("replicator: took the lock; leading", "schema", r.cfg.Feed.Schema(), "pid", pid)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		r.keep(ctx, conn)
	}()
	if r.cfg.PruneInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.prune(ctx)
		}()
	}
	if r.cfg.Publisher != nil {
		r.publish(ctx)
	} else {
		<-ctx.Done()
	}
	cancel()
	wg.Wait()
}

// keep pings the lock connection every CheckInterval and returns when a
// ping fails (the session, and with it the lock, is gone) or ctx ends.
func (r *Replicator) keep(ctx context.Context, conn *pgx.Conn) {
	t := time.NewTicker(r.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, max(time.Second, r.cfg.CheckInterval))
		err := conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("replicator: lock connection lost; stepping down", "err", err)
				r.setHealth(false, "lock connection lost")
			}
			return
		}
	}
}

func (r *Replicator) prune(ctx context.Context) {
	for {
		floor, err := r.cfg.Feed.Prune(ctx)
		switch {
		case err == nil:
			r.update(func(s *Status) { s.Floor = floor })
		case ctx.Err() == nil:
			r.log.Error("replicator: prune failed", "err", err)
		}
		if !backoff.Sleep(ctx, r.cfg.PruneInterval) {
			return
		}
	}
}

// publish tails the feed and publishes it, resuming after the transport's
// last change, until ctx ends.
func (r *Replicator) publish(ctx context.Context) {
	f, pub := r.cfg.Feed, r.cfg.Publisher
	fresh := false
	for attempt := 0; ctx.Err() == nil; {
		fail := func(what string, err error) {
			if ctx.Err() != nil {
				return
			}
			r.setHealth(false, what+": "+err.Error())
			r.log.Warn("replicator: "+what+" failed; resuming", "err", err, "attempt", attempt)
			r.sleep(ctx, attempt)
			attempt++
		}
		head, err := f.Head(ctx)
		if err != nil {
			fail("feed head", err)
			continue
		}
		after, err := pub.Resume(ctx, f.Epoch(), head, fresh)
		if err == nil && after > head {
			// Positions the log has not reached: a database restored from
			// a backup, whose positions will be reused. Publishing after
			// them would skip those changes.
			err = fmt.Errorf("the stream is ahead of the change log (at %d, head %d): was the database restored? delete the stream", after, head)
		}
		if err != nil {
			fail("resume", err)
			continue
		}
		fresh = false
		r.update(func(s *Status) { s.LastPublished, s.Ready, s.Reason = after, true, "" })
		last := after // the last position published
		for ctx.Err() == nil {
			// Whole commit groups: nodes deliver the changes of a group
			// together once they have all of them.
			changes, err := feed.TailCommits(ctx, f, after, r.cfg.Batch)
			if errors.Is(err, feed.ErrCursorExpired) {
				// The transport's last change is older than what the feed
				// retains: start a new chain at the head (nodes resync).
				r.log.Warn("replicator: the feed no longer holds the changes after the last published one; starting over at its head", "after", after)
				fresh = true
				break
			}
			if err != nil {
				fail("feed tail", err)
				break
			}
			var kept []feed.Change
			var skipped, ooo int64
			for _, c := range changes {
				switch {
				case c.Pos <= last:
					skipped++
				case len(kept) > 0 && c.Pos <= kept[len(kept)-1].Pos:
					ooo++
				default:
					kept = append(kept, c)
				}
			}
			if ooo > 0 {
				r.log.Error("replicator: the feed returned changes out of position order; dropped them", "count", ooo)
			}
			stored, dups, err := 0, 0, error(nil)
			if len(kept) > 0 {
				stored, dups, err = r.publishBatch(ctx, kept)
			}
			r.update(func(s *Status) {
				s.Published += int64(stored)
				s.Skipped += skipped + int64(dups)
				s.OutOfOrder += ooo
				if stored > 0 {
					s.LastPublished = kept[stored-1].Pos
				}
				if err == nil {
					s.Ready, s.Reason = true, ""
				}
			})
			if err != nil {
				fail("publish", fmt.Errorf("after %d stored: %w", stored, err))
				break
			}
			attempt = 0
			if len(kept) > 0 {
				last = kept[len(kept)-1].Pos
			}
			if len(changes) > 0 {
				after = max(after, changes[len(changes)-1].Pos)
			}
		}
	}
}

// publishBatch publishes changes, in a "tide.replicator.publish" span when
// a Tracer is configured.
func (r *Replicator) publishBatch(ctx context.Context, changes []feed.Change) (stored, dups int, err error) {
	if r.cfg.Tracer == nil {
		return r.cfg.Publisher.Publish(ctx, changes)
	}
	ctx, span := r.cfg.Tracer.Start(ctx, "tide.replicator.publish",
		core.IntAttr("tide.changes", int64(len(changes))),
		core.IntAttr("tide.position.first", int64(changes[0].Pos)),
		core.IntAttr("tide.position", int64(changes[len(changes)-1].Pos)))
	stored, dups, err = r.cfg.Publisher.Publish(ctx, changes)
	span.SetAttrs(core.IntAttr("tide.stored", int64(stored)), core.IntAttr("tide.duplicates", int64(dups)))
	span.End(err)
	return stored, dups, err
}
