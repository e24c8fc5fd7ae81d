package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

// item is the resource every mode syncs.
type item struct {
	ID    string `tide:"id,pk"`
	Scope string `tide:"scope,scope"`
	Body  string `tide:"body"`
	SentN int64  `tide:"sent_ns"` // writer's clock at commit, for latency
}

// serve runs the server under test. It prints "listening <addr>" once ready
// and exits on SIGTERM or when stdin closes (its parent died).
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	_ = fs.Parse(args)

	engine, err := core.New(core.Config{IdleTimeout: time.Hour})
	if err != nil {
		return err
	}
	items, err := core.Register(engine, core.Resource[item]{Table: "items", Authorize: authz.Allow})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/stats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("scavenge") != "" {
			// What an idle server settles to once the background scavenger
			// has returned freed pages; GC twice so stacks shrink.
			runtime.GC()
			debug.FreeOSMemory()
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		_ = json.NewEncoder(w).Encode(serverStats{
			RSS: readRSS(), HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse,
			Sys: ms.Sys, Goroutines: runtime.NumGoroutine(), Engine: engine.Stats(),
		})
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		var it item
		if err := json.NewDecoder(r.Body).Decode(&it); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := items.Upsert(r.Context(), it); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: middleware.Middleware(engine)(mux)}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { // the parent holds our stdin; EOF means it is gone
		_, _ = os.Stdin.Read(make([]byte, 1))
		stop()
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = engine.Shutdown(sctx)
	return srv.Shutdown(sctx)
}

type serverStats struct {
	RSS        uint64     `json:"rss"`
	HeapAlloc  uint64     `json:"heap_alloc"`
	HeapInuse  uint64     `json:"heap_inuse"`
	StackInuse uint64     `json:"stack_inuse"`
	Sys        uint64     `json:"sys"`
	Goroutines int        `json:"goroutines"`
	Engine     core.Stats `json:"engine"`
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
