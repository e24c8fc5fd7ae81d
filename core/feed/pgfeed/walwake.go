package pgfeed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tidesync/tide/internal/backoff"
	"github.com/tidesync/tide/internal/pgconnect"
)

// The sequencer's wake-up: the WAL stream.
//
// A synced commit writes its changes into the change log, and the sequencer
// must notice them soon, yet nothing in the writer's transaction may ring
// it (a NOTIFY serializes commits). Polling alone makes the delay the poll
// interval. So, while a feed holds the sequencer role, it also reads the
// database's WAL as a physical standby would, from the current end on,
// keeping none of it: Postgres sends WAL to a standby as soon as it is
// flushed, which for a commit is before the commit returns to the writer,
// and every write to the change log names the log's file in its WAL record.
// When the stream shows one, the sequencer looks at once. The stream is a
// wake-up only: positions are still given by sequencing steps, which look
// at committed rows, so a wake-up that comes early (the WAL of a commit
// reaches the stream a moment before the commit is visible) is followed by
// a second look a millisecond later, and a missed one by the sequencer's
// poll at Options.SequencerInterval.
//
// It needs a role allowed to replicate (REPLICATION, or a superuser) and a
// free WAL sender (max_wal_senders); it is not used when
// synchronous_standby_names is set, since the stream must never become a
// standby that commits wait for. Without it the sequencer polls, as with
// Options.PollOnly.

// walWaker streams the WAL for one sequencer term and rings wake on every
// write to the change log it sees.
type walWaker struct {
	f    *Feed
	wake chan struct{} // capacity 1: a pending wake-up
	scan atomic.Pointer[walScan]
	live atomic.Bool // streaming

	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
}

// stop ends the stream and waits for it.
func (w *walWaker) stop() {
	w.cancel()
	<-w.done
	w.f.waker.CompareAndSwap(w, nil)
}

// refresh reads the change log's file locator again.
func (w *walWaker) refresh(ctx context.Context, conn *pgx.Conn) error {
	s, err := w.f.logScan(ctx, conn)
	if err != nil {
		return err
	}
	w.scan.Store(s)
	return nil
}

// walSilence is how long the stream may send nothing before it is
// reopened.
const walSilence = 90 * time.Second

// errWALNotForStandbys means the server names synchronous standbys: the
// wake-up does not stream, lest it become one.
var errWALNotForStandbys = errors.New("synchronous_standby_names is set")

// walPermanent reports whether err means the stream will not work on this
// server however often it is tried: the role may not replicate, WAL
// senders are disabled, or synchronous standbys are configured.
func walPermanent(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 42501 insufficient_privilege: the role may not replicate;
		// 28000 invalid_authorization_specification: pg_hba.conf has no
		// entry for replication connections.
		return pgErr.Code == "42501" || pgErr.Code == "28000"
	}
	return errors.Is(err, errWALNotForStandbys)
}

// signal records a pending wake-up.
func (w *walWaker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run streams until ctx ends, reconnecting with backoff after a failure,
// and gives up for the term on a failure that cannot pass.
func (w *walWaker) run(ctx context.Context) {
	f := w.f
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := w.stream(ctx)
		if w.live.Load() {
			attempt = 0 // it streamed: a fresh failure
		}
		w.live.Store(false)
		w.signal() // the sequencer polls again
		if ctx.Err() != nil {
			return
		}
		if walPermanent(err) {
			if f.walRefused.CompareAndSwap(false, true) {
				if f.onWALRefused != nil {
					f.onWALRefused()
				}
				f.log.Info("pgfeed: the sequencer polls for changes: it cannot read the WAL stream (grant the role REPLICATION for lower latency, or set PollOnly)", "schema", f.opts.Schema, "err", err)
			}
			return
		}
		f.log.Debug("pgfeed: WAL stream for the sequencer's wake-up ended; reconnecting", "schema", f.opts.Schema, "err", err, "attempt", attempt)
		backoff.Sleep(ctx, backoff.Delay(attempt, time.Second, time.Minute))
	}
}

// stream opens a replication connection, starts a physical stream at the
// server's current WAL end and reads it until an error or ctx ends.
func (w *walWaker) stream(ctx context.Context) error {
	cfg := w.f.pool.Config().ConnConfig.Config.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "tide sequencer wake-up"
	conn, err := pgconnect.Retry(ctx, w.f.log, "pgfeed sequencer wake-up (replication)", func(ctx context.Context) (*pgconn.PgConn, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return pgconn.ConnectConfig(cctx, cfg)
	})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	res, err := conn.Exec(ctx, "SHOW synchronous_standby_names").ReadAll()
	if err != nil {
		return err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 {
		return errors.New("SHOW synchronous_standby_names: unexpected result")
	}
	if strings.TrimSpace(string(res[0].Rows[0][0])) != "" {
		return errWALNotForStandbys
	}
	res, err = conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll()
	if err != nil {
		return err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 3 {
		return errors.New("IDENTIFY_SYSTEM: unexpected result")
	}
	timeline, at := string(res[0].Rows[0][1]), string(res[0].Rows[0][2])
	if _, err := strconv.Atoi(timeline); err != nil {
		return fmt.Errorf("IDENTIFY_SYSTEM: timeline %q", timeline)
	}
	if _, err := parseLSN(at); err != nil {
		return fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	conn.Frontend().Send(&pgproto3.Query{String: "START_REPLICATION PHYSICAL " + at + " TIMELINE " + timeline})
	if err := conn.Frontend().Flush(); err != nil {
		return err
	}
	var received uint64 // LSN after the last WAL byte received
	var reply []byte
	// A message arrives with every flush of the WAL, so receiving one must
	// cost little: no context to watch per message. The stream ends by
	// closing its socket when ctx ends, and by a read deadline when it is
	// silent: the server sends a keepalive at least every half
	// wal_sender_timeout (60 s by default), so a stream silent for longer
	// is gone, though its connection may not say so.
	nc := conn.Conn()
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()
	var deadline time.Time
	for {
		if now := time.Now(); now.Add(walSilence - time.Second).After(deadline) {
			deadline = now.Add(walSilence)
			if err := nc.SetReadDeadline(deadline); err != nil {
				return err
			}
		}
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.CopyBothResponse:
			w.live.Store(true)
			w.signal() // the sequencer switches to waiting for wake-ups
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				return errWALMessage
			}
			switch m.Data[0] {
			case 'w':
				d, err := parseWALData(m.Data)
				if err != nil {
					return err
				}
				received = d.start + uint64(len(d.wal))
				if s := w.scan.Load(); s != nil && s.feed(d.start, d.wal) {
					w.signal()
				}
			case 'k':
				end, want, err := parseKeepalive(m.Data)
				if err != nil {
					return err
				}
				if !want {
					continue
				}
				// Past WAL already sent is all the server asks about; a
				// quiet stream reports the end it was told of.
				reply = appendStandbyStatus(reply[:0], max(received, end), time.Now())
				conn.Frontend().Send(&pgproto3.CopyData{Data: reply})
				if err := conn.Frontend().Flush(); err != nil {
					return err
				}
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.CopyDone:
			return errors.New("the server ended the WAL stream")
		}
	}
}

// parseLSN parses a WAL position written as Postgres does (%X/%X).
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("malformed WAL position %q", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed WAL position %q", s)
	}
	return h<<32 | l, nil
}

// logScan reads where the change log's writes appear in the WAL: its file
// locator and the WAL's page size.
func (f *Feed) logScan(ctx context.Context, conn *pgx.Conn) (*walScan, error) {
	var block, tablespace, database, filenode uint32
	err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('wal_block_size')::int,
  coalesce(nullif(c.reltablespace, 0), d.dattablespace)::oid::bigint, d.oid::bigint, pg_catalog.pg_relation_filenode(c.oid)::bigint
FROM pg_catalog.pg_class c, pg_catalog.pg_database d
WHERE c.oid = `+quoteLit(f.n.changes)+`::regclass AND d.datname = pg_catalog.current_database()`).Scan(&block, &tablespace, &database, &filenode)
	if err != nil {
		return nil, err
	}
	if block < walLongHeader || block&(block-1) != 0 {
		return nil, fmt.Errorf("pgfeed: unexpected wal_block_size %d", block)
	}
	return newWALScan(tablespace, database, filenode, uint64(block)), nil
}
