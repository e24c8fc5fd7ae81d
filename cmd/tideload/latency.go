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
	_ = fs.Parse(args)
	total := int(*rate * duration.Seconds())
	if *n < 1 || *n > 19000 || *rate <= 0 || *rate > 10000 || total < 1 || *scopes < 1 || *scopes > *n || int64(*n)*int64(total) > 50_000_000 || *rounds < 1 || *rounds > 10 {
		return errors.New("latency: need 1 ≤ -n ≤ 19000, 0 < -rate ≤ 10000, 1 ≤ -scopes ≤ n, n × rate × duration ≤ 50M, 1 ≤ -rounds ≤ 10")
	}
	dsn, err := dsnOr(*dsnFlag)
	if err != nil {
		return err
	}
	ctx, cancel := cm.context()
	defer cancel()
	o := latencyRun{n: *n, rate: *rate, duration: *duration, scopes: *scopes, bodyLen: *bodyLen, auth: *auth, dsn: dsn,
		pgConns: *pgConns, conc: *conc, prof: *prof, total: total}
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
		res, err := latencyTide(ctx, o)
		if err != nil {
			return fmt.Errorf("tide: %w", err)
		}
		res.Env = out.Env
		res.Round = r + 1
		out.Tide = append(out.Tide, res)
		if *cfBin != "" {
			cf, err := latencyCentrifugo(ctx, *cfBin, o)
			if err != nil {
				return fmt.Errorf("centrifugo: %w", err)
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
	n, scopes, bodyLen, pgConns, conc, total int
	rate                                     float64
	duration                                 time.Duration
	auth                                     bool
	dsn, prof                                string
}

// latencyReport is every round of a run.
type latencyReport struct {
	Env        env             `json:"env"`
	Tide       []latencyResult `json:"tide"`
	Centrifugo []latencyResult `json:"centrifugo,omitempty"`
}

func (r latencyReport) text(peer bool) string {
	var b strings.Builder
	for i, t := range r.Tide {
		b.WriteString(t.text())
		if i < len(r.Centrifugo) {
			b.WriteString(r.Centrifugo[i].text())
		}
	}
	if !peer {
		b.WriteString("  " + centrifugoNote + "\n")
		return b.String()
	}
	fmt.Fprintf(&b, "same run, side by side, ms: commit (tide) or publish call (centrifugo) returned → client; sent → client (the write or publish call started)\n")
	fmt.Fprintf(&b, "  %-7s %-11s %8s %8s %8s %8s %10s %10s   %s\n", "round", "server", "p50", "p90", "p99", "max", "sent p50", "sent p99", "server CPU, load CPU, other CPU (s)")
	for i, t := range r.Tide {
		c := r.Centrifugo[i]
		for _, x := range []struct {
			name string
			l    latencyResult
		}{{"tide", t}, {"centrifugo", c}} {
			fmt.Fprintf(&b, "  #%-6d %-11s %8.2f %8.2f %8.2f %8.2f %10.2f %10.2f   %.2f, %.2f, %.2f\n", i+1, x.name,
				x.l.Latency.P50, x.l.Latency.P90, x.l.Latency.P99, x.l.Latency.Max, x.l.FromSend.P50, x.l.FromSend.P99, x.l.Usage.ServerCPU, x.l.Usage.LoadCPU, x.l.Usage.OtherCPU)
		}
		fmt.Fprintf(&b, "  #%-6d %-11s %8.2f %8.2f %8.2f %8.2f %10.2f %10.2f\n", i+1, "tide/cf", ratio(t.Latency.P50, c.Latency.P50),
			ratio(t.Latency.P90, c.Latency.P90), ratio(t.Latency.P99, c.Latency.P99), ratio(t.Latency.Max, c.Latency.Max), ratio(t.FromSend.P50, c.FromSend.P50), ratio(t.FromSend.P99, c.FromSend.P99))
	}
	return b.String()
}

// latencyTide is one tide round on the Postgres feed.
func latencyTide(ctx context.Context, o latencyRun) (latencyResult, error) {
	n, scopes, total, dsn := &o.n, &o.scopes, o.total, o.dsn
	var res latencyResult
	pg, err := newPGRun(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer pg.drop()
	sargs := append(pg.serverArgs(), "-pgconns", strconv.Itoa(o.pgConns))
	if o.auth {
		sargs = append(sargs, "-auth")
	}
	srv, err := startChild(ctx, "serve", sargs...)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	conns, err := openFleet(ctx, *n, o.conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialLoad(ctx, srv.addr, i, dialOpts{path: "/tide/ws", tide: true, auth: o.auth, scope: scopeName(i % *scopes), readBuf: 4096, track: total})
	})
	if err != nil {
		return res, err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 10*time.Millisecond, "caught-up", func() bool { return conns.caughtUp() == *n }); err != nil {
		return res, err
	}
	subsPer := make([]int64, *scopes)
	for i := range *n {
		subsPer[i%*scopes]++
	}
	var expected int64
	for i := range total {
		expected += subsPer[i%*scopes]
	}

	wc, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer wc.Close(context.Background())
	insert := "INSERT INTO " + pg.table() + " (id, scope, tenant, body, sent_ns) VALUES ($1, $2, $3, $4, $5)"
	if _, err := wc.Prepare(ctx, "insert", insert); err != nil {
		return res, err
	}
	body := strings.Repeat("lorem ipsum dolor sit amet ", o.bodyLen/27+1)[:o.bodyLen]
	st0, err := srv.stats(ctx, false)
	if err != nil {
		return res, err
	}
	sent := make([]int64, total)
	done := make([]int64, total)
	interval := time.Duration(float64(time.Second) / o.rate)
	waitProf := srv.profile(ctx, o.prof, o.duration)
	s1 := takeSample(srv)
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return res, context.Cause(ctx)
			}
		}
		sent[i] = clock()
		if _, err := wc.Exec(ctx, "insert", strconv.Itoa(i), scopeName(i%*scopes), tenant, body, sent[i]); err != nil {
			if ctx.Err() != nil {
				return res, context.Cause(ctx)
			}
			return res, fmt.Errorf("insert %d: %w", i, err)
		}
		done[i] = clock()
		if i%64 == 0 {
			if err := conns.failure(); err != nil {
				return res, err
			}
		}
	}
	writeEnd := time.Now()
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

	lat, upper, commit, early, missing, dups := arrivals(conns, *scopes, total, expected, sent, done)
	u := s1.to(s2)
	res = latencyResult{Server: "tide", N: *n, Rate: o.rate, Duration: o.duration.Seconds(), Scopes: *scopes, Auth: o.auth,
		Commits: total, CommitsPerS: float64(total) / writeEnd.Sub(start).Seconds(),
		Latency: quantilesOf(lat), FromSend: quantilesOf(upper), CommitRTT: quantilesOf(commit),
		Deliveries: float64(len(lat)) / u.Seconds, Expected: expected, Missing: missing, Early: early, Duplicates: dups,
		Usage: u, Dropped: st1.Engine.Dropped - st0.Engine.Dropped, TailBatches: st1.Engine.TailBatches - st0.Engine.TailBatches}
	if st0.PG != nil && st1.PG != nil {
		res.Polls = st1.PG.Polls - st0.PG.Polls
		res.Notifications = st1.PG.Notifications - st0.PG.Notifications
	}
	return res, nil
}

type latencyResult struct {
	Server        string    `json:"server"`
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
		fmt.Fprintf(&b, "tideload latency, tide round %d: %d commits at %.0f/s (%.1f achieved) over %.0f s, each to %d subscribers on %d scope(s); Postgres feed, %s\n",
			r.Round, r.Commits, r.Rate, r.CommitsPerS, r.Duration, r.N, r.Scopes, auth)
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
