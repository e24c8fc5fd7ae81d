package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// capture measures what capture costs the app's writes: single-row INSERT
// transactions into the synced items table (tide's capture installed by a
// tide server child, whose sequencer runs from its start) and into an
// identical plain table, alternating in the same run, at each writer
// count. A synced run ends only once every commit it made has a position
// (the sequencer ticked it), and that drain counts in its time, its WAL
// and its CPU. Per writer count it reports commits/s, WAL
// bytes per commit (pg_current_wal_lsn before and after each run) and CPU
// per commit of this process (the writers), of the tide server child (its
// sequencer and tailer) and of the Postgres backends of both (the writers'
// backends, the child's pool, its sequencer and its WAL sender, read from
// /proc), each for both tables.
//
//	tideload capture -writers 1,16,64 -seconds 8 -rounds 2
func capture(args []string) error {
	fs := flag.NewFlagSet("capture", flag.ExitOnError)
	var cm common
	cm.register(fs, 20*time.Minute)
	writersFlag := fs.String("writers", "1,16,64", "writer counts to measure, comma-separated (each writer is one connection committing one row per transaction)")
	seconds := fs.Float64("seconds", 8, "seconds each run writes (a synced run then waits until every change has a position)")
	rounds := fs.Int("rounds", 2, "runs of each table per writer count, alternating which table goes first")
	bodyLen := fs.Int("body", 64, "bytes of each row's body column")
	dsnFlag := fs.String("dsn", "", "Postgres URL (default: TIDE_TEST_DATABASE_URL, else "+defaultDSN+")")
	captureMode := fs.String("capture", "trigger", "the synced table's capture: trigger, or logical (a server with wal_level = logical)")
	_ = fs.Parse(args)
	if *captureMode != "trigger" && *captureMode != "logical" {
		return fmt.Errorf("capture: -capture %q: want trigger or logical", *captureMode)
	}
	writers, err := intList(*writersFlag)
	if err != nil {
		return fmt.Errorf("capture: -writers: %w", err)
	}
	if slices.Max(writers) > 64 || *seconds <= 0 || *seconds > 120 || *rounds < 1 || *rounds > 10 || *bodyLen < 1 || *bodyLen > 8192 {
		return errors.New("capture: need writer counts ≤ 64, 0 < -seconds ≤ 120, 1 ≤ -rounds ≤ 10, 1 ≤ -body ≤ 8192")
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
	plain := pg.schema + ".plain"
	if _, err := pg.conn.Exec(ctx, "CREATE TABLE "+plain+" (LIKE "+pg.table()+" INCLUDING ALL)"); err != nil {
		return err
	}
	srv, err := startChild(ctx, "serve", append(pg.serverArgs(), "-capture", *captureMode)...)
	if err != nil {
		return err
	}
	defer srv.stop()
	m := &captureMeter{pg: pg, srv: srv, body: strings.Repeat("lorem ipsum dolor sit amet ", *bodyLen/27+1)[:*bodyLen],
		d: time.Duration(*seconds * float64(time.Second)), tide: pg.schema + "_tide", logical: *captureMode == "logical"}
	if err := m.listen(ctx); err != nil {
		return err
	}
	defer m.listener.Close(context.Background())

	res := captureResult{Env: newEnv(fs), Seconds: *seconds, Rounds: *rounds, Body: *bodyLen, Capture: *captureMode}
	for _, w := range writers {
		for r := range *rounds {
			order := []bool{true, false} // synced first in even rounds, plain first in odd ones
			if r%2 == 1 {
				order = []bool{false, true}
			}
			for _, synced := range order {
				run, err := m.run(ctx, w, synced, len(res.Runs))
				if err != nil {
					return err
				}
				res.Runs = append(res.Runs, run)
				fmt.Fprintln(os.Stderr, "tideload capture:", run)
			}
		}
	}
	res.Points = summarizeCapture(res.Runs)
	return emit(cm.json, res, res.String())
}

// captureMeter runs the capture mode's runs.
type captureMeter struct {
	pg       *pgRun
	srv      *child
	body     string
	d        time.Duration
	tide     string    // the tide schema
	logical  bool      // the synced table is captured from the replication stream
	listener *pgx.Conn // LISTENs on the channel the sequencer notifies after each step
}

// listen opens the connection that waits for the sequencer's steps.
func (m *captureMeter) listen(ctx context.Context) error {
	c, err := pgx.Connect(ctx, m.pg.dsn)
	if err != nil {
		return err
	}
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{m.pg.schema + "_tide_changes"}.Sanitize()); err != nil {
		c.Close(context.Background())
		return err
	}
	m.listener = c
	return nil
}

// captureRun is one run: w writers committing into one table for the
// run's time, then, for the synced table, until every change has a position.
type captureRun struct {
	Writers      int     `json:"writers"`
	Synced       bool    `json:"synced"`
	Commits      int64   `json:"commits"`
	Seconds      float64 `json:"seconds"`       // writing plus draining
	DrainSeconds float64 `json:"drain_seconds"` // after the writers stopped, until every change had a position
	WALBytes     int64   `json:"wal_bytes"`
	ClientCPU    float64 `json:"client_cpu"`   // CPU seconds of this process (the writers)
	NodeCPU      float64 `json:"node_cpu"`     // CPU seconds of the tide server child
	PostgresCPU  float64 `json:"postgres_cpu"` // CPU seconds of the Postgres backends of both processes
	OtherBusy    int     `json:"other_busy"`   // other sessions of the server that were active when the run began
	Load1        float64 `json:"load1"`        // the machine's 1-minute load average when the run began
}

func (r captureRun) String() string {
	table := "plain "
	if r.Synced {
		table = "synced"
	}
	return fmt.Sprintf("%s %2d writers: %6.0f commits/s (%d in %.2f s, drain %.3f s), WAL %.0f B/commit, CPU µs/commit client %.0f node %.0f postgres %.0f, %d other active sessions, load %.1f",
		table, r.Writers, ratio(float64(r.Commits), r.Seconds), r.Commits, r.Seconds, r.DrainSeconds, ratio(float64(r.WALBytes), float64(r.Commits)),
		1e6*ratio(r.ClientCPU, float64(r.Commits)), 1e6*ratio(r.NodeCPU, float64(r.Commits)), 1e6*ratio(r.PostgresCPU, float64(r.Commits)), r.OtherBusy, r.Load1)
}

// maxCommitsPerWriter bounds a run in count as well as in time.
const maxCommitsPerWriter = 10_000_000

// run measures one run. Each writer has a connection of its own; the
// connections are made before the clocks start and closed after they stop.
func (m *captureMeter) run(ctx context.Context, w int, synced bool, n int) (captureRun, error) {
	run := captureRun{Writers: w, Synced: synced}
	table := m.pg.table()
	if !synced {
		table = m.pg.schema + ".plain"
	}
	conns := make([]*pgx.Conn, 0, w)
	defer func() {
		for _, c := range conns {
			c.Close(context.Background())
		}
	}()
	cfg, err := pgx.ParseConfig(m.pg.dsn)
	if err != nil {
		return run, err
	}
	cfg.RuntimeParams["application_name"] = "tideload-writer"
	for range w {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return run, err
		}
		conns = append(conns, c)
	}
	insert := "INSERT INTO " + table + " (id, scope, tenant, body) VALUES ($1, 's0', '" + tenant + "', $2)"
	for _, c := range conns { // prepared before the clocks start
		if _, err := c.Prepare(ctx, "ins", insert); err != nil {
			return run, err
		}
	}
	if err := m.pg.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() AND backend_type IN ('client backend', 'walsender') AND application_name NOT LIKE 'tide%'`).Scan(&run.OtherBusy); err != nil {
		return run, err
	}

	run.Load1 = loadAverage()
	var lsn0 string
	if err := m.pg.conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn0); err != nil {
		return run, err
	}
	backends := m.backends(ctx, conns)
	pg0 := backendCPU(backends)
	s0 := takeSample(m.srv)

	var commits atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, w)
	wctx, stop := context.WithTimeout(ctx, m.d)
	defer stop()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefix := fmt.Sprintf("r%d-w%d-", n, i)
			for k := 0; k < maxCommitsPerWriter && wctx.Err() == nil; k++ {
				if _, err := c.Exec(wctx, "ins", prefix+strconv.Itoa(k), m.body); err != nil {
					if wctx.Err() == nil {
						errs <- err
					}
					return
				}
				commits.Add(1)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return run, context.Cause(ctx)
	}
	select {
	case err := <-errs:
		return run, err
	default:
	}
	wrote := time.Now()
	if synced {
		if err := m.drain(ctx); err != nil {
			return run, err
		}
	}
	end := time.Now()
	s1 := takeSample(m.srv)
	// Backends that came up during the run (the child's pool growing, a
	// new sequencer term) count from their start.
	backends = append(backends, m.backends(ctx, conns)...)
	pg1 := backendCPU(backends)
	if err := m.pg.conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", lsn0).Scan(&run.WALBytes); err != nil {
		return run, err
	}
	u := s0.to(s1)
	run.Commits = commits.Load()
	run.Seconds = end.Sub(s0.wall).Seconds()
	run.DrainSeconds = end.Sub(wrote).Seconds()
	run.ClientCPU, run.NodeCPU = u.LoadCPU, u.ServerCPU
	for pid, t := range pg1 {
		if t >= pg0[pid] { // a backend that ended during the run reads 0
			run.PostgresCPU += (t - pg0[pid]).Seconds()
		}
	}
	return run, nil
}

// drainLimit bounds the wait for every change to have a position after a
// synced run.
const drainLimit = 5 * time.Minute

// drain waits until every committed change has a position, looking again after each of the
// sequencer's notifications (and every 50 ms, should one be missed).
func (m *captureMeter) drain(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, drainLimit)
	defer cancel()
	// With the logical capture, a mark in the WAL after every writer's
	// commit (as the feed's Head writes one): drained once the consumer
	// has logged a transaction past it. (The slot's confirmed position
	// says it only at the consumer's next status report, up to a second
	// later.)
	var mark string
	if m.logical {
		if err := m.pg.conn.QueryRow(dctx, "SELECT pg_logical_emit_message(true, 'tide.mark', '')::text").Scan(&mark); err != nil {
			return err
		}
	}
	for {
		// Drained: no committed change the last tick's snapshot did not
		// see (the feed's own test of a pending change); with the logical
		// capture, the consumer logged every commit before the mark.
		var empty bool
		if m.logical {
			if err := m.pg.conn.QueryRow(dctx, `SELECT s.lsn > $1::pg_lsn FROM `+m.tide+`.logical_state s`, mark).Scan(&empty); err != nil {
				return fmt.Errorf("capture: waiting for the logical capture's consumer: %w", err)
			}
		} else if err := m.pg.conn.QueryRow(dctx, `SELECT NOT EXISTS (SELECT 1 FROM (SELECT t.snap FROM `+m.tide+`.ticks t ORDER BY t.pos DESC LIMIT 1) p
  CROSS JOIN LATERAL (SELECT 1 FROM `+m.tide+`.changes c WHERE c.xid >= pg_snapshot_xmax(p.snap)
    UNION ALL SELECT 1 FROM `+m.tide+`.changes c WHERE c.xid = ANY (ARRAY(SELECT pg_snapshot_xip(p.snap)))) x)`).Scan(&empty); err != nil {
			return fmt.Errorf("capture: waiting for every change to have a position: %w", err)
		}
		if empty {
			return nil
		}
		wctx, wcancel := context.WithTimeout(dctx, 50*time.Millisecond)
		_, err := m.listener.WaitForNotification(wctx)
		wcancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if dctx.Err() != nil {
			return fmt.Errorf("capture: changes still without a position after %s", drainLimit)
		}
	}
}

// backends returns the Postgres backends serving the writers' connections
// and the tide server child (its pool, listener, sequencer and WAL
// sender). The child's are found by its sockets' local ports, which
// Postgres shows as the backends' client_port.
func (m *captureMeter) backends(ctx context.Context, conns []*pgx.Conn) []int {
	var pids []int
	for _, c := range conns {
		pids = append(pids, int(c.PgConn().PID()))
	}
	ports := procPorts(m.srv.pid())
	if len(ports) == 0 {
		return pids
	}
	rows, err := m.pg.conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1)", ports)
	if err != nil {
		return pids
	}
	more, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return pids
	}
	for _, p := range more {
		pids = append(pids, int(p))
	}
	return pids
}

// loadAverage returns the machine's 1-minute load average, 0 if unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscan(string(b), &l)
	return l
}

// backendCPU reads the CPU time of each process in pids.
func backendCPU(pids []int) map[int]time.Duration {
	out := make(map[int]time.Duration, len(pids))
	for _, p := range pids {
		out[p] = procCPU(p)
	}
	return out
}

// procPorts returns the local TCP ports of the sockets process pid holds
// open, from /proc/<pid>/fd and /proc/<pid>/net/tcp{,6}.
func procPorts(pid int) []int32 {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var ports []int32
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		ports = append(ports, socketPorts(string(b), inodes)...)
	}
	return ports
}

// socketPorts returns the local ports of the sockets of a /proc/net/tcp
// table whose inodes are in inodes.
func socketPorts(table string, inodes map[string]bool) []int32 {
	var ports []int32
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || !inodes[f[9]] {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			continue
		}
		ports = append(ports, int32(p))
	}
	return ports
}

// captureResult is the capture mode's result.
type captureResult struct {
	Env     env            `json:"env"`
	Seconds float64        `json:"seconds"`
	Rounds  int            `json:"rounds"`
	Body    int            `json:"body"`
	Capture string         `json:"capture"` // trigger or logical
	Runs    []captureRun   `json:"runs"`
	Points  []capturePoint `json:"points"`
}

// capturePoint sums a writer count's runs of each table.
type capturePoint struct {
	Writers int `json:"writers"`
	// TPS: commits per second, the runs' commits over their time
	// (draining included for the synced table).
	TPSSynced float64 `json:"tps_synced"`
	TPSPlain  float64 `json:"tps_plain"`
	TPSRatio  float64 `json:"tps_ratio"` // synced over plain
	// WAL bytes per commit, of the table's round with the least: the
	// WAL position is the whole server's, so other sessions' writes can
	// only add to a round's figure.
	WALSynced float64 `json:"wal_synced"`
	WALPlain  float64 `json:"wal_plain"`
	WALRatio  float64 `json:"wal_ratio"` // synced over plain
	// CPU microseconds per commit: this process, the tide server child,
	// the Postgres backends.
	ClientUSSynced   float64 `json:"client_us_synced"`
	ClientUSPlain    float64 `json:"client_us_plain"`
	NodeUSSynced     float64 `json:"node_us_synced"`
	NodeUSPlain      float64 `json:"node_us_plain"`
	PostgresUSSynced float64 `json:"postgres_us_synced"`
	PostgresUSPlain  float64 `json:"postgres_us_plain"`
	// Target is the least TPSRatio aimed for at this writer count (0.75
	// at one writer, else 0.8); Met says whether it and the WAL target
	// (WALRatio ≤ 2.5) both hold.
	Target float64 `json:"target"`
	Met    bool    `json:"met"`
}

// Targets of synced writes against plain ones.
const (
	captureTargetOne  = 0.75 // commits/s ratio at one writer
	captureTargetMany = 0.8  // commits/s ratio at more writers
	captureTargetWAL  = 2.5  // most WAL per synced commit, in plain commits' WAL
)

// summarizeCapture sums the runs of each writer count and table, in the
// order the writer counts were first measured.
func summarizeCapture(runs []captureRun) []capturePoint {
	// wal is the least per commit of the table's rounds; the rest are sums.
	type sums struct{ commits, secs, wal, client, node, postgres float64 }
	acc := map[int]*[2]sums{} // [0] synced, [1] plain
	var order []int
	for _, r := range runs {
		a := acc[r.Writers]
		if a == nil {
			a = &[2]sums{}
			acc[r.Writers] = a
			order = append(order, r.Writers)
		}
		s := &a[0]
		if !r.Synced {
			s = &a[1]
		}
		s.secs += r.Seconds
		if w := ratio(float64(r.WALBytes), float64(r.Commits)); r.Commits > 0 && (s.commits == 0 || w < s.wal) {
			s.wal = w
		}
		s.client += r.ClientCPU
		s.node += r.NodeCPU
		s.postgres += r.PostgresCPU
		s.commits += float64(r.Commits)
	}
	var out []capturePoint
	for _, w := range order {
		sy, pl := acc[w][0], acc[w][1]
		p := capturePoint{Writers: w,
			TPSSynced: ratio(sy.commits, sy.secs), TPSPlain: ratio(pl.commits, pl.secs),
			WALSynced: sy.wal, WALPlain: pl.wal,
			ClientUSSynced: 1e6 * ratio(sy.client, sy.commits), ClientUSPlain: 1e6 * ratio(pl.client, pl.commits),
			NodeUSSynced: 1e6 * ratio(sy.node, sy.commits), NodeUSPlain: 1e6 * ratio(pl.node, pl.commits),
			PostgresUSSynced: 1e6 * ratio(sy.postgres, sy.commits), PostgresUSPlain: 1e6 * ratio(pl.postgres, pl.commits),
			Target: captureTargetMany}
		p.TPSRatio = ratio(p.TPSSynced, p.TPSPlain)
		p.WALRatio = ratio(p.WALSynced, p.WALPlain)
		if w == 1 {
			p.Target = captureTargetOne
		}
		p.Met = p.TPSPlain > 0 && p.WALPlain > 0 && p.TPSRatio >= p.Target && p.WALRatio <= captureTargetWAL
		out = append(out, p)
	}
	return out
}

func (r captureResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "synced writes (%s capture) against plain writes (%s; %d round(s) of %.0f s per table and writer count, alternating; single-row INSERT transactions, %d-byte body)\n",
		r.Capture, r.Env, r.Rounds, r.Seconds, r.Body)
	fmt.Fprintf(&b, "%7s  %18s  %6s  %6s  %22s  %25s\n", "writers", "commits/s syn/pln", "ratio", "target", "WAL B/commit syn/pln", "CPU µs/commit syn/pln")
	for _, p := range r.Points {
		verdict := "met"
		if !p.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(&b, "%7d  %8s/%-9s  %6.2f  %6.2f  %7.0f/%-6.0f (x%.2f)  client %.0f/%.0f node %.0f/%.0f postgres %.0f/%.0f  %s\n",
			p.Writers, commas(p.TPSSynced), commas(p.TPSPlain), p.TPSRatio, p.Target, p.WALSynced, p.WALPlain, p.WALRatio,
			p.ClientUSSynced, p.ClientUSPlain, p.NodeUSSynced, p.NodeUSPlain, p.PostgresUSSynced, p.PostgresUSPlain, verdict)
	}
	fmt.Fprintf(&b, "targets: commits/s ≥ %.2f of plain at 1 writer, ≥ %.2f at more; WAL per synced commit ≤ %.1fx plain. Synced runs include sequencing every change; WAL is the least round's.\n",
		captureTargetOne, captureTargetMany, captureTargetWAL)
	return b.String()
}
