package taskapp

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

//go:embed index.html
var indexHTML string

// Page is the app's single page, titled for the framework ("tide + Gin:
// project tasks"): the login form, then the live task list of a project,
// kept by tide's browser client (served by the middleware at
// /tide/client.js) over a WebSocket that the session cookie authenticates,
// with optimistic writes through the tasks mutators.
func Page(framework string) []byte {
	page := strings.ReplaceAll(indexHTML, "{{framework}}", html.EscapeString(framework))
	return []byte(strings.ReplaceAll(page, "{{CLIENT_JS}}", middleware.ClientJSPath("/tide")))
}

// Routes builds an example's handler on the framework: the session
// middleware, the tide line, the page, the login and logout, and the API,
// over st and sess. It is what each example's main.go holds.
type Routes func(st *Store, sess *Sessions) http.Handler

// Main is an example's main: it runs the app on the -addr flag (defaultAddr
// if not given) and on Postgres if DATABASE_URL is set, prints the app's
// URL, and stops on SIGINT or SIGTERM. It exits with status 1 if Run fails.
func Main(framework, defaultAddr string, routes Routes) {
	addr := flag.String("addr", defaultAddr, "listen address (a free port is picked if it is taken)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := Run(ctx, *addr, os.Getenv("DATABASE_URL"), log, routes, func(url string) {
		fmt.Printf("tide + %s example: %s (log in as alice or bob, password %q)\n", framework, url, Password)
	})
	if err != nil {
		log.Error("tide + "+framework+" example failed", "err", err)
		os.Exit(1)
	}
}

// Run opens the store (databaseURL "" means the in-memory feed), builds
// the handler with routes, and serves it on addr until ctx ends; ready gets
// the app's URL once it listens.
func Run(ctx context.Context, addr, databaseURL string, log *slog.Logger, routes Routes, ready func(url string)) error {
	st, err := openStore(ctx, databaseURL, log)
	if err != nil {
		return err
	}
	defer st.close()
	return serve(ctx, addr, routes(st, NewSessions()), st.Engine, log, ready)
}

// serve listens on addr (or, if it is taken, on a free port), gives ready
// the URL, and serves h until ctx ends; then it drains engine's sockets
// (close 4002: clients reconnect elsewhere) and shuts the server down.
func serve(ctx context.Context, addr string, h http.Handler, engine *core.Engine, log *slog.Logger, ready func(url string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("address taken; using a free port", "addr", addr, "err", err)
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	ready("http://" + ln.Addr().String() + "/")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = engine.Shutdown(shutdownCtx)
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
