package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// latency measures commit-to-client latency on the Postgres feed: a writer
// in this process commits one row per transaction at a steady rate into
// the items table (plain SQL, as an app writes; tide's trigger captures
// it), and N subscribers receive each row.
//
// Method (one machine, one process, one monotonic clock): the writer takes
// the clock just before sending each INSERT (autocommit: the statement and
// its COMMIT are one round trip) and writes that value into the row's
// sent_ns column, then takes the clock again when the INSERT returns, i.e.
// when Postgres has committed. Each client takes the clock when a changes
// frame's first bytes are read and parses the entry keys (the row ids) from
// the frame. Latency = client arrival − the writer's COMMIT returning,
// the figure the target is about (as in core/pgfeed's BenchmarkCommitToClient).
// A delivery can arrive before the writer's goroutine has seen its COMMIT
// return; it counts as 0 (and is reported). Arrival − sent is also given:
// an upper bound that includes the INSERT and the commit's WAL flush.
func latency(args []string) error {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	var cm common
	cm.register(fs, 5*time.Minute)
	n := fs.Int("n", 1000, "subscribers (at most 19000)")
	rate := fs.Float64("rate", 100, "commits per second")
	duration := fs.Duration("duration", 20*time.Second, "how long the writer writes")
	scopes := fs.Int("scopes", 1, "scopes the subscribers and rows spread over")
	bodyLen := fs.Int("body", 64, "bytes of each row's body column")
	auth := fs.Bool("auth", true, "principals, RequireClaim and a row filter")
	dsnFlag := fs.String("dsn", "", "Postgres URL (default: TIDE_TEST_DATABASE_URL, else "+defaultDSN+")")
	pgConns := fs.Int("pgconns", 0, "server's Postgres pool size (0: pgxpool's default)")
	conc := fs.Int("conc", 64, "connections opened at a time")
	prof := fs.String("pprof", "", "write a CPU profile of the server over the writes to this file")
	cfBin := fs.String("centrifugo", "", "Centrifugo binary: measure it as a peer in the same run (publishing through its HTTP API, no database)")
	rounds := fs.Int("rounds", 1, "tide (+ Centrifugo) rounds, alternating")
	feeds := fs.String("feed", "pg", "tide's feed: pg (Postgres: the writer commits SQL INSERTs), mem (in-memory: the writer posts to the server, which writes through Table.Upsert), or both (a pg and a mem round per round)")
	writers := fs.Int("writers", 4, "concurrent writers keeping the rate (write i goes to writer i mod writers, at start + i/rate), so a slow write does not delay the next")
	_ = fs.Parse(args)
	total := int(*rate * duration.Seconds())
	if *n < 1 || *n > 19000 || *rate <= 0 || *rate > 10000 || total < 1 || *scopes < 1 || *scopes > *n || int64(*n)*int64(total) > 50_000_000 || *rounds < 1 || *rounds > 10 || *writers < 1 || *writers > 32 {
		return errors.New("latency: need 1 ≤ -n ≤ 19000, 0 < -rate ≤ 10000, 1 ≤ -scopes ≤ n, n × rate × duration ≤ 50M, 1 ≤ -rounds ≤ 10, 1 ≤ -writers ≤ 32")
	}
	var kinds []string
	switch *feeds {
	case "pg", "mem":
		kinds = []string{*feeds}
	case "both":
		kinds = []string{"pg", "mem"}
	default:
		return fmt.Errorf("latency: -feed %q: want pg, mem or both", *feeds)
	}
	dsn, err := dsnOr(*dsnFlag)
	if err != nil {
		return err
	}
	ctx, cancel := cm.context()
	defer cancel()
	o := latencyRun{n: *n, rate: *rate, duration: *duration, scopes: *scopes, bodyLen: *bodyLen, auth: *auth, dsn: dsn,
		pgConns: *pgConns, conc: *conc, prof: *prof, total: total, writers: *writers}
	stopLoadProf, err := cm.profileLoad()
	if err != nil {
		return err
	}
	defer stopLoadProf()
	var out latencyReport
	out.Env = newEnv(fs)
	for r := range *rounds {
		if r > 0 {
			o.prof = ""
		}
		for _, k := range kinds {
			o.feed = k
			res, err := latencyTide(ctx, o)
			if err != nil {
				return fmt.Errorf("tide (%s feed): %w", k, err)
			}
			res.Env = out.Env
			res.Round = r + 1
			out.Tide = append(out.Tide, res)
			o.prof = ""
		}
		if *cfBin != "" {
			cf, err := latencyCentrifugo(ctx, *cfBin, o)
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("centrifugo: %w", err)
				}
				// The peer failing a round (it disconnects clients it
				// cannot write to in time) is a result, not the end of
				// the run.
				out.CentrifugoErrors = append(out.CentrifugoErrors, fmt.Sprintf("round %d: %v", r+1, err))
				continue
			}
			cf.Env = out.Env
			cf.Round = r + 1
			out.Centrifugo = append(out.Centrifugo, cf)
		}
	}
	stopLoadProf()
	if err := emit(cm.json, out, out.text(*cfBin != "")); err != nil {
		return err
	}
	for _, r := range out.Tide {
		if r.Missing > 0 {
			return fmt.Errorf("tide round %d: %d of %d deliveries missing", r.Round, r.Missing, r.Expected)
		}
	}
	for _, r := range out.Centrifugo {
		if r.Missing > 0 {
			return fmt.Errorf("centrifugo round %d: %d of %d deliveries missing", r.Round, r.Missing, r.Expected)
		}
	}
	return nil
}

// latencyRun is one round's parameters.
type latencyRun struct {
	n, scopes, bodyLen, pgConns, conc, total, writers int
	rate                                              float64
	duration                                          time.Duration
	auth                                              bool
	dsn, prof                                         string
	feed                                              string // tide's feed: "pg" or "mem"
}

// latencyReport is every round of a run.
type latencyReport struct {
	Env        env             `json:"env"`
	Tide       []latencyResult `json:"tide"`
	Centrifugo []latencyResult `json:"centrifugo,omitempty"`
	// CentrifugoErrors are the peer's failed rounds.
	CentrifugoErrors []string `json:"centrifugo_errors,omitempty"`
}

func (r latencyReport) text(peer bool) string {
	var b strings.Builder
	rounds := 0
	for _, t := range r.Tide {
		rounds = max(rounds, t.Round)
	}
	byRound := func(round int) []latencyResult {
		var out []latencyResult
		for _, t := range r.Tide {
			if t.Round == round {
				out = append(out, t)
			}
		}
		for _, c := range r.Centrifugo {
			if c.Round == round {
				out = append(out, c)
			}
		}
		return out
	}
	for round := 1; round <= rounds; round++ {
		for _, x := range byRound(round) {
			b.WriteString(x.text())
		}
	}
	if !peer {
		b.WriteString("  " + centrifugoNote + "\n")
	}
	for _, e := range r.CentrifugoErrors {
		fmt.Fprintf(&b, "  centrifugo failed %s\n", e)
	}
	fmt.Fprintf(&b, "same run, side by side, ms: commit (tide) or publish call (centrifugo) returned → client; sent → client (the write or publish call started)\n")
	fmt.Fprintf(&b, "  %-7s %-11s %8s %8s %8s %8s %10s %10s   %s\n", "round", "server", "p50", "p90", "p99", "max", "sent p50", "sent p99", "server CPU, load CPU, other CPU (s)")
	for round := 1; round <= rounds; round++ {
		rs := byRound(round)
		for _, x := range rs {
			fmt.Fprintf(&b, "  #%-6d %-11s %8.2f %8.2f %8.2f %8.2f %10.2f %10.2f   %.2f, %.2f, %.2f\n", round, x.label(),
				x.Latency.P50, x.Latency.P90, x.Latency.P99, x.Latency.Max, x.FromSend.P50, x.FromSend.P99, x.Usage.ServerCPU, x.Usage.LoadCPU, x.Usage.OtherCPU)
		}
		var cf *latencyResult
		for i := range rs {
			if rs[i].Server == "centrifugo" {
				cf = &rs[i]
			}
		}
		if cf == nil {
			continue
		}
		for _, t := range rs {
			if t.Server == "centrifugo" {
				continue
			}
			fmt.Fprintf(&b, "  #%-6d %-11s %8.2f %8.2f %8.2f %8.2f %10.2f %10.2f\n", round, t.label()+"/cf", ratio(t.Latency.P50, cf.Latency.P50),
				ratio(t.Latency.P90, cf.Latency.P90), ratio(t.Latency.P99, cf.Latency.P99), ratio(t.Latency.Max, cf.Latency.Max), ratio(t.FromSend.P50, cf.FromSend.P50), ratio(t.FromSend.P99, cf.FromSend.P99))
		}
	}
	return b.String()
}

// label names a result's server in the side-by-side table.
func (r latencyResult) label() string {
	if r.Server == "centrifugo" {
		return "centrifugo"
	}
	return "tide " + r.Feed
}

// paceWrites makes o.total writes at o.rate: write i starts at start +
// i/rate on writer i % o.writers (each writer is one goroutine with its own
// connection), so one slow write delays only its own writer. It returns,
// per write, the clock just before it was sent and just after it returned,
// and the time from the first scheduled write to the last one's return.
// check runs on the first writer every 64 writes; an error from it or a
// write ends the run.
func paceWrites(ctx context.Context, o latencyRun, write func(ctx context.Context, w, i int, sent int64) error, check func() error) (sent, done []int64, took time.Duration, err error) {
	total := o.total
	sent = make([]int64, total)
	done = make([]int64, total)
	interval := time.Duration(float64(time.Second) / o.rate)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range o.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(0)
			defer t.Stop()
			<-t.C
			for i := w; i < total; i += o.writers {
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					t.Reset(d)
					select {
					case <-t.C:
					case <-ctx.Done():
						return
					}
				}
				sent[i] = clock()
				if err := write(ctx, w, i, sent[i]); err != nil {
					if ctx.Err() == nil {
						cancel(fmt.Errorf("write %d: %w", i, err))
					}
					return
				}
				done[i] = clock()
				if w == 0 && i%64 == 0 {
					if err := check(); err != nil {
						cancel(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	took = time.Since(start)
	if ctx.Err() != nil {
		return nil, nil, took, context.Cause(ctx)
	}
	return sent, done, took, nil
}

// latencyTide is one tide round, on the Postgres feed (the writer commits
// SQL INSERTs; tide's trigger captures them) or on the in-memory feed (the
// writer posts each row to the server, which writes it with Table.Upsert:
// the engine's path without the capture's).
func latencyTide(ctx context.Context, o latencyRun) (latencyResult, error) {
	n, scopes, total := o.n, o.scopes, o.total
	var res latencyResult
	var sargs []string
	var pg *pgRun
	if o.feed == "pg" {
		var err error
		if pg, err = newPGRun(ctx, o.dsn); err != nil {
			return res, err
		}
		defer pg.drop()
		sargs = append(pg.serverArgs(), "-pgconns", strconv.Itoa(o.pgConns))
	}
	if o.auth {
		sargs = append(sargs, "-auth")
	}
	srv, err := startChild(ctx, "serve", sargs...)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	conns, err := openFleet(ctx, n, o.conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialLoad(ctx, srv.addr, i, dialOpts{path: "/tide/ws", tide: true, auth: o.auth, scope: scopeName(i % scopes), readBuf: 4096, track: total})
	})
	if err != nil {
		return res, err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 10*time.Millisecond, "caught-up", func() bool { return conns.caughtUp() == n }); err != nil {
		return res, err
	}
	expected := expectedDeliveries(n, scopes, total)
	body := strings.Repeat("lorem ipsum dolor sit amet ", o.bodyLen/27+1)[:o.bodyLen]

	var write func(ctx context.Context, w, i int, sent int64) error
	if pg != nil {
		wcs := make([]*pgx.Conn, o.writers)
		defer func() {
			for _, wc := range wcs {
				if wc != nil {
					wc.Close(context.Background())
				}
			}
		}()
		insert := "INSERT INTO " + pg.table() + " (id, scope, tenant, body, sent_ns) VALUES ($1, $2, $3, $4, $5)"
		for w := range wcs {
			if wcs[w], err = pgx.Connect(ctx, o.dsn); err != nil {
				return res, err
			}
			if _, err := wcs[w].Prepare(ctx, "insert", insert); err != nil {
				return res, err
			}
		}
		write = func(ctx context.Context, w, i int, sent int64) error {
			_, err := wcs[w].Exec(ctx, "insert", strconv.Itoa(i), scopeName(i%scopes), tenant, body, sent)
			return err
		}
	} else {
		write = func(ctx context.Context, w, i int, sent int64) error {
			b, err := json.Marshal(item{ID: strconv.Itoa(i), Scope: scopeName(i % scopes), Tenant: tenant, Body: body, SentNS: sent})
			if err != nil {
				return err
			}
			return srv.doJSON(ctx, "POST", "/write", bytes.NewReader(b), nil)
		}
	}
	st0, err := srv.stats(ctx, false)
	if err != nil {
		return res, err
	}
	waitProf := srv.profile(ctx, o.prof, o.duration)
	s1 := takeSample(srv)
	sent, done, took, err := paceWrites(ctx, o, write, conns.failure)
	if err != nil {
		return res, err
	}
	s2 := takeSample(srv)
	if err := waitProf(); err != nil {
		return res, fmt.Errorf("profile: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	derr := waitUntil(dctx, conns, 10*time.Millisecond, "every delivery", func() bool { return conns.entries() >= expected })
	dcancel()
	if derr != nil && ctx.Err() != nil {
		return res, derr
	}
	st1, err := srv.stats(ctx, false)
	if err != nil {
		return res, err
	}

	lat, upper, commit, early, missing, dups := arrivals(conns, scopes, total, expected, sent, done)
	u := s1.to(s2)
	res = latencyResult{Server: "tide", Feed: o.feed, N: n, Rate: o.rate, Duration: o.duration.Seconds(), Scopes: scopes, Auth: o.auth,
		Commits: total, CommitsPerS: float64(total) / took.Seconds(),
		Latency: quantilesOf(lat), FromSend: quantilesOf(upper), CommitRTT: quantilesOf(commit),
		Deliveries: float64(len(lat)) / u.Seconds, Expected: expected, Missing: missing, Early: early, Duplicates: dups,
		Usage: u, Dropped: st1.Engine.Dropped - st0.Engine.Dropped, TailBatches: st1.Engine.TailBatches - st0.Engine.TailBatches}
	if st0.PG != nil && st1.PG != nil {
		res.Polls = st1.PG.Polls - st0.PG.Polls
		res.Notifications = st1.PG.Notifications - st0.PG.Notifications
	}
	return res, nil
}

// expectedDeliveries is how many deliveries total writes to n subscribers
// make: connection i subscribes to scope i % scopes, write j goes to scope
// j % scopes.
func expectedDeliveries(n, scopes, total int) int64 {
	subsPer := make([]int64, scopes)
	for i := range n {
		subsPer[i%scopes]++
	}
	var expected int64
	for i := range total {
		expected += subsPer[i%scopes]
	}
	return expected
}

type latencyResult struct {
	Server        string    `json:"server"`
	Feed          string    `json:"feed,omitempty"` // tide: "pg" or "mem"
	Round         int       `json:"round"`
	Env           env       `json:"env"`
	N             int       `json:"n"`
	Rate          float64   `json:"rate"`
	Duration      float64   `json:"duration_s"`
	Scopes        int       `json:"scopes"`
	Auth          bool      `json:"auth"`
	Commits       int       `json:"commits"`
	CommitsPerS   float64   `json:"commits_per_s"`
	Latency       quantiles `json:"commit_to_client"`
	FromSend      quantiles `json:"send_to_client"`
	CommitRTT     quantiles `json:"insert_commit_round_trip"`
	Deliveries    float64   `json:"deliveries_per_s"`
	Expected      int64     `json:"deliveries_expected"`
	Missing       int64     `json:"deliveries_missing"`
	Early         int64     `json:"arrived_before_commit_returned"`
	Duplicates    int64     `json:"duplicates"`
	Usage         usage     `json:"usage"`
	Dropped       int64     `json:"dropped"`
	TailBatches   int64     `json:"tail_batches"`
	Polls         int64     `json:"polls"`
	Notifications int64     `json:"notifications"`
}

func (r latencyResult) text() string {
	var b strings.Builder
	auth := "RequireClaim policy + row filter"
	if !r.Auth {
		auth = "no policy, no filter"
	}
	if r.Server == "centrifugo" {
		fmt.Fprintf(&b, "centrifugo round %d: %d publishes at %.0f/s (%.1f achieved) over %.0f s, each to %d subscribers on %d channel(s); HTTP API publish, memory engine, no database, no per-row filter\n",
			r.Round, r.Commits, r.Rate, r.CommitsPerS, r.Duration, r.N, r.Scopes)
		fmt.Fprintf(&b, "  publish-to-client:  %s  (from the publish call returning)\n", r.Latency)
		fmt.Fprintf(&b, "  send-to-client:     %s  (includes the publish round trip)\n", r.FromSend)
		fmt.Fprintf(&b, "  publish call:       %s\n", r.CommitRTT)
	} else {
		feedName := "Postgres feed (SQL INSERT, capture, sequencer, NOTIFY, tail query)"
		if r.Feed == "mem" {
			feedName = "in-memory feed (HTTP POST, Table.Upsert)"
		}
		fmt.Fprintf(&b, "tideload latency, tide round %d: %d commits at %.0f/s (%.1f achieved) over %.0f s, each to %d subscribers on %d scope(s); %s, %s\n",
			r.Round, r.Commits, r.Rate, r.CommitsPerS, r.Duration, r.N, r.Scopes, feedName, auth)
		fmt.Fprintf(&b, "  (%s; %s)\n", r.Env, r.Env.Flags)
		fmt.Fprintf(&b, "  commit-to-client:   %s\n", r.Latency)
		fmt.Fprintf(&b, "  send-to-client:     %s  (includes the INSERT+COMMIT round trip)\n", r.FromSend)
		fmt.Fprintf(&b, "  INSERT+COMMIT:      %s\n", r.CommitRTT)
	}
	fmt.Fprintf(&b, "  deliveries/s: %s (%s of %s delivered; %d missing, %d duplicates, %d before the writer saw COMMIT return)\n",
		commas(r.Deliveries), commas(float64(r.Latency.N)), commas(float64(r.Expected)), r.Missing, r.Duplicates, r.Early)
	fmt.Fprintf(&b, "  CPU while writing: %s\n", r.Usage)
	if r.Server == "centrifugo" {
		return b.String()
	}
	fmt.Fprintf(&b, "  server: %d tail batches, %d notifications, %d poll wake-ups, %d live entries dropped\n", r.TailBatches, r.Notifications, r.Polls, r.Dropped)
	return b.String()
}

// arrivals turns the fleet's arrival times into latencies: arrival − done
// (the write returned; an arrival before it counts as 0, and as early),
// arrival − sent (an upper bound), and done − sent per write. Connection i
// subscribes to scope i % scopes, which write j goes to when j % scopes
// matches.
func arrivals(conns fleet, scopes, total int, expected int64, sent, done []int64) (lat, upper, call []int64, early, missing, dups int64) {
	lat = make([]int64, 0, expected)
	upper = make([]int64, 0, expected)
	for _, c := range conns {
		dups += c.dups.Load()
		for i := c.i % scopes; i < total; i += scopes {
			r := c.recv[i]
			if r == 0 {
				missing++
				continue
			}
			d := r - done[i]
			if d < 0 {
				early++
				d = 0
			}
			lat = append(lat, d)
			upper = append(upper, r-sent[i])
		}
	}
	call = make([]int64, total)
	for i := range total {
		call[i] = done[i] - sent[i]
	}
	return lat, upper, call, early, missing, dups
}
