package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/protocol"
)

// replay measures catch-up replay: a backlog of rows committed in Postgres
// (one transaction; tide's trigger captures every row), then one client
// subscribes with a cursor just before it and reads until caught-up. In
// the same run, this process reads the same rows with a plain pgx SELECT
// of the same columns from the table (the baseline) and, for reference,
// the same changes from tide's change log in one query.
func replay(args []string) error {
	fs := flag.NewFlagSet("replay", flag.ExitOnError)
	var cm common
	cm.register(fs, 10*time.Minute)
	rows := fs.Int("rows", 100_000, "backlog rows (at most 10M)")
	runs := fs.Int("runs", 3, "times each path is measured (medians are reported)")
	limit := fs.Int("limit", 0, "page size the client asks for (0: the server's default)")
	bodyLen := fs.Int("body", 64, "bytes of each row's body column")
	auth := fs.Bool("auth", true, "principals, RequireClaim and a row filter")
	dsnFlag := fs.String("dsn", "", "Postgres URL (default: TIDE_TEST_DATABASE_URL, else "+defaultDSN+")")
	prof := fs.String("pprof", "", "write a CPU profile of the server over the first replay to this file")
	cfBin := fs.String("centrifugo", "", "Centrifugo binary: measure history recovery of the same backlog in the same run, alternating with tide")
	_ = fs.Parse(args)
	if *rows < 1 || *rows > 10_000_000 || *runs < 1 || *runs > 20 || *limit < 0 {
		return errors.New("replay: need 1 ≤ -rows ≤ 10M, 1 ≤ -runs ≤ 20, -limit ≥ 0")
	}
	dsn, err := dsnOr(*dsnFlag)
	if err != nil {
		return err
	}
	ctx, cancel := cm.context()
	defer cancel()

	pg, err := newPGRun(ctx, dsn)
	if err != nil {
		return err
	}
	defer pg.drop()
	sargs := pg.serverArgs()
	if *auth {
		sargs = append(sargs, "-auth")
	}
	srv, err := startChild(ctx, "serve", sargs...)
	if err != nil {
		return err
	}
	defer srv.stop()
	// The engine starts its tailer with the first connection: a primer
	// connection (on another scope) starts it before the backlog exists.
	primer, err := dialLoad(ctx, srv.addr, 1000, dialOpts{path: "/tide/ws", tide: true, auth: *auth, scope: "primer", readBuf: 512})
	if err != nil {
		return err
	}
	defer primer.close()
	if err := waitUntil(ctx, fleet{primer}, 5*time.Millisecond, "the primer's caught-up", func() bool { return primer.caught.Load() > 0 }); err != nil {
		return err
	}
	st0, err := srv.stats(ctx, false)
	if err != nil {
		return err
	}
	body := strings.Repeat("lorem ipsum dolor sit amet ", *bodyLen/27+1)[:*bodyLen]
	t0 := time.Now()
	if _, err := pg.conn.Exec(ctx, "INSERT INTO "+pg.table()+" (id, scope, tenant, body, sent_ns) SELECT i::text, 's0', $1, $2, i FROM generate_series(1, $3) i",
		tenant, body, *rows); err != nil {
		return err
	}
	insertTime := time.Since(t0)
	for _, t := range []string{pg.table(), pg.changes()} {
		if _, err := pg.conn.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return err
		}
	}
	// Let the server's tailer read the backlog (nobody is subscribed)
	// before measuring, so it does not compete with the replay.
	// (Stats has no tail position: the tailer is taken to be done once its
	// batch count has moved and then stood still for 0.6 s.)
	last, still := st0.Engine.TailBatches, 0
	for still < 3 {
		st, err := srv.stats(ctx, false)
		if err != nil {
			// The feed's head may not answer while a large backlog is
			// being sequenced; the wait is bounded by -timeout.
			if ctx.Err() != nil {
				return err
			}
			still = 0
			continue
		}
		if st.Engine.TailBatches == last && last > st0.Engine.TailBatches {
			still++
		} else {
			still = 0
		}
		last = st.Engine.TailBatches
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	cursor := protocol.Cursor{Epoch: st0.Epoch, Pos: st0.Head}.String()

	res := replayResult{Env: newEnv(fs), Rows: *rows, Limit: *limit, Auth: *auth, InsertSeconds: insertTime.Seconds()}
	var cf *cfReplay
	if *cfBin != "" {
		if cf, err = newCFReplay(ctx, *cfBin, *rows, body); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("centrifugo: %w", err)
			}
			res.CentrifugoErrors = append(res.CentrifugoErrors, fmt.Sprintf("publishing the backlog: %v", err))
			cf = nil
		} else {
			defer cf.p.stop()
		}
	}
	for run := range *runs {
		if cf != nil {
			// A failed recovery (Centrifugo ends a connection whose
			// subscribe reply it cannot send) is a result, not the end of
			// the run.
			r, u, err := cf.run(ctx, run)
			switch {
			case err != nil && ctx.Err() != nil:
				return fmt.Errorf("centrifugo: %w", err)
			case err != nil:
				res.CentrifugoErrors = append(res.CentrifugoErrors, fmt.Sprintf("run %d: %v", run+1, err))
			default:
				res.Centrifugo = append(res.Centrifugo, r)
				res.CentrifugoUsage = append(res.CentrifugoUsage, u)
			}
		}
		// tide
		stA, err := srv.stats(ctx, false)
		if err != nil {
			return err
		}
		var waitProf func() error
		if run == 0 {
			waitProf = srv.profile(ctx, *prof, 2*time.Second)
		}
		s1 := takeSample(srv)
		start := clock()
		c, err := dialLoad(ctx, srv.addr, run, dialOpts{path: "/tide/ws", tide: true, auth: *auth, scope: "s0", cursor: cursor, limit: *limit, readBuf: 64 << 10, resetOK: true})
		if err != nil {
			return err
		}
		one := fleet{c}
		err = waitUntil(ctx, one, time.Millisecond, "caught-up", func() bool { return c.caught.Load() > 0 })
		s2 := takeSample(srv)
		c.close()
		if err != nil {
			return err
		}
		if waitProf != nil {
			if err := waitProf(); err != nil {
				return fmt.Errorf("profile: %v", err)
			}
		}
		if got := c.replayed.Load(); got != int64(*rows) {
			return fmt.Errorf("the client received %d entries before caught-up, want %d", got, *rows)
		}
		stB, err := srv.stats(ctx, false)
		if err != nil {
			return err
		}
		secs := float64(c.caughtAt.Load()-start) / 1e9
		res.Tide = append(res.Tide, float64(*rows)/secs)
		res.TideUsage = append(res.TideUsage, s1.to(s2))
		res.ReplayQueries = stB.Engine.ReplayQueries - stA.Engine.ReplayQueries
		res.SnapshotQueries = stB.Engine.SnapshotQueries - stA.Engine.SnapshotQueries
		res.Resets = c.resets.Load()
		res.Frames = c.frames.Load()

		// pgx SELECT of the same rows and columns from the table.
		s1 = takeSample(nil)
		n, secs, err := timedSelect(ctx, pg.conn, "SELECT id, scope, tenant, body, sent_ns FROM "+pg.table()+" WHERE scope = 's0'", 5)
		if err != nil {
			return err
		}
		if n != *rows {
			return fmt.Errorf("SELECT returned %d rows, want %d", n, *rows)
		}
		res.Select = append(res.Select, float64(n)/secs)
		res.SelectUsage = append(res.SelectUsage, s1.to(takeSample(nil)))

		// pgx SELECT of the same changes from the change log, one query.
		n, secs, err = timedSelect(ctx, pg.conn, "SELECT pos, key, data FROM "+pg.changes()+" WHERE pos > "+strconv.FormatUint(st0.Head, 10)+" ORDER BY pos", 3)
		if err != nil {
			return err
		}
		res.SelectLog = append(res.SelectLog, float64(n)/secs)
	}
	res.TideMedian, res.SelectMedian, res.SelectLogMedian = median(res.Tide), median(res.Select), median(res.SelectLog)
	res.Ratio = ratio(res.TideMedian, res.SelectMedian)
	if cf != nil {
		res.CentrifugoMedian = median(res.Centrifugo)
		res.RatioCentrifugo = ratio(res.TideMedian, res.CentrifugoMedian)
	}
	return emit(cm.json, res, res.text())
}

// timedSelect runs a query, scanning every column of every row into Go
// values as an app would, and returns the row count and the seconds taken.
func timedSelect(ctx context.Context, conn *pgx.Conn, sql string, cols int) (int, float64, error) {
	start := time.Now()
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return 0, 0, err
	}
	var s1, s2, s3, s4 string
	var i1 int64
	var data []byte
	var dest []any
	switch cols {
	case 5:
		dest = []any{&s1, &s2, &s3, &s4, &i1}
	default:
		dest = []any{&i1, &s1, &data}
	}
	n := 0
	_, err = pgx.ForEachRow(rows, dest, func() error { n++; return nil })
	return n, time.Since(start).Seconds(), err
}

type replayResult struct {
	Env             env       `json:"env"`
	Rows            int       `json:"rows"`
	Limit           int       `json:"limit"`
	Auth            bool      `json:"auth"`
	InsertSeconds   float64   `json:"backlog_insert_s"`
	Tide            []float64 `json:"tide_runs"`
	TideUsage       []usage   `json:"tide_usage"`
	Select          []float64 `json:"select_runs"`
	SelectUsage     []usage   `json:"select_usage"`
	SelectLog       []float64 `json:"select_changelog_runs"`
	TideMedian      float64   `json:"tide_rows_per_s"`
	SelectMedian    float64   `json:"select_rows_per_s"`
	SelectLogMedian float64   `json:"select_changelog_rows_per_s"`
	Ratio           float64   `json:"tide_over_select"`
	ReplayQueries   int64     `json:"replay_queries_per_run"`
	SnapshotQueries int64     `json:"snapshot_queries_per_run"`
	Resets          int64     `json:"resets_per_run"` // 1: the backlog was sent as a snapshot
	Frames          int64     `json:"frames_per_run"`

	Centrifugo       []float64 `json:"centrifugo_runs,omitempty"`
	CentrifugoUsage  []usage   `json:"centrifugo_usage,omitempty"`
	CentrifugoMedian float64   `json:"centrifugo_rows_per_s,omitempty"`
	RatioCentrifugo  float64   `json:"tide_over_centrifugo,omitempty"`
	// CentrifugoErrors are the peer's failed runs.
	CentrifugoErrors []string `json:"centrifugo_errors,omitempty"`
}

func (r replayResult) text() string {
	var b strings.Builder
	auth := "RequireClaim policy + row filter"
	if !r.Auth {
		auth = "no policy, no filter"
	}
	page := "server default"
	if r.Limit > 0 {
		page = strconv.Itoa(r.Limit)
	}
	fmt.Fprintf(&b, "tideload replay: backlog of %s rows (inserted in one transaction in %.1f s), one client catching up over a WebSocket, pages: %s; %s\n",
		commas(float64(r.Rows)), r.InsertSeconds, page, auth)
	fmt.Fprintf(&b, "  (%s; %s)\n", r.Env, r.Env.Flags)
	list := func(xs []float64) string {
		var s []string
		for _, x := range xs {
			s = append(s, commas(x))
		}
		return strings.Join(s, ", ")
	}
	how := fmt.Sprintf("%d replay queries", r.ReplayQueries)
	if r.Resets > 0 {
		how = fmt.Sprintf("reset (backlog) and snapshot: %d snapshot queries, %d replay queries", r.SnapshotQueries, r.ReplayQueries)
	}
	fmt.Fprintf(&b, "  tide replay to the client:       %11s rows/s   (runs: %s; %s, %d frames per run)\n", commas(r.TideMedian), list(r.Tide), how, r.Frames)
	fmt.Fprintf(&b, "  pgx SELECT, table, same columns: %11s rows/s   (runs: %s)\n", commas(r.SelectMedian), list(r.Select))
	fmt.Fprintf(&b, "  pgx SELECT, change log:          %11s rows/s   (runs: %s)\n", commas(r.SelectLogMedian), list(r.SelectLog))
	if len(r.Centrifugo) > 0 {
		fmt.Fprintf(&b, "  centrifugo history recovery:     %11s rows/s   (runs: %s; memory engine, one subscribe reply)\n", commas(r.CentrifugoMedian), list(r.Centrifugo))
	}
	fmt.Fprintf(&b, "  tide/SELECT: %.2f\n", r.Ratio)
	for _, e := range r.CentrifugoErrors {
		fmt.Fprintf(&b, "  centrifugo failed: %s\n", e)
	}
	if len(r.Centrifugo) > 0 {
		fmt.Fprintf(&b, "  tide/centrifugo: %.2f\n", r.RatioCentrifugo)
	} else if len(r.CentrifugoErrors) == 0 {
		fmt.Fprintf(&b, "  %s\n", centrifugoNote)
	}
	for i, u := range r.TideUsage {
		fmt.Fprintf(&b, "  CPU, tide run %d: %s\n", i+1, u)
	}
	for i, u := range r.CentrifugoUsage {
		fmt.Fprintf(&b, "  CPU, centrifugo run %d: %s\n", i+1, u)
	}
	for i, u := range r.SelectUsage {
		fmt.Fprintf(&b, "  CPU, SELECT run %d: load client (pgx) %.2f s, other (Postgres) %.2f s over %.2f s\n", i+1, u.LoadCPU, u.OtherCPU, u.Seconds)
	}
	return b.String()
}
