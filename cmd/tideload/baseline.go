package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// serveBaseline runs the ceiling the fan-out is compared with: a bare
// gorilla/websocket server that broadcasts prepared messages to every
// connection, with no scopes, no authorization, no feed and no database.
//
// Each connection is served by one goroutine that, once POST /start has
// handed over the payloads, writes them in a tight loop with
// WritePreparedMessage (the frame is built once per payload for all
// connections; each write is one syscall of the cached frame), cycling
// through the payloads, until POST /stop or its message budget is spent.
// No goroutine waits for another: every socket goes as fast as its reader
// takes it, which is the most a broadcast can do on this machine.
func serveBaseline(args []string) error {
	fs := flag.NewFlagSet("serve-baseline", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	_ = fs.Parse(args)
	if err := loopbackOnly(*addr); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	b := &broadcaster{start: make(chan struct{})}
	up := websocket.Upgrader{ReadBufferSize: 256, WriteBufferSize: 4096, WriteBufferPool: &sync.Pool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		b.serve(ctx, ws)
	})
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) {
		var req baselineStart
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Payloads) == 0 || req.MaxMessages <= 0 {
			http.Error(w, fmt.Sprintf("bad start request: %v", err), http.StatusBadRequest)
			return
		}
		if err := b.begin(req); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) { b.stopped.Store(true) })
	mux.HandleFunc("GET /debug/stats", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(baselineStats{Connections: b.conns.Load(), Written: b.written.Load()})
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())
	<-ctx.Done()
	b.stopped.Store(true)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

type baselineStart struct {
	Payloads    []string `json:"payloads"`     // text messages, sent in turn
	MaxMessages int      `json:"max_messages"` // per connection
}

type baselineStats struct {
	Connections int64 `json:"connections"`
	Written     int64 `json:"written"` // messages written, all connections
}

type broadcaster struct {
	once    sync.Once
	start   chan struct{} // closed by begin
	msgs    []*websocket.PreparedMessage
	max     int
	stopped atomic.Bool
	conns   atomic.Int64
	written atomic.Int64
}

func (b *broadcaster) begin(req baselineStart) error {
	err := fmt.Errorf("already started")
	b.once.Do(func() {
		err = nil
		for _, p := range req.Payloads {
			pm, perr := websocket.NewPreparedMessage(websocket.TextMessage, []byte(p))
			if perr != nil {
				err = perr
				return
			}
			b.msgs = append(b.msgs, pm)
		}
		b.max = req.MaxMessages
		close(b.start)
	})
	return err
}

// serve is the connection's one goroutine (the HTTP handler's).
func (b *broadcaster) serve(ctx context.Context, ws *websocket.Conn) {
	defer ws.Close()
	b.conns.Add(1)
	defer b.conns.Add(-1)
	// The client sends nothing; a reader would only notice it leaving,
	// which the failing write does too.
	select {
	case <-b.start:
	case <-ctx.Done():
		return
	}
	n := 0
	for i := 0; i < b.max && !b.stopped.Load(); i++ {
		if err := ws.WritePreparedMessage(b.msgs[i%len(b.msgs)]); err != nil {
			break
		}
		n++
	}
	b.written.Add(int64(n))
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
}
