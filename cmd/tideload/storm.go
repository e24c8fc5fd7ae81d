package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// storm measures a reconnect storm on the Postgres feed: C clients on S
// scopes subscribe (snapshot) and go live while a writer in this process
// commits rows at a modest rate; then every connection is cut at once
// (TCP closed, as when a network drops), stays down for a while as writes
// go on, and every client reconnects at once and resubscribes with the
// cursor it last received. Reported: the time until every client is caught
// up again, and how many replay queries that took: the server's own count
// (Stats.ReplayQueries) and Postgres's (pg_stat_statements if installed,
// else the change log's index scans as a proxy), against the pages the
// clients needed, per client and per scope.
func storm(args []string) error {
	fs := flag.NewFlagSet("storm", flag.ExitOnError)
	var cm common
	cm.register(fs, 10*time.Minute)
	n := fs.Int("n", 5000, "clients (at most 19000)")
	scopes := fs.Int("scopes", 50, "scopes the clients spread over")
	rate := fs.Float64("rate", 100, "commits per second during the whole run (rows round-robin over the scopes)")
	seed := fs.Int("seed", 20, "rows per scope before the clients subscribe")
	down := fs.Duration("down", 2*time.Second, "how long every client stays disconnected")
	live := fs.Duration("live", time.Second, "how long the clients stay live before the drop")
	limit := fs.Int("limit", 0, "page size the clients ask for (0: the server's default, 1000)")
	bodyLen := fs.Int("body", 64, "bytes of each row's body column")
	auth := fs.Bool("auth", true, "principals, RequireClaim and a row filter")
	dsnFlag := fs.String("dsn", "", "Postgres URL (default: TIDE_TEST_DATABASE_URL, else "+defaultDSN+")")
	pgConns := fs.Int("pgconns", 0, "server's Postgres pool size (0: pgxpool's default)")
	conc := fs.Int("conc", 64, "connections opened at a time before the storm")
	resumeConc := fs.Int("resume-conc", 0, "connections reopened at a time in the storm (0: all at once)")
	_ = fs.Parse(args)
	if *n < 1 || *n > 19000 || *scopes < 1 || *scopes > *n || *rate <= 0 || *rate > 1000 || *seed < 0 || *limit < 0 {
		return errors.New("storm: need 1 ≤ -n ≤ 19000, 1 ≤ -scopes ≤ n, 0 < -rate ≤ 1000, -seed ≥ 0, -limit ≥ 0")
	}
	pageSize := *limit
	if pageSize == 0 {
		pageSize = 1000
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
	body := strings.Repeat("lorem ipsum dolor sit amet ", *bodyLen/27+1)[:*bodyLen]
	if *seed > 0 {
		if _, err := pg.conn.Exec(ctx, "INSERT INTO "+pg.table()+" (id, scope, tenant, body) SELECT 'seed' || i, 's' || (i % $1), $2, $3 FROM generate_series(0, $4 - 1) i",
			*scopes, tenant, body, *seed**scopes); err != nil {
			return err
		}
	}
	sargs := append(pg.serverArgs(), "-pgconns", strconv.Itoa(*pgConns))
	if *auth {
		sargs = append(sargs, "-auth")
	}
	srv, err := startChild(ctx, "serve", sargs...)
	if err != nil {
		return err
	}
	defer srv.stop()

	// The writer: one row per transaction, at the rate, until the run ends.
	wc, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer wc.Close(context.Background())
	var written atomic.Int64
	wctx, wcancel := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() {
		werr <- func() error {
			insert := "INSERT INTO " + pg.table() + " (id, scope, tenant, body, sent_ns) VALUES ($1, $2, $3, $4, $5)"
			interval := time.Duration(float64(time.Second) / *rate)
			start := time.Now()
			for i := 0; ; i++ {
				select {
				case <-time.After(time.Until(start.Add(time.Duration(i) * interval))):
				case <-wctx.Done():
					return nil
				}
				if _, err := wc.Exec(wctx, insert, strconv.Itoa(i), scopeName(i%*scopes), tenant, body, clock()); err != nil {
					if wctx.Err() != nil {
						return nil
					}
					return err
				}
				written.Add(1)
			}
		}()
	}()
	stopWriter := sync.OnceValue(func() error { wcancel(); return <-werr })
	defer stopWriter()

	dial := func(round int, cursors [][]byte, conc int) (fleet, error) {
		return openFleet(ctx, *n, conc, func(ctx context.Context, i int) (*loadConn, error) {
			o := dialOpts{path: "/tide/ws", tide: true, auth: *auth, scope: scopeName(i % *scopes), limit: *limit, round: round, readBuf: 2048}
			if cursors != nil {
				o.cursor = string(cursors[i])
			}
			return dialLoad(ctx, srv.addr, i, o)
		})
	}
	t0 := time.Now()
	first, err := dial(0, nil, *conc)
	if err != nil {
		return err
	}
	defer first.close()
	if err := waitUntil(ctx, first, 20*time.Millisecond, "the first caught-up", func() bool { return first.caughtUp() == *n }); err != nil {
		return err
	}
	connectTime := time.Since(t0)
	select {
	case <-time.After(*live):
	case <-ctx.Done():
		return context.Cause(ctx)
	}

	// Counters before the storm; Postgres publishes a backend's scan
	// counters when it exits, so the server's pool is released first.
	release := func() (logScans, error) {
		if err := srv.doJSON(ctx, "POST", "/debug/pg-release", nil, nil); err != nil {
			return logScans{}, err
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return logScans{}, context.Cause(ctx)
		}
		return pg.scans(ctx)
	}
	scans0, err := release()
	if err != nil {
		return err
	}
	st0, err := srv.stats(ctx, false)
	if err != nil {
		return err
	}
	writtenAtDrop := written.Load()
	first.close() // the drop: every connection cut at once
	cursors := make([][]byte, *n)
	for i, c := range first {
		if len(c.cursor) == 0 {
			return fmt.Errorf("client %d has no cursor", i)
		}
		cursors[i] = c.cursor
	}
	select {
	case <-time.After(*down):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	s1 := takeSample(srv)
	resumeAt := clock()
	rc := *resumeConc
	if rc <= 0 {
		rc = *n
	}
	second, err := dial(1, cursors, rc)
	if err != nil {
		return err
	}
	defer second.close()
	if err := waitUntil(ctx, second, 5*time.Millisecond, "every client caught up", func() bool { return second.caughtUp() == *n }); err != nil {
		return err
	}
	s2 := takeSample(srv)
	writtenAtEnd := written.Load()
	st1, err := srv.stats(ctx, false)
	if err != nil {
		return err
	}
	if err := stopWriter(); err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	scans1, err := release()
	if err != nil {
		return err
	}

	// Pages: a client replaying alone needs replayed/limit + 1 queries
	// (the last page is short, possibly empty).
	times := make([]int64, *n)
	maxPages := make([]int64, *scopes)
	var clientPages, replayed, lastAt int64
	for i, c := range second {
		at := c.caughtAt.Load()
		times[i] = at - resumeAt
		lastAt = max(lastAt, at)
		r := c.replayed.Load()
		replayed += r
		p := r/int64(pageSize) + 1
		clientPages += p
		maxPages[i%*scopes] = max(maxPages[i%*scopes], p)
	}
	var scopePages, pagesPerClient int64
	for _, p := range maxPages {
		scopePages += p
		pagesPerClient = max(pagesPerClient, p)
	}
	res := stormResult{Env: newEnv(fs), N: *n, Scopes: *scopes, Rate: *rate, Down: down.Seconds(), PageSize: pageSize, Auth: *auth,
		ConnectSeconds: connectTime.Seconds(),
		CatchUp:        float64(lastAt-resumeAt) / 1e9, CatchUpFromDrop: float64(lastAt-resumeAt)/1e9 + down.Seconds(),
		PerClient: quantilesOf(times), Replayed: replayed, WrittenWhileDown: writtenAtEnd - writtenAtDrop,
		ReplayQueries: st1.Engine.ReplayQueries - st0.Engine.ReplayQueries, SnapshotQueries: st1.Engine.SnapshotQueries - st0.Engine.SnapshotQueries,
		ClientPages: clientPages, ScopePages: scopePages, PagesPerClient: pagesPerClient,
		PG: scans0.delta(scans1), Usage: s1.to(s2), Resets: st1.Engine.Resets - st0.Engine.Resets}
	res.PGReplayScans = res.PG.replayIndexScans()
	res.QueriesPerPage = ratio(float64(res.ReplayQueries), float64(pagesPerClient))
	res.QueriesPerScopePage = ratio(float64(res.ReplayQueries), float64(scopePages))
	return emit(cm.json, res, res.text())
}

type stormResult struct {
	Env                 env       `json:"env"`
	N                   int       `json:"n"`
	Scopes              int       `json:"scopes"`
	Rate                float64   `json:"rate"`
	Down                float64   `json:"down_s"`
	PageSize            int       `json:"page_size"`
	Auth                bool      `json:"auth"`
	ConnectSeconds      float64   `json:"initial_connect_s"`
	CatchUp             float64   `json:"catch_up_s"`            // from the reconnect to the last caught-up
	CatchUpFromDrop     float64   `json:"catch_up_from_drop_s"`  // the same, from the drop
	PerClient           quantiles `json:"per_client_catch_up"`   // reconnect to caught-up, per client
	Replayed            int64     `json:"entries_replayed"`      // entries received before caught-up, all clients
	WrittenWhileDown    int64     `json:"rows_written_in_storm"` // from the drop to the last caught-up
	ReplayQueries       int64     `json:"replay_queries"`        // server Stats delta
	SnapshotQueries     int64     `json:"snapshot_queries"`
	Resets              int64     `json:"resets"`
	ClientPages         int64     `json:"client_pages"`     // Σ over clients of the pages each needed
	ScopePages          int64     `json:"scope_pages"`      // Σ over scopes of the pages a scope needed
	PagesPerClient      int64     `json:"pages_per_client"` // max over clients
	QueriesPerPage      float64   `json:"replay_queries_per_page"`
	QueriesPerScopePage float64   `json:"replay_queries_per_scope_page"`
	PG                  logScans  `json:"postgres"`
	PGReplayScans       int64     `json:"postgres_replay_index_scans"`
	Usage               usage     `json:"usage"`
}

func (r stormResult) text() string {
	var b strings.Builder
	auth := "RequireClaim policy + row filter"
	if !r.Auth {
		auth = "no policy, no filter"
	}
	fmt.Fprintf(&b, "tideload storm: %d clients on %d scopes, Postgres feed, %s; writes at %.0f/s throughout; all cut at once, down %.1f s, all resuming at once from their cursors (page %d)\n",
		r.N, r.Scopes, auth, r.Rate, r.Down, r.PageSize)
	fmt.Fprintf(&b, "  (%s; %s)\n", r.Env, r.Env.Flags)
	fmt.Fprintf(&b, "  initial connect + snapshot of all clients: %.2f s\n", r.ConnectSeconds)
	fmt.Fprintf(&b, "  every client caught up again: %.2f s after reconnecting (%.2f s after the drop)\n", r.CatchUp, r.CatchUpFromDrop)
	fmt.Fprintf(&b, "  per client, reconnect to caught-up: %s\n", r.PerClient)
	fmt.Fprintf(&b, "  rows written from the drop to the last caught-up: %d; entries replayed to clients: %s\n", r.WrittenWhileDown, commas(float64(r.Replayed)))
	fmt.Fprintf(&b, "  replay queries (server): %d; pages needed: %d per client at most, %d summed over clients, %d summed over scopes\n",
		r.ReplayQueries, r.PagesPerClient, r.ClientPages, r.ScopePages)
	fmt.Fprintf(&b, "  replay queries per page: %.1f (scopes %d, clients %d); per scope-page: %.2f (1 = one read per scope and page)\n",
		r.QueriesPerPage, r.Scopes, r.N, r.QueriesPerScopePage)
	fmt.Fprintf(&b, "  Postgres, change log: %s (replay index scans %d)\n", r.PG, r.PGReplayScans)
	fmt.Fprintf(&b, "  snapshot queries %d, resets %d\n", r.SnapshotQueries, r.Resets)
	fmt.Fprintf(&b, "  CPU, reconnect to caught-up: %s\n", r.Usage)
	return b.String()
}
