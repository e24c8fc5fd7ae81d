package logrepl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Config configures a Consumer. ConnString, Slot and Publication are
// required; the zero value of every other field means its default.
type Config struct {
	// ConnString is a Postgres URL or keyword/value string. The consumer
	// adds replication=database to it for its stream: the role needs the
	// REPLICATION attribute (or to be a superuser) and pg_hba.conf must let
	// it connect for replication, which a "host all" line does with a
	// database connection. Figures also opens a plain connection with it.
	ConnString string
	// Slot is the logical replication slot to stream from (EnsureSlot
	// makes it; SlotName names it for a tide schema).
	Slot string
	// Publication names the tables whose changes are streamed
	// (EnsurePublication makes it; PublicationName names it).
	Publication string

	// StatusInterval is how often the consumer reports its confirmed
	// position to the server when nothing else makes it (zero means 10 s);
	// a position that the handler moved is reported within a tenth of it.
	// A confirmed transaction is re-delivered after a crash if its
	// position had not been reported yet: the interval bounds that window,
	// not correctness. A stream silent for three intervals, despite a
	// report that asked for a reply, is given up (ErrSilent).
	StatusInterval time.Duration
	// Messages asks the server for the transactional logical decoding
	// messages of each transaction (pgoutput's messages option, Postgres
	// 14 and later), delivered in Tx.Messages; a transaction that emitted
	// messages and changed no published table is then delivered too. Zero
	// value: false, no messages.
	Messages bool
	// MaxPieceChanges is the most changes one Tx holds (zero means
	// 10,000): a larger transaction arrives in pieces (see Tx.More).
	MaxPieceChanges int
	// MaxPieceBytes bounds the size of one Tx, counting values' text and a
	// small overhead per change and column (zero means 32 MiB): a larger
	// transaction arrives in pieces. Only a piece of one change larger than
	// the limit passes it.
	MaxPieceBytes int

	// MaxBatchChanges is the most changes RunBatches gathers into one
	// batch (zero means 4,096); a transaction is never split to respect
	// it, so a batch of one transaction may hold more.
	MaxBatchChanges int
	// BatchWait is the longest RunBatches holds a transaction back to
	// gather more into its batch (zero means 5 ms). A batch is handed
	// over sooner when the server says it has sent everything committed
	// (its keepalive) or the batch is full.
	BatchWait time.Duration
}

// Defaults of Config's optional fields.
const (
	DefaultStatusInterval  = 10 * time.Second
	DefaultMaxPieceChanges = 10_000
	DefaultMaxPieceBytes   = 32 << 20
	DefaultMaxBatchChanges = 4096
	DefaultBatchWait       = 5 * time.Millisecond
)

// WithDefaults returns c with every zero optional field set to its
// default.
func (c Config) WithDefaults() Config {
	if c.StatusInterval <= 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.MaxPieceChanges <= 0 {
		c.MaxPieceChanges = DefaultMaxPieceChanges
	}
	if c.MaxPieceBytes <= 0 {
		c.MaxPieceBytes = DefaultMaxPieceBytes
	}
	if c.MaxBatchChanges <= 0 {
		c.MaxBatchChanges = DefaultMaxBatchChanges
	}
	if c.BatchWait <= 0 {
		c.BatchWait = DefaultBatchWait
	}
	return c
}

func (c Config) validate() error {
	if c.ConnString == "" {
		return &Error{Code: CodeConfig, Msg: "Config.ConnString is empty"}
	}
	if err := checkName("slot", c.Slot); err != nil {
		return err
	}
	return checkName("publication", c.Publication)
}

// Handler receives each transaction, or piece of one, in commit order. It
// returns nil once it has durably taken the Tx: only then may the
// consumer confirm the transaction's position to the server. An error
// stops Run, which returns it; the transaction comes again on the next
// Run.
//
// The handler runs on Run's goroutine, which reads the stream: while it
// runs, the server's messages wait. A handler that takes longer than the
// server's wal_sender_timeout (60 s by default) gets the stream cut;
// Run then returns an error, and nothing is lost.
type Handler func(ctx context.Context, tx *Tx) error

// BatchHandler receives transactions in commit order, several at a time
// (see RunBatches). It returns nil once it has durably taken every Tx of
// the batch: only then may the consumer confirm their positions. An error
// stops RunBatches, which returns it; the whole batch comes again on the
// next run (possibly gathered differently).
//
// A batch holds whole transactions, except that a transaction that
// arrives in pieces (Tx.More) ends a batch with each piece but its last,
// so its next piece begins the next batch. The slice and its Txs belong
// to the handler. It runs on the stream's goroutine, as a Handler does.
type BatchHandler func(ctx context.Context, txs []*Tx) error

// Consumer streams committed transactions from a logical replication slot
// to a Handler (see Run). Its methods are safe for concurrent use; Run
// runs once at a time.
type Consumer struct {
	cfg  Config
	conn *pgconn.Config // the stream's: replication=database
	db   *pgx.ConnConfig

	running atomic.Bool

	confirmed    atomic.Uint64 // accepted by the handler, or passed idle
	flushed      atomic.Uint64 // last reported to the server
	walEnd       atomic.Uint64
	lastCommit   atomic.Int64 // unix ns of the last accepted commit
	transactions atomic.Uint64
	changes      atomic.Uint64

	// crash, set by tests, makes Run return on a handler error without
	// reporting its confirmed position or ending the stream: as if the
	// process had died.
	crash bool
	// onKeepalive, set by tests, sees the confirmed position after each
	// keepalive.
	onKeepalive func(confirmed uint64)
	// grace is keepaliveGrace; tests lengthen it so that only a batch's
	// bounds cut it.
	grace time.Duration
	// progress is how soon a moved position is reported: a tenth of
	// Config.StatusInterval; tests lengthen it to keep a position
	// unreported.
	progress time.Duration
}

// NewConsumer checks cfg and returns a Consumer. It does no I/O.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgconn.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, &Error{Code: CodeConfig, Msg: "Config.ConnString", Err: err}
	}
	db, err := pgx.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, &Error{Code: CodeConfig, Msg: "Config.ConnString", Err: err}
	}
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	pc.RuntimeParams["replication"] = "database"
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = "tide logrepl " + cfg.Slot
	}
	return &Consumer{cfg: cfg, conn: pc, db: db, grace: keepaliveGrace, progress: cfg.StatusInterval / 10}, nil
}

// Run streams the slot's transactions to h until ctx ends, h returns an
// error, or the stream fails, and returns why (ctx.Err() when ctx ended).
// It blocks. It starts at the slot's confirmed position, so each Run
// delivers every transaction committed after the last one a previous Run
// confirmed: at least once, in commit order. Call it again (after a
// backoff) to resume; the slot serves one Run at a time, server-wide
// (ErrSlotInUse otherwise).
//
// Errors: ErrWALLevel when the server's wal_level is not logical,
// ErrNoSlot when the slot does not exist, ErrSlotLost when the server
// invalidated it, ErrSlotInUse, ErrMalformed,
// ErrSilent, ErrBusy when this Consumer's Run already runs, or h's error
// wrapped ("handler: ..."), or a connection error.
func (c *Consumer) Run(ctx context.Context, h Handler) error {
	return c.run(ctx, func(ctx context.Context, txs []*Tx) error { return h(ctx, txs[0]) }, false)
}

// RunBatches is Run with a handler that takes several transactions at a
// time: while transactions keep arriving, the consumer gathers them, up
// to Config.MaxBatchChanges changes or Config.BatchWait after the first,
// and hands them over together once the server has sent everything it
// has or either bound is reached. A handler that writes each batch in one
// local transaction pays one commit for many, so it keeps up with more
// writers than Run's one commit per transaction. It delivers and confirms
// as Run does, a batch at a time, and returns the same errors.
func (c *Consumer) RunBatches(ctx context.Context, h BatchHandler) error {
	return c.run(ctx, h, true)
}

// run is Run, handing over one transaction (or piece) at a time, or
// RunBatches when batched.
func (c *Consumer) run(ctx context.Context, h BatchHandler, batched bool) error {
	if !c.running.CompareAndSwap(false, true) {
		return &Error{Code: CodeBusy, Msg: "Run is already running for slot " + c.cfg.Slot}
	}
	defer c.running.Store(false)

	conn, err := pgconn.ConnectConfig(ctx, c.conn.Copy())
	if err != nil {
		return fmt.Errorf("logrepl: connect for replication: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	start, err := c.begin(ctx, conn)
	if err != nil {
		return err
	}
	c.confirmed.Store(start)
	c.flushed.Store(start)
	return c.stream(ctx, conn, h, batched, start)
}

// begin checks the server and the slot and starts the stream at the slot's
// confirmed position, which it returns.
func (c *Consumer) begin(ctx context.Context, conn *pgconn.PgConn) (uint64, error) {
	res, err := conn.Exec(ctx, "SHOW wal_level").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("logrepl: read wal_level: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, malformed("unexpected answer to SHOW wal_level")
	}
	if level := string(res[0].Rows[0][0]); level != "logical" {
		return 0, walLevelError(level)
	}
	// The name is checked (lower-case letters, digits, underscores), so it
	// may be written as a literal.
	res, err = conn.Exec(ctx, `SELECT coalesce(confirmed_flush_lsn::text, ''), coalesce(plugin, ''), coalesce(database = pg_catalog.current_database(), false)::text, coalesce(wal_status, '')
FROM pg_catalog.pg_replication_slots WHERE slot_name = '`+c.cfg.Slot+`'`).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("logrepl: read slot %s: %w", c.cfg.Slot, err)
	}
	if len(res) != 1 || len(res[0].Rows) == 0 {
		return 0, &Error{Code: CodeNoSlot, Msg: "slot " + c.cfg.Slot + " does not exist (EnsureSlot makes it)"}
	}
	row := res[0].Rows[0]
	if len(row) != 4 {
		return 0, malformed("unexpected answer about slot %s", c.cfg.Slot)
	}
	if string(row[1]) != "pgoutput" || string(row[2]) != "true" {
		return 0, &Error{Code: CodeSlotMismatch, Msg: fmt.Sprintf("slot %s has plugin %q or belongs to another database", c.cfg.Slot, row[1])}
	}
	if string(row[3]) == "lost" {
		return 0, slotLostError(c.cfg.Slot, nil)
	}
	start, err := pglogrepl.ParseLSN(string(row[0]))
	if err != nil {
		return 0, malformed("slot %s: confirmed position %q", c.cfg.Slot, row[0])
	}
	args := []string{"proto_version '1'", "publication_names '" + c.cfg.Publication + "'"}
	if c.cfg.Messages {
		args = append(args, "messages 'true'")
	}
	err = pglogrepl.StartReplication(ctx, conn, c.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: args,
	})
	if err != nil {
		return 0, slotError(c.cfg.Slot, err)
	}
	return uint64(start), nil
}

// keepaliveGrace is how long a batch waits for more transactions after
// the server said it had sent everything committed: commits that land
// meanwhile join it rather than wait for the next.
const keepaliveGrace = time.Millisecond

// pending is the batch being gathered.
type pending struct {
	txs     []*Tx
	changes int
	due     time.Time // when it is handed over at the latest
	// sent is a position the server said it had sent every commit below,
	// told while no transaction was open: confirmed once the batch is
	// taken. Zero if none.
	sent uint64
}

// stream reads the stream from start until it ends, handing h a batch at
// a time (a transaction, or piece, at a time unless batched).
func (c *Consumer) stream(ctx context.Context, conn *pgconn.PgConn, h BatchHandler, batched bool, start uint64) error {
	asm := newAssembler(c.cfg.MaxPieceChanges, c.cfg.MaxPieceBytes)
	confirmed := start
	interval := c.cfg.StatusInterval
	var b pending

	// Receiving a message must cost little, so no context is watched per
	// message: the end of ctx moves the socket's read deadline into the
	// past, and the deadline otherwise wakes the loop when a status report
	// or the batch is due.
	nc := conn.Conn()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	now := time.Now()
	nextStatus := now.Add(interval)
	heard := now    // last message from the server
	reported := now // last status report
	// fail ends the stream in order (the connection still works) and
	// returns err.
	fail := func(err error) error { return c.end(conn, confirmed, err) }
	// flush hands the batch to h and confirms what it took.
	flush := func() error {
		err := h(ctx, b.txs)
		// The stream was not read while the handler ran: its silence is
		// not the server's.
		now = time.Now()
		heard = now
		if err != nil {
			if c.crash {
				return fmt.Errorf("handler: %w", err)
			}
			return fail(fmt.Errorf("handler: %w", err))
		}
		c.changes.Add(uint64(b.changes))
		for _, tx := range b.txs {
			if tx.More {
				continue
			}
			c.transactions.Add(1)
			c.lastCommit.Store(tx.CommitTime.UnixNano())
			confirmed = max(confirmed, tx.EndLSN)
		}
		if !asm.inTx {
			confirmed = max(confirmed, b.sent)
		}
		c.confirmed.Store(confirmed)
		b = pending{}
		// Progress reaches the server within a tenth of the interval, so
		// the slot's lag and the WAL it keeps follow the consumer.
		if confirmed > c.flushed.Load() && now.Sub(reported) >= c.progress {
			if err := c.report(conn, confirmed, now, false); err != nil {
				return err
			}
			reported, nextStatus = now, now.Add(interval)
		}
		return nil
	}
	var deadline time.Time
	for {
		want := nextStatus
		if len(b.txs) > 0 && b.due.Before(want) {
			want = b.due
		}
		if !deadline.Equal(want) {
			deadline = want
			if err := nc.SetReadDeadline(deadline); err != nil {
				return fmt.Errorf("logrepl: %w", err)
			}
		}
		if ctx.Err() != nil {
			return c.end(conn, confirmed, ctx.Err())
		}
		msg, err := conn.ReceiveMessage(context.Background())
		now = time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return c.end(conn, confirmed, ctx.Err())
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return fmt.Errorf("logrepl: replication stream: %w", err)
			}
			if len(b.txs) > 0 && !now.Before(b.due) {
				if err := flush(); err != nil {
					return err
				}
			}
			if now.Before(nextStatus) {
				continue
			}
			if now.Sub(heard) >= 3*interval {
				return &Error{Code: CodeSilent, Msg: fmt.Sprintf("nothing from the server for %s", now.Sub(heard).Round(time.Second))}
			}
			// Ask for a reply when the server has been quiet since the
			// last report, so that a dead server shows.
			if err := c.report(conn, confirmed, now, heard.Before(reported)); err != nil {
				return err
			}
			reported, nextStatus = now, now.Add(interval)
			continue
		}
		heard = now
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				return fail(malformed("empty replication message"))
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				k, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fail(malformed("keepalive: %v", err))
				}
				end := uint64(k.ServerWALEnd)
				if end > c.walEnd.Load() {
					c.walEnd.Store(end)
				}
				// Outside a transaction, everything the server sent before
				// this keepalive has been handed over or is in the batch,
				// and the server sent every commit below its WAL end: the
				// slot may move there once the batch is taken, releasing
				// WAL that holds nothing for this publication. The server
				// has nothing more for now: the batch goes after a short
				// grace.
				if !asm.inTx && end > confirmed {
					if len(b.txs) == 0 {
						confirmed = end
						c.confirmed.Store(confirmed)
					} else {
						b.sent = max(b.sent, end)
					}
				}
				if len(b.txs) > 0 && now.Add(c.grace).Before(b.due) {
					b.due = now.Add(c.grace)
				}
				if c.onKeepalive != nil {
					c.onKeepalive(confirmed)
				}
				if k.ReplyRequested {
					if err := c.report(conn, confirmed, now, false); err != nil {
						return err
					}
					reported, nextStatus = now, now.Add(interval)
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fail(malformed("XLogData: %v", err))
				}
				if end := uint64(x.ServerWALEnd); end > c.walEnd.Load() {
					c.walEnd.Store(end)
				}
				piece, end, err := asm.message(x.WALData, confirmed)
				if err != nil {
					return fail(err)
				}
				if end > confirmed {
					// A transaction with nothing to hand over: confirmed
					// now if nothing waits in the batch, else with it.
					if len(b.txs) == 0 {
						confirmed = end
						c.confirmed.Store(confirmed)
					} else {
						b.sent = max(b.sent, end)
					}
				}
				if piece != nil {
					if len(b.txs) == 0 {
						b.due = now.Add(c.cfg.BatchWait)
					}
					b.txs = append(b.txs, piece)
					b.changes += len(piece.Changes)
					if !batched || piece.More || b.changes >= c.cfg.MaxBatchChanges {
						if err := flush(); err != nil {
							return err
						}
					}
				}
			default:
				// Other message kinds are not sent on a logical stream.
			}
		case *pgproto3.ErrorResponse:
			return slotError(c.cfg.Slot, pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("logrepl: the server ended the replication stream")
		}
		if now.After(nextStatus) {
			if err := c.report(conn, confirmed, now, false); err != nil {
				return err
			}
			reported, nextStatus = now, now.Add(interval)
		}
	}
}

// report sends a standby status update: confirmed as written, flushed and
// applied.
func (c *Consumer) report(conn *pgconn.PgConn, confirmed uint64, now time.Time, reply bool) error {
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(confirmed),
		WALFlushPosition: pglogrepl.LSN(confirmed),
		WALApplyPosition: pglogrepl.LSN(confirmed),
		ClientTime:       now,
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("logrepl: status update: %w", err)
	}
	c.flushed.Store(confirmed)
	return nil
}

// end reports the confirmed position and ends the stream in order, so the
// next Run starts right after it, and returns cause. It waits a few
// seconds at most.
func (c *Consumer) end(conn *pgconn.PgConn, confirmed uint64, cause error) error {
	nc := conn.Conn()
	if err := nc.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return cause
	}
	if err := c.report(conn, confirmed, time.Now(), false); err != nil {
		return cause
	}
	_, _ = pglogrepl.SendStandbyCopyDone(context.Background(), conn)
	return cause
}

// Figures are a consumer's positions and the WAL its slot keeps.
type Figures struct {
	// Confirmed is the position up to which every transaction was
	// accepted by the handler (or held nothing for the publication); it
	// reaches the server within Config.StatusInterval.
	Confirmed uint64
	// Flushed is the last position reported to the server.
	Flushed uint64
	// ServerWALEnd is how far the server has read its WAL for the stream,
	// as it last told.
	ServerWALEnd uint64
	// LastCommit is the commit time of the last accepted transaction; zero
	// before one.
	LastCommit time.Time
	// Transactions and Changes count what the handler accepted since the
	// Consumer was made.
	Transactions, Changes uint64
	// Slot is the server's view of the slot.
	Slot SlotFigures
}

// SlotFigures is a replication slot as pg_replication_slots shows it.
type SlotFigures struct {
	// Active is true while a consumer streams from the slot.
	Active bool
	// RestartLSN is the oldest WAL position the slot keeps;
	// ConfirmedFlushLSN the position its consumer confirmed.
	RestartLSN, ConfirmedFlushLSN uint64
	// CurrentLSN is the server's current WAL write position
	// (pg_current_wal_lsn()).
	CurrentLSN uint64
	// RetainedBytes is the WAL the slot keeps on the server's disk:
	// CurrentLSN - RestartLSN.
	RetainedBytes int64
	// LagBytes is how far the consumer is behind: CurrentLSN -
	// ConfirmedFlushLSN.
	LagBytes int64
}

// Figures returns the consumer's figures and its slot's, which it reads
// on a connection of its own (opened and closed per call). It is safe to
// call at any time, Run running or not.
func (c *Consumer) Figures(ctx context.Context) (Figures, error) {
	f := Figures{
		Confirmed:    c.confirmed.Load(),
		Flushed:      c.flushed.Load(),
		ServerWALEnd: c.walEnd.Load(),
		Transactions: c.transactions.Load(),
		Changes:      c.changes.Load(),
	}
	if ns := c.lastCommit.Load(); ns != 0 {
		f.LastCommit = time.Unix(0, ns)
	}
	conn, err := pgx.ConnectConfig(ctx, c.db)
	if err != nil {
		return f, fmt.Errorf("logrepl: figures: %w", err)
	}
	defer conn.Close(context.Background())
	f.Slot, err = ReadSlot(ctx, conn, c.cfg.Slot)
	return f, err
}

// ReadSlot returns the slot's figures from pg_replication_slots, or an
// error matching ErrNoSlot.
func ReadSlot(ctx context.Context, db DB, slot string) (SlotFigures, error) {
	var f SlotFigures
	var restart, confirmed, current string
	err := db.QueryRow(ctx, `SELECT active, coalesce(restart_lsn::text, '0/0'), coalesce(confirmed_flush_lsn::text, '0/0'), pg_catalog.pg_current_wal_lsn()::text,
  coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), restart_lsn), 0)::bigint,
  coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint
FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, slot).Scan(&f.Active, &restart, &confirmed, &current, &f.RetainedBytes, &f.LagBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, &Error{Code: CodeNoSlot, Msg: "slot " + slot + " does not exist"}
	}
	if err != nil {
		return f, fmt.Errorf("logrepl: read slot %s: %w", slot, err)
	}
	for _, p := range []struct {
		s   string
		dst *uint64
	}{{restart, &f.RestartLSN}, {confirmed, &f.ConfirmedFlushLSN}, {current, &f.CurrentLSN}} {
		lsn, err := pglogrepl.ParseLSN(strings.TrimSpace(p.s))
		if err != nil {
			return f, malformed("slot %s: position %q", slot, p.s)
		}
		*p.dst = uint64(lsn)
	}
	return f, nil
}

// FormatLSN writes a WAL position as Postgres does ("16/B374D848").
func FormatLSN(lsn uint64) string { return formatLSN(lsn) }
