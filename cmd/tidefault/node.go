package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/natsbus"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
	"github.com/tidesync/tide/middleware"
)

// item is the synced resource. Tenant is its scope column; Vis is who may
// see the row: "all" (everyone allowed the tenant) or one user id, which
// the resource's row filter enforces.
type item struct {
	ID     string `tide:"id,pk" json:"id"`
	Tenant string `tide:"tenant,scope" json:"tenant"`
	Vis    string `tide:"vis" json:"vis"`
	N      int64  `tide:"n" json:"n"`
	Writer string `tide:"writer" json:"writer"`
}

// visAll is the Vis of a row everyone allowed its tenant may see.
const visAll = "all"

// putArgs are the arguments of the "put" mutator. Key repeats the
// mutation's idempotency key so the mutator can log every time it runs.
type putArgs struct {
	Key    string `json:"key"`
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Vis    string `json:"vis"`
}

// Request headers a node reads its principal from (the fault run's
// stand-in for an app's session cookie).
const (
	hdrUser    = "X-Fault-User"
	hdrTenants = "X-Fault-Tenants" // comma-separated tenants the user may see
)

// nodeStatus is what GET /status of a node answers.
type nodeStatus struct {
	Name       string `json:"name"`
	Sequencing bool   `json:"sequencing"` // this node's feed holds the sequencer role
	Replicator string `json:"replicator"` // this node's replicator role: leader, standby, starting, stopped
	Terms      int64  `json:"terms"`      // times this node's replicator became leader
}

// node runs one app node until SIGTERM or its stdin closes: a Postgres
// feed (trigger or logical capture), the Postgres or the NATS bus, an engine with the items resource
// and its mutator, a replicator, and an HTTP server on a loopback address.
// It prints "listening <addr>" once it serves.
func node(args []string) error {
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	name := fs.String("name", "n0", "node name (logged with every mutation it applies)")
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	dsn := fs.String("dsn", "", "Postgres URL of the fault run's database")
	schema := fs.String("schema", "", "schema of the app's tables; tide's own is <schema>_tide")
	capture := fs.String("capture", "trigger", "the feed's capture: trigger, or logical (the sequencer's node consumes the replication slot; needs wal_level = logical)")
	bus := fs.String("bus", "pg", "bus between nodes: pg (every node tails the change log) or nats")
	natsURL := fs.String("nats", "", "NATS URL (-bus nats)")
	prefix := fs.String("prefix", "tidefault", "NATS subject prefix (-bus nats)")
	idle := fs.Duration("idle", 3*time.Second, "core.Config.IdleTimeout")
	_ = fs.Parse(args)
	if err := loopbackOnly(*addr); err != nil {
		return err
	}
	if *dsn == "" || *schema == "" {
		return errors.New("node needs -dsn and -schema")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { // the parent holds our stdin; EOF means it is gone or wants us to stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", *name)

	pcfg, err := pgxpool.ParseConfig(*dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "tidefault-" + *name
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	popts := pgfeed.Options{Schema: *schema + "_tide", Logger: log}
	switch *capture {
	case "trigger":
	case "logical":
		popts.Capture = pgfeed.CaptureLogical
	default:
		return fmt.Errorf("-capture %q: want trigger or logical", *capture)
	}
	pf, err := pgfeed.New(pool, popts)
	if err != nil {
		return err
	}
	defer pf.Close()
	cfg := core.Config{Feed: pf, Logger: log, IdleTimeout: *idle}
	var pub replicator.Publisher
	switch *bus {
	case "pg":
	case "nats":
		if err := loopbackURL(*natsURL); err != nil {
			return err
		}
		nc, err := nats.Connect(*natsURL, nats.Name("tidefault "+*name), nats.MaxReconnects(-1),
			nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(false))
		if err != nil {
			return err
		}
		defer nc.Close()
		b, err := natsbus.New(ctx, nc, pf, natsbus.Options{Prefix: *prefix, Logger: log})
		if err != nil {
			return err
		}
		cfg.Bus, pub = b, b
	default:
		return fmt.Errorf("-bus %q: want pg or nats", *bus)
	}
	engine, err := core.New(cfg)
	if err != nil {
		return err
	}
	items, err := core.Register(engine, core.Resource[item]{
		Name: "items", Table: *schema + ".items",
		Authorize: authz.RequireClaim("tenant", "tenants"),
		Filter: func(p authz.Principal, row *item) bool {
			return row.Vis == visAll || row.Vis == p.ID
		},
	})
	if err != nil {
		return err
	}
	if err := addPut(items, *schema, *name); err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = pf.Migrate(mctx, engine.Schemas()...)
	cancel()
	if err != nil {
		return err
	}
	rep, err := replicator.New(replicator.Config{Feed: pf, Pool: pool, Publisher: pub, Logger: log,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, CheckInterval: 250 * time.Millisecond})
	if err != nil {
		return err
	}
	rep.Start()
	defer rep.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(nodeStatus{Name: *name, Sequencing: pf.Stats().Sequencing,
			Replicator: rep.Status().Role.String(), Terms: rep.Status().Terms})
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: middleware.Middleware(engine, middleware.WithPrincipal(headerPrincipal))(mux),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())

	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = engine.Shutdown(sctx)
	return srv.Shutdown(sctx)
}

// addPut declares the "put" mutator: it logs its run in the applied table,
// bumps the tenant's counter row with SQL and upserts the row args.ID with
// the typed table, all in the mutation's transaction. A key applied twice
// shows as two applied rows, a row with n > 1 and a counter ahead of the
// distinct keys.
func addPut(items *core.Table[item], schema, nodeName string) error {
	applied, table := schema+".applied", schema+".items"
	return core.AddMutator(items, "put", core.Mutator[putArgs]{
		Authorize: func(_ context.Context, p authz.Principal, a putArgs) error {
			if p.IsAnonymous() {
				return authz.ErrUnauthenticated
			}
			if !slices.Contains(p.Strings("tenants"), a.Tenant) {
				return authz.ErrForbidden
			}
			return nil
		},
		Run: func(ctx context.Context, tx *core.Tx, a putArgs) error {
			if a.Key == "" || a.ID == "" || (a.Vis != visAll && a.Vis != tx.Principal().ID) {
				return fmt.Errorf("%w: key, id and a vis of all or the caller are required", core.ErrInvalidArgs)
			}
			pg := pgfeed.TxOf(tx.Feed())
			if _, err := pg.Exec(ctx, `INSERT INTO `+applied+` (key, client, node, tenant) VALUES ($1, $2, $3, $4)`,
				a.Key, tx.Principal().ID, nodeName, a.Tenant); err != nil {
				return err
			}
			if _, err := pg.Exec(ctx, `UPDATE `+table+` SET n = n + 1 WHERE id = $1`, counterID(a.Tenant)); err != nil {
				return err
			}
			var n int64
			err := pg.QueryRow(ctx, `SELECT n FROM `+table+` WHERE id = $1`, a.ID).Scan(&n)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			return items.UpsertTx(ctx, tx, item{ID: a.ID, Tenant: a.Tenant, Vis: a.Vis, N: n + 1, Writer: "mut"})
		},
	})
}

// counterID is the key of a tenant's counter row, which every applied
// mutation of the tenant bumps.
func counterID(tenant string) string { return "c-" + tenant }

// headerPrincipal is a node's stand-in for an app's session: the
// principal named by the fault run's headers.
func headerPrincipal(r *http.Request) (authz.Principal, error) {
	id := r.Header.Get(hdrUser)
	if id == "" {
		return authz.Anonymous, nil
	}
	var tenants []string
	if s := r.Header.Get(hdrTenants); s != "" {
		tenants = strings.Split(s, ",")
	}
	return authz.Principal{ID: id, Claims: map[string]any{"tenants": tenants}}, nil
}

// loopbackURL refuses a service URL whose host is not a loopback address.
func loopbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = "0"
	}
	return loopbackOnly(net.JoinHostPort(u.Hostname(), port))
}

// loopbackOnly refuses listen or dial addresses outside 127.0.0.0/8.
func loopbackOnly(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() == nil || ip.To4()[0] != 127 {
		return fmt.Errorf("%s: tidefault only uses loopback addresses (127.0.0.0/8)", hostport)
	}
	return nil
}
