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
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/middleware"
)

// item is the resource every mode syncs. Keys are decimal numbers, so the
// load client can read them from a frame without decoding it.
type item struct {
	ID     string `tide:"id,pk" json:"id"`
	Scope  string `tide:"scope,scope" json:"scope"`
	Tenant string `tide:"tenant" json:"tenant"`   // the row filter compares it with the principal's tenant claim
	Body   string `tide:"body" json:"body"`       // payload
	SentNS int64  `tide:"sent_ns" json:"sent_ns"` // latency: the writer's clock when the write was sent
}

// Request headers the server child reads its principal from (the load
// client's stand-in for an app's session cookie).
const (
	hdrUser   = "X-Load-User"
	hdrScopes = "X-Load-Scopes" // comma-separated scopes the principal may subscribe to
	hdrTenant = "X-Load-Tenant"
	tenant    = "acme" // every row's tenant, and every principal's: rows pass the filter
)

// itemsDDL creates the items table of the Postgres modes; %s is the
// schema.
const itemsDDL = `CREATE TABLE %s.items (id text PRIMARY KEY, scope text NOT NULL, tenant text NOT NULL, body text NOT NULL, sent_ns bigint NOT NULL DEFAULT 0)`

// serve runs the tide server under test. It prints "listening <addr>" once
// ready and exits on SIGTERM/SIGINT or when stdin closes (its parent died).
//
// With -auth (what the fan-out target is about) the principal comes from
// request headers through middleware.WithPrincipal, the policy is
// authz.RequireClaim("scope", "scopes") and the resource has a row filter
// (the row's tenant must equal the principal's tenant claim), so scope
// matching and per-row authorization both run for every change and every
// subscriber. Without it, anonymous principals and authz.Allow, as the idle
// figure was first measured.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	feedKind := fs.String("feed", "mem", "change feed: mem or pg")
	dsn := fs.String("dsn", "", "Postgres URL (-feed pg)")
	schema := fs.String("schema", "", "Postgres schema holding the items table; tide's own schema is <schema>_tide (-feed pg)")
	pgConns := fs.Int("pgconns", 0, "Postgres pool size (0: pgxpool's default)")
	auth := fs.Bool("auth", false, "principals from headers, RequireClaim policy and a row filter")
	pageSize := fs.Int("page", 0, "core.Config.PageSize (0: default)")
	sendBuf := fs.Int("sendbuf", 0, "core.Config.SendBuffer (0: default)")
	captureMode := fs.String("capture", "trigger", "Postgres capture: trigger or logical (needs wal_level = logical) (-feed pg)")
	_ = fs.Parse(args)
	if err := loopbackOnly(*addr); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { // the parent holds our stdin; EOF means it is gone or wants us to stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := core.Config{IdleTimeout: time.Hour, PageSize: *pageSize, SendBuffer: *sendBuf, Logger: logger}
	table := "items"
	var pool *pgxpool.Pool
	var pf *pgfeed.Feed
	switch *feedKind {
	case "mem":
	case "pg":
		if *schema == "" || *dsn == "" {
			return errors.New("-feed pg needs -dsn and -schema")
		}
		pcfg, err := pgxpool.ParseConfig(*dsn)
		if err != nil {
			return err
		}
		if *pgConns > 0 {
			pcfg.MaxConns = int32(*pgConns)
		}
		pcfg.ConnConfig.RuntimeParams["application_name"] = "tideload-server"
		if pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
			return err
		}
		defer pool.Close()
		popts := pgfeed.Options{Schema: *schema + "_tide", Logger: logger}
		switch *captureMode {
		case "trigger":
		case "logical":
			popts.Capture = pgfeed.CaptureLogical
		default:
			return fmt.Errorf("-capture %q: want trigger or logical", *captureMode)
		}
		if pf, err = pgfeed.New(pool, popts); err != nil {
			return err
		}
		defer pf.Close()
		cfg.Feed = pf
		table = *schema + ".items"
	default:
		return fmt.Errorf("-feed %q: want mem or pg", *feedKind)
	}

	engine, err := core.New(cfg)
	if err != nil {
		return err
	}
	res := core.Resource[item]{Name: "items", Table: table, Authorize: authz.Allow}
	var opts []middleware.Option
	if *auth {
		res.Authorize = authz.RequireClaim("scope", "scopes")
		res.Filter = func(p authz.Principal, row *item) bool {
			t, _ := p.Claims["tenant"].(string)
			return row.Tenant == t
		}
		opts = append(opts, middleware.WithPrincipal(headerPrincipal))
	}
	items, err := core.Register(engine, res)
	if err != nil {
		return err
	}
	if pf != nil {
		mctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := pf.Migrate(mctx, engine.Schemas()...)
		cancel()
		if err != nil {
			return err
		}
		// As a node set up with tide.Open: commits are sequenced from
		// now on, whether or not a client is connected.
		pf.StartSequencer()
	}

	mux := http.NewServeMux()
	if err := registerLoadChannel(engine, mux); err != nil {
		return err
	}
	mux.HandleFunc("GET /debug/stats", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("scavenge") != "" {
			// What an idle server settles to once the background scavenger
			// has returned freed pages; GC twice so stacks shrink.
			runtime.GC()
			debug.FreeOSMemory()
		}
		if q.Get("nogc") == "" {
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		st := serverStats{
			RSS: readRSS(), HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse,
			Sys: ms.Sys, NumGC: ms.NumGC, Goroutines: runtime.NumGoroutine(), Engine: engine.Stats(),
			Epoch: engine.Feed().Epoch(),
		}
		hctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		head, err := engine.Feed().Head(hctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		st.Head = uint64(head)
		if pf != nil {
			ps := pf.Stats()
			st.PG = &ps
			st.PGPool = pool.Stat().TotalConns()
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	// Postgres flushes a backend's table and index statistics when it
	// exits: closing the pool's connections makes pg_stat_user_indexes
	// current (they reconnect on demand).
	mux.HandleFunc("POST /debug/pg-release", func(w http.ResponseWriter, r *http.Request) {
		if pool != nil {
			pool.Reset()
		}
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	// POST /write takes a JSON array of items (or one item) and writes
	// them in one feed transaction with Table.Upsert.
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var rows []item
		if trimmed := strings.TrimSpace(string(body)); strings.HasPrefix(trimmed, "{") {
			var it item
			err = json.Unmarshal(body, &it)
			rows = []item{it}
		} else {
			err = json.Unmarshal(body, &rows)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := items.Upsert(r.Context(), rows...); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: middleware.Middleware(engine, opts...)(mux)}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())

	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = engine.Shutdown(sctx)
	return srv.Shutdown(sctx)
}

// headerPrincipal is the server child's stand-in for an app's session: the
// principal named by the load client's headers.
func headerPrincipal(r *http.Request) (authz.Principal, error) {
	id := r.Header.Get(hdrUser)
	if id == "" {
		return authz.Anonymous, nil
	}
	var scopes []string
	if s := r.Header.Get(hdrScopes); s != "" {
		scopes = strings.Split(s, ",")
	}
	return authz.Principal{ID: id, Claims: map[string]any{"scopes": scopes, "tenant": r.Header.Get(hdrTenant)}}, nil
}

type serverStats struct {
	RSS        uint64        `json:"rss"`
	HeapAlloc  uint64        `json:"heap_alloc"`
	HeapInuse  uint64        `json:"heap_inuse"`
	StackInuse uint64        `json:"stack_inuse"`
	Sys        uint64        `json:"sys"`
	NumGC      uint32        `json:"num_gc"`
	Goroutines int           `json:"goroutines"`
	Engine     core.Stats    `json:"engine"`
	Epoch      string        `json:"epoch"`
	Head       uint64        `json:"head"`
	PG         *pgfeed.Stats `json:"pg,omitempty"`
	PGPool     int32         `json:"pg_pool,omitempty"`
}

// readRSS returns this process's resident set size in bytes.
func readRSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, rss uint64
	if _, err := fmt.Sscan(string(b), &size, &rss); err != nil {
		return 0
	}
	return rss * uint64(os.Getpagesize())
}

// loopbackOnly refuses listen or dial addresses outside 127.0.0.0/8.
func loopbackOnly(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() == nil || ip.To4()[0] != 127 {
		return fmt.Errorf("%s: tideload only uses loopback addresses (127.0.0.0/8)", hostport)
	}
	return nil
}
