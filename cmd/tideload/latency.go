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
	_ = fs.Parse(args)
	total := int(*rate * duration.Seconds())
	if *n < 1 || *n > 19000 || *rate <= 0 || *rate > 10000 || total < 1 || *scopes < 1 || *scopes > *n || int64(*n)*int64(total) > 50_000_000 {
		return errors.New("latency: need 1 ≤ -n ≤ 19000, 0 < -rate ≤ 10000, 1 ≤ -scopes ≤ n, and n × rate × duration ≤ 50M")
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
	sargs := append(pg.serverArgs(), "-pgconns", strconv.Itoa(*pgConns))
	if *auth {
		sargs = append(sargs, "-auth")
	}
	srv, err := startChild(ctx, "serve", sargs...)
	if err != nil {
		return err
	}
	defer srv.stop()
	conns, err := openFleet(ctx, *n, *conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialLoad(ctx, srv.addr, i, dialOpts{path: "/tide/ws", tide: true, auth: *auth, scope: scopeName(i % *scopes), readBuf: 4096, track: total})
	})
	if err != nil {
		return err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 10*time.Millisecond, "caught-up", func() bool { return conns.caughtUp() == *n }); err != nil {
		return err
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
		return err
	}
	defer wc.Close(context.Background())
	insert := "INSERT INTO " + pg.table() + " (id, scope, tenant, body, sent_ns) VALUES ($1, $2, $3, $4, $5)"
	if _, err := wc.Prepare(ctx, "insert", insert); err != nil {
		return err
	}
	body := strings.Repeat("lorem ipsum dolor sit amet ", *bodyLen/27+1)[:*bodyLen]
	st0, err := srv.stats(ctx, false)
	if err != nil {
		return err
	}
	sent := make([]int64, total)
	done := make([]int64, total)
	interval := time.Duration(float64(time.Second) / *rate)
	waitProf := srv.profile(ctx, *prof, *duration)
	stopLoadProf, err := cm.profileLoad()
	if err != nil {
		return err
	}
	defer stopLoadProf()
	s1 := takeSample(srv)
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		sent[i] = clock()
		if _, err := wc.Exec(ctx, "insert", strconv.Itoa(i), scopeName(i%*scopes), tenant, body, sent[i]); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("insert %d: %w", i, err)
		}
		done[i] = clock()
		if i%64 == 0 {
			if err := conns.failure(); err != nil {
				return err
			}
		}
	}
	writeEnd := time.Now()
	s2 := takeSample(srv)
	stopLoadProf()
	if err := waitProf(); err != nil {
		return fmt.Errorf("profile: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	derr := waitUntil(dctx, conns, 10*time.Millisecond, "every delivery", func() bool { return conns.entries() >= expected })
	dcancel()
	if derr != nil && ctx.Err() != nil {
		return derr
	}
	st1, err := srv.stats(ctx, false)
	if err != nil {
		return err
	}

	lat := make([]int64, 0, expected)
	upper := make([]int64, 0, expected)
	var early, missing, dups int64
	for _, c := range conns {
		dups += c.dups.Load()
		s := c.i % *scopes
		for i := s; i < total; i += *scopes {
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
	commit := make([]int64, total)
	for i := range total {
		commit[i] = done[i] - sent[i]
	}
	u := s1.to(s2)
	res := latencyResult{Env: newEnv(fs), N: *n, Rate: *rate, Duration: duration.Seconds(), Scopes: *scopes, Auth: *auth,
		Commits: total, CommitsPerS: float64(total) / writeEnd.Sub(start).Seconds(),
		Latency: quantilesOf(lat), FromSend: quantilesOf(upper), CommitRTT: quantilesOf(commit),
		Deliveries: float64(len(lat)) / u.Seconds, Expected: expected, Missing: missing, Early: early, Duplicates: dups,
		Usage: u, Dropped: st1.Engine.Dropped - st0.Engine.Dropped, TailBatches: st1.Engine.TailBatches - st0.Engine.TailBatches}
	if st0.PG != nil && st1.PG != nil {
		res.Polls = st1.PG.Polls - st0.PG.Polls
		res.Notifications = st1.PG.Notifications - st0.PG.Notifications
	}
	if err := emit(cm.json, res, res.text()); err != nil {
		return err
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d deliveries missing", missing, expected)
	}
	return nil
}

type latencyResult struct {
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
	fmt.Fprintf(&b, "tideload latency: %d commits at %.0f/s (%.1f achieved) over %.0f s, each to %d subscribers on %d scope(s); Postgres feed, %s\n",
		r.Commits, r.Rate, r.CommitsPerS, r.Duration, r.N, r.Scopes, auth)
	fmt.Fprintf(&b, "  (%s; %s)\n", r.Env, r.Env.Flags)
	fmt.Fprintf(&b, "  commit-to-client:   %s\n", r.Latency)
	fmt.Fprintf(&b, "  send-to-client:     %s  (includes the INSERT+COMMIT round trip)\n", r.FromSend)
	fmt.Fprintf(&b, "  INSERT+COMMIT:      %s\n", r.CommitRTT)
	fmt.Fprintf(&b, "  deliveries/s: %s (%s of %s delivered; %d missing, %d duplicates, %d before the writer saw COMMIT return)\n",
		commas(r.Deliveries), commas(float64(r.Latency.N)), commas(float64(r.Expected)), r.Missing, r.Duplicates, r.Early)
	fmt.Fprintf(&b, "  CPU while writing: %s\n", r.Usage)
	fmt.Fprintf(&b, "  server: %d tail batches, %d notifications, %d poll wake-ups, %d live entries dropped\n", r.TailBatches, r.Notifications, r.Polls, r.Dropped)
	return b.String()
}
