package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed/pgfeed/logrepl"
	"github.com/tidesync/tide/internal/testenv"
)

// runConfig is one fault run: every configuration (a capture with a bus)
// in turn, each with its own schema, nodes, clients, writers and faults.
type runConfig struct {
	dsn, natsURL  string
	captures      []string
	buses         []string
	size          int
	nodes         int
	clients       int
	tenants       int
	idle          time.Duration
	faultEvery    time.Duration // mean pause between two faults
	serviceEvery  time.Duration // least time between two restarts of one service
	restartPG     bool          // restart Postgres as a fault
	restartNATS   bool          // restart NATS as a fault (bus nats)
	converge      time.Duration // bound on the wait for convergence
	seed          uint64
	dir           string
	pgAddr        string
	natsAddr      string
	pgWasUp       bool
	natsWasUp     bool
	problemsShown int
	sabotage      string // "uncaptured": writes the capture misses (-sabotage)

	// The server of the logical capture: TIDE_TEST_LOGICAL_DATABASE_URL's,
	// or the private cluster the run started (logical, nil otherwise).
	logicalURL string
	logical    *testenv.LogicalCluster
}

// config is one configuration of a run: a capture (trigger, logical) and
// a bus (pg, nats).
type config struct{ capture, bus string }

// name names the configuration's schema, NATS prefix and directory: the
// bus alone under the trigger capture (as before the logical capture was
// run), "logical_" and the bus under the logical one.
func (c config) name() string {
	if c.capture == "logical" {
		return "logical_" + c.bus
	}
	return c.bus
}

// phase is how long one configuration writes and injects faults.
func (rc *runConfig) phase() time.Duration { return time.Duration(rc.size) * 20 * time.Second }

// faultKinds, with their weights after the first round (one of each). A
// kill of a role's holder that finds none (its node was just killed and
// no other has taken the role yet) is tried again at the next pause, at
// most three times, so each configuration kills the sequencer's node
// (under the logical capture, the slot's consumer) and the replicator
// leader's at least once.
var faultKinds = []struct {
	name   string
	weight int
}{
	{"kill", 3}, {"kill-sequencer", 1}, {"kill-replicator", 1}, {"stall", 2}, {"client-restart", 2}, {"pg-restart", 1}, {"nats-restart", 1},
}

// busResult is what one configuration found.
type busResult struct {
	capture     string
	bus         string
	c           counts
	faults      map[string]int
	skipped     map[string]int
	resets      int
	saves       int
	sqlWrites   int
	sqlFailed   int
	converge    time.Duration
	roles       string
	elapsed     time.Duration
	nodeStarts  int
	clientEvent map[string]int
}

func (r busResult) line() string {
	return fmt.Sprintf("capture=%s bus=%s %s %s faults{%s} skipped{%s} sql_writes=%d (failed %d) cursor_saves=%d resets=%d converged_in=%s roles=%s elapsed=%s client_events{%s}",
		r.capture, r.bus, verdict(r.c.failed() || !strings.HasPrefix(r.roles, "ok")), r.c, pairs(r.faults), pairs(r.skipped),
		r.sqlWrites, r.sqlFailed, r.saves, r.resets, r.converge.Round(10*time.Millisecond), r.roles, r.elapsed.Round(100*time.Millisecond), pairs(r.clientEvent))
}

func verdict(failed bool) string {
	if failed {
		return "FAIL"
	}
	return "ok"
}

func pairs(m map[string]int) string {
	var kv []any
	for _, k := range sortedKeys(m) {
		kv = append(kv, k, m[k])
	}
	return joinPairs(kv...)
}

// faultDB returns the URL of the run's own database, next to the test
// database of dsn.
func faultDB(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Path = "/tidefault"
	return u.String(), nil
}

// ensureDatabase creates the run's database if it is missing.
func ensureDatabase(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'tidefault')`).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, `CREATE DATABASE tidefault`)
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() == "42P04" { // created meanwhile
		return nil
	}
	return err
}

// resetSchema drops and recreates the bus configuration's schemas and
// tables, with one counter row per tenant.
func resetSchema(ctx context.Context, pool *pgxpool.Pool, schema string, tenants int) error {
	stmts := []string{
		`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`,
		`DROP SCHEMA IF EXISTS ` + schema + `_tide CASCADE`,
		`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + schema + `.items (id text PRIMARY KEY, tenant text NOT NULL, vis text NOT NULL, n bigint NOT NULL, writer text NOT NULL)`,
		// No unique key: a mutation applied twice shows as two rows.
		`CREATE TABLE ` + schema + `.applied (key text NOT NULL, client text NOT NULL, node text NOT NULL, tenant text NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	for t := range tenants {
		if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.items (id, tenant, vis, n, writer) VALUES ($1, $2, 'all', 0, 'counter')`,
			counterID(tenantName(t)), tenantName(t)); err != nil {
			return err
		}
	}
	return nil
}

// readDB reads the database the clients are compared with.
func readDB(ctx context.Context, pool *pgxpool.Pool, schema string) (dbState, error) {
	db := dbState{Items: map[string]item{}, Applied: map[string]int{}, Counters: map[string]int64{}, KeysByTenant: map[string]int{}}
	rows, err := pool.Query(ctx, `SELECT id, tenant, vis, n, writer FROM `+schema+`.items`)
	if err != nil {
		return db, err
	}
	its, err := pgx.CollectRows(rows, pgx.RowToStructByPos[item])
	if err != nil {
		return db, err
	}
	for _, it := range its {
		db.Items[it.ID] = it
		if it.Writer == "counter" {
			db.Counters[it.Tenant] = it.N
		}
	}
	rows, err = pool.Query(ctx, `SELECT key, count(*) FROM `+schema+`.applied GROUP BY key`)
	if err != nil {
		return db, err
	}
	var key string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error { db.Applied[key] = n; return nil }); err != nil {
		return db, err
	}
	rows, err = pool.Query(ctx, `SELECT tenant, count(DISTINCT key) FROM `+schema+`.applied GROUP BY tenant`)
	if err != nil {
		return db, err
	}
	var tenant string
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &n}, func() error { db.KeysByTenant[tenant] = n; return nil }); err != nil {
		return db, err
	}
	return db, nil
}

// deleteStream deletes the NATS stream of a prefix, if it exists.
func deleteStream(ctx context.Context, natsURL, prefix string) error {
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = js.DeleteStream(ctx, strings.ToUpper(prefix)+"_CHANGES")
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	return err
}

// runBus runs one configuration end to end.
func runBus(ctx context.Context, rc *runConfig, cf config) (res busResult, err error) {
	start := time.Now()
	bus, name := cf.bus, cf.name()
	logical := cf.capture == "logical"
	res = busResult{capture: cf.capture, bus: bus, faults: map[string]int{}, skipped: map[string]int{}, clientEvent: map[string]int{}}
	rng := rand.New(rand.NewPCG(rc.seed, uint64(len(name))))
	schema := "tf_" + name
	prefix := "tidefault" + strings.ReplaceAll(name, "_", "")
	dir := fmt.Sprintf("%s/%s", rc.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	dbURL, err := faultDB(rc.serverURL(cf.capture))
	if err != nil {
		return res, err
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return res, err
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "tidefault-run"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	if logical {
		// A slot left by an earlier run would keep its WAL and replay it.
		err = dropSlot(sctx, pool, schema+"_tide")
	}
	if err == nil {
		err = resetSchema(sctx, pool, schema, rc.tenants)
	}
	cancel()
	if err != nil {
		return res, err
	}
	if logical {
		// After the nodes stop (deferred below, so run first): the slot
		// would keep the server's WAL without bound.
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := dropSlot(dctx, pool, schema+"_tide"); err != nil {
				fmt.Fprintf(os.Stderr, "tidefault: capture=logical bus=%s: drop the slot: %v\n", bus, err)
			}
		}()
	}
	nodeArgs := []string{"-dsn", dbURL, "-schema", schema, "-capture", cf.capture, "-bus", bus, "-idle", rc.idle.String()}
	if bus == "nats" {
		if err := deleteStream(ctx, rc.natsURL, prefix); err != nil {
			return res, fmt.Errorf("delete the stream: %w", err)
		}
		defer func() { _ = deleteStream(context.Background(), rc.natsURL, prefix) }()
		nodeArgs = append(nodeArgs, "-nats", rc.natsURL, "-prefix", prefix)
	}

	nodes := newNodeSet(rc.nodes, dir, nodeArgs)
	defer nodes.stopAll()
	for i := range rc.nodes {
		if err := nodes.start(ctx, i); err != nil {
			return res, err
		}
	}

	// Clients, each behind its own proxy, homed on the nodes in turn.
	mon := newCursorMonitor()
	var fcs []*fclient
	defer func() {
		for _, fc := range fcs {
			fc.mu.Lock()
			fc.stop()
			fc.mu.Unlock()
			fc.proxy.close()
			eventMu.Lock()
			_ = fc.eventLog.Close()
			eventMu.Unlock()
		}
	}()
	for i := range rc.clients {
		home := i % rc.nodes
		p, err := newProxy(func(attempt int) (string, bool) {
			up := nodes.up()
			if len(up) == 0 {
				return "", false
			}
			if attempt == 0 && slices.Contains(up, home) {
				return nodes.addr(home)
			}
			return nodes.addr(up[(home+attempt)%len(up)])
		})
		if err != nil {
			return res, err
		}
		fc, err := newFClient(i, rc.tenants, dir, p, mon)
		if err != nil {
			p.close()
			return res, err
		}
		if err := fc.start(); err != nil {
			p.close()
			_ = fc.eventLog.Close()
			return res, err
		}
		fcs = append(fcs, fc)
	}

	// Writers, until the end of the fault phase.
	phase := rc.phase()
	wctx, stopWriters := context.WithTimeout(ctx, phase)
	defer stopWriters()
	var writers sync.WaitGroup
	var sqlMu sync.Mutex
	for w := range 2 {
		wrng := rand.New(rand.NewPCG(rc.seed, uint64(100+w)))
		writers.Go(func() {
			n, f := sqlWriter(wctx, pool, schema, wrng, rc.tenants, rc.clients, 40, rc.size*2000, 50*time.Millisecond)
			sqlMu.Lock()
			res.sqlWrites += n
			res.sqlFailed += f
			sqlMu.Unlock()
		})
	}
	for i, fc := range fcs {
		mrng := rand.New(rand.NewPCG(rc.seed, uint64(200+i)))
		writers.Go(func() { mutationWriter(wctx, fc, mrng, rc.size*1000, 300*time.Millisecond) })
	}

	// Faults, until the end of the phase.
	var stalls sync.WaitGroup
	sctx, stopStalls := context.WithCancel(ctx)
	defer stopStalls()
	var nodeErrMu sync.Mutex
	var nodeErr error
	lastService := map[string]time.Time{}
	// The faults this configuration injects: one of each first, in a
	// random order, then at random by weight.
	var enabled []string
	total := 0
	for _, k := range faultKinds {
		if (k.name == "pg-restart" && (!rc.restartPG || (logical && rc.logical == nil))) || (k.name == "nats-restart" && (!rc.restartNATS || bus != "nats")) {
			continue
		}
		enabled = append(enabled, k.name)
		total += k.weight
	}
	kinds := slices.Clone(enabled)
	retried := map[string]int{}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	pick := func() string {
		if len(kinds) > 0 {
			k := kinds[0]
			kinds = kinds[1:]
			return k
		}
		r := rng.IntN(total)
		for _, k := range faultKinds {
			if !slices.Contains(enabled, k.name) {
				continue
			}
			if r < k.weight {
				return k.name
			}
			r -= k.weight
		}
		return "kill"
	}
	killNode := func(i int, what string) {
		if !nodes.kill9(i) {
			res.skipped[what+"(down)"]++
			return
		}
		res.faults[what]++
		delay := time.Duration(300+rng.IntN(1700)) * time.Millisecond
		nodes.restart.Go(func() {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return
			}
			if err := nodes.startRetry(ctx, i); err != nil {
				nodeErrMu.Lock()
				nodeErr = errors.Join(nodeErr, err)
				nodeErrMu.Unlock()
			}
		})
	}
	phaseEnd := time.Now().Add(phase)
	for {
		wait := rc.faultEvery/2 + time.Duration(rng.Int64N(int64(rc.faultEvery)))
		if time.Now().Add(wait).After(phaseEnd) {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
		kind := pick()
		switch kind {
		case "kill":
			up := nodes.up()
			if len(up) == 0 {
				res.skipped[kind+"(all down)"]++
				continue
			}
			killNode(up[rng.IntN(len(up))], kind)
		case "kill-sequencer", "kill-replicator":
			// The role's holder, as the nodes report it.
			holder := -1
			for _, i := range nodes.up() {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				st, err := nodes.status(sctx, i)
				cancel()
				if err == nil && ((kind == "kill-sequencer" && st.Sequencing) || (kind == "kill-replicator" && st.Replicator == "leader")) {
					holder = i
					break
				}
			}
			if holder < 0 {
				res.skipped[kind+"(no holder)"]++
				if retried[kind] < 3 {
					retried[kind]++
					kinds = append(kinds, kind)
				}
				continue
			}
			killNode(holder, kind)
		case "stall":
			fc := fcs[rng.IntN(len(fcs))]
			d := rc.idle + rc.idle/2 + time.Duration(rng.Int64N(int64(rc.idle)))
			res.faults[kind]++
			stalls.Go(func() { fc.proxy.stall(sctx, d) })
		case "client-restart":
			fc := fcs[rng.IntN(len(fcs))]
			if err := fc.restart(); err != nil {
				return res, fmt.Errorf("restart client %s: %w", fc.user, err)
			}
			res.faults[kind]++
		case "pg-restart", "nats-restart":
			if time.Since(lastService[kind]) < rc.serviceEvery {
				res.skipped[kind]++
				continue
			}
			lastService[kind] = time.Now()
			var err error
			if kind == "pg-restart" {
				err = rc.restartPostgres(ctx, cf.capture)
			} else {
				err = restartNATS(ctx)
			}
			if err != nil {
				return res, fmt.Errorf("%s: %w", kind, err)
			}
			res.faults[kind]++
		}
	}

	// The end of the faults: writers stop, stalls end, services and nodes
	// are back.
	writers.Wait()
	stopStalls()
	stalls.Wait()
	nodes.restart.Wait()
	if nodeErr != nil {
		return res, nodeErr
	}
	if err := rc.restore(); err != nil {
		return res, err
	}
	for i := range rc.nodes {
		if _, ok := nodes.addr(i); !ok {
			if err := nodes.startRetry(ctx, i); err != nil {
				return res, err
			}
		}
	}

	if rc.sabotage == "uncaptured" {
		what, err := writeUncaptured(ctx, pool, schema, rc.tenants, logical)
		if err != nil {
			return res, fmt.Errorf("sabotage: %w", err)
		}
		fmt.Fprintf(os.Stderr, "tidefault: capture=%s bus=%s: sabotage: %s\n", cf.capture, bus, what)
	}

	// Convergence: every mutation settled and every copy equal to the
	// database, within a generous bound (a failure bound, not a figure).
	cstart := time.Now()
	deadline := cstart.Add(rc.converge)
	var final counts
	var problems []string
	lastShown := cstart
	for {
		problems = problems[:0]
		settled := true
		pending := 0
		for _, fc := range fcs {
			if n := fc.pending(); n > 0 {
				settled = false
				pending += n
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		db, err := readDB(rctx, pool, schema)
		cancel()
		if err != nil {
			return res, err
		}
		var views []clientView
		for _, fc := range fcs {
			v, err := fc.view()
			if err != nil {
				return res, err
			}
			views = append(views, v)
		}
		final = compare(db, views, func(s string) { problems = append(problems, s) })
		if (settled && !final.failed()) || time.Now().After(deadline) {
			break
		}
		if time.Since(lastShown) >= 15*time.Second {
			lastShown = time.Now()
			fmt.Fprintf(os.Stderr, "tidefault: capture=%s bus=%s: converging for %s: %d mutations pending, %s\n",
				cf.capture, bus, time.Since(cstart).Round(time.Second), pending, final)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	res.converge = time.Since(cstart)
	regressed, resets, saves, cursorProblems := mon.result()
	final.Regressed = regressed
	res.c, res.resets, res.saves = final, resets, saves
	for _, p := range append(cursorProblems, problems...) {
		if rc.problemsShown < 40 {
			fmt.Fprintf(os.Stderr, "tidefault: capture=%s bus=%s: %s\n", cf.capture, bus, p)
			rc.problemsShown++
		}
	}

	// Roles: one sequencer and one replicator leader among the nodes and,
	// under the logical capture, the slot streaming to its consumer.
	res.roles = "none"
	rdeadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(rdeadline) {
		var seq, lead int
		for i := range rc.nodes {
			st, err := nodes.status(ctx, i)
			if err != nil {
				continue
			}
			if st.Sequencing {
				seq++
			}
			if st.Replicator == "leader" {
				lead++
			}
		}
		res.roles = fmt.Sprintf("sequencers:%d,leaders:%d", seq, lead)
		slotOK := true
		if logical {
			slotOK = false
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := pool.QueryRow(sctx, `SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`,
				logrepl.SlotName(schema+"_tide")).Scan(&slotOK)
			cancel()
			res.roles += fmt.Sprintf(",slot_active:%v", err == nil && slotOK)
			slotOK = err == nil && slotOK
		}
		if seq == 1 && lead == 1 && slotOK {
			res.roles = "ok(" + res.roles + ")"
			break
		}
		select { // the nodes are polled; rdeadline bounds the wait
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	nodes.mu.Lock()
	for _, s := range nodes.starts {
		res.nodeStarts += s
	}
	nodes.mu.Unlock()
	for _, fc := range fcs {
		eventMu.Lock()
		for k, v := range fc.events {
			res.clientEvent[k] += v
		}
		eventMu.Unlock()
	}
	res.elapsed = time.Since(start)
	return res, nil
}

// dropSlot drops the replication slot and the publication of a tide
// schema's logical capture, ending first the WAL sender that still streams
// from the slot (one lingers a moment after its node is gone).
func dropSlot(ctx context.Context, pool *pgxpool.Pool, tideSchema string) error {
	slot := logrepl.SlotName(tideSchema)
	for attempt := 0; ; attempt++ {
		_, err := pool.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(active_pid, 1000)
FROM pg_catalog.pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		if err == nil {
			err = logrepl.DropSlot(ctx, pool, slot)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, logrepl.ErrSlotInUse) || attempt == 50 {
			return err
		}
		select { // a bounded retry: the WAL sender is ending
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return logrepl.DropPublication(ctx, pool, logrepl.PublicationName(tideSchema))
}
