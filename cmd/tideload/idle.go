package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// idle measures the server memory one idle, subscribed connection costs: RSS
// and heap before and after opening n connections that each subscribe to a
// scope and then stay silent.
func idle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	var cm common
	cm.register(fs, 5*time.Minute)
	n := fs.Int("n", 10000, "connections (at most 19000 in one load process, 19900 with -procs > 1: the open-file limit of a process, the server's included)")
	scopes := fs.Int("scopes", 100, "distinct scopes the connections spread over")
	auth := fs.Bool("auth", false, "principals with claims, RequireClaim and a row filter (off: anonymous and authz.Allow, as first measured)")
	hold := fs.Bool("hold", false, "keep the connections open until the timeout, for profiling the server")
	conc := fs.Int("conc", 64, "connections opened at a time")
	quiet := fs.Duration("quiet", 3*time.Second, "how long the connections stay silent before the measurement (the server retires a connection's writer goroutine within a second of its last write)")
	cfBin := fs.String("centrifugo", "", "Centrifugo binary: measure the same connections against it in the same run")
	procs := fs.Int("procs", 1, "load processes the connections are split over (this one and procs-1 `idle-client` children, each with source addresses of its own)")
	_ = fs.Parse(args)
	limit := 19000
	if *procs > 1 {
		limit = 19900
	}
	if *n < 1 || *n > limit || *scopes < 1 || *procs < 1 || *procs > 16 {
		return errors.New("idle: need 1 ≤ -n ≤ 19000 (19900 with -procs > 1), -scopes ≥ 1, 1 ≤ -procs ≤ 16")
	}
	ctx, cancel := cm.context()
	defer cancel()

	var sargs []string
	if *auth {
		sargs = append(sargs, "-auth")
	}
	srv, err := startChild(ctx, "serve", sargs...)
	if err != nil {
		return err
	}
	defer srv.stop()
	before, err := srv.stats(ctx, true)
	if err != nil {
		return err
	}
	subs, first, err := startShares(ctx, srv.addr, nil, *n, *procs, *scopes, 10, *auth)
	if err != nil {
		return err
	}
	defer subs.stop()
	conns, err := openFleet(ctx, first, *conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialLoad(ctx, srv.addr, i, dialOpts{path: "/tide/ws", tide: true, auth: *auth, scope: scopeName(i % *scopes), readBuf: 512})
	})
	if err != nil {
		return err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 20*time.Millisecond, "caught-up", func() bool { return conns.caughtUp() == first }); err != nil {
		return err
	}
	select { // idle means silent for a while: let the last writers retire
	case <-time.After(*quiet):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := srv.stats(ctx, false)
	if err != nil {
		return err
	}
	if *hold {
		fmt.Printf("holding the connections; server at http://%s (Ctrl-C to end)\n", srv.addr)
		<-ctx.Done()
		ctx, cancel = cm.context() // a fresh bound for the last reading
		defer cancel()
	}
	settled, err := srv.stats(ctx, true)
	if err != nil {
		return err
	}
	per := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / float64(*n) / 1024 }
	res := idleResult{Env: newEnv(fs), N: *n, Scopes: *scopes, Auth: *auth, Procs: *procs,
		Connections: after.Engine.Connections, Subscriptions: after.Engine.Subscriptions,
		RSSKiB: per(before.RSS, after.RSS), RSSSettledKiB: per(before.RSS, settled.RSS),
		HeapKiB: per(before.HeapAlloc, after.HeapAlloc), StackKiB: per(before.StackInuse, after.StackInuse),
		StackSettledKiB: per(before.StackInuse, settled.StackInuse),
		GoroutinesPer:   float64(after.Goroutines-before.Goroutines) / float64(*n),
		RSSBefore:       before.RSS, RSSAfter: after.RSS, RSSSettled: settled.RSS}
	var b strings.Builder
	fmt.Fprintf(&b, "tideload idle (%s; %s)\n", res.Env, res.Env.Flags)
	fmt.Fprintf(&b, "connections: %d subscribed idle (over %d scopes), server engine: %d connections, %d subscriptions\n",
		*n, *scopes, after.Engine.Connections, after.Engine.Subscriptions)
	fmt.Fprintf(&b, "server RSS:        %7.1f MiB -> %7.1f MiB   %5.2f KiB per connection\n", mib(before.RSS), mib(after.RSS), res.RSSKiB)
	fmt.Fprintf(&b, "server RSS settled:%7.1f MiB -> %7.1f MiB   %5.2f KiB per connection (after GC and returning freed pages)\n", mib(before.RSS), mib(settled.RSS), res.RSSSettledKiB)
	fmt.Fprintf(&b, "server heap alloc: %7.1f MiB -> %7.1f MiB   %5.2f KiB per connection\n", mib(before.HeapAlloc), mib(after.HeapAlloc), res.HeapKiB)
	fmt.Fprintf(&b, "server stacks:     %7.1f MiB -> %7.1f MiB   %5.2f KiB per connection (%.2f settled)\n", mib(before.StackInuse), mib(after.StackInuse), res.StackKiB, res.StackSettledKiB)
	fmt.Fprintf(&b, "server goroutines: %d -> %d   %.2f per connection\n", before.Goroutines, after.Goroutines, res.GoroutinesPer)
	conns.close()
	subs.stop()
	srv.stop()
	if *cfBin == "" {
		fmt.Fprintf(&b, "%s\n", centrifugoNote)
		return emit(cm.json, res, b.String())
	}
	cf, err := idleCentrifugo(ctx, *cfBin, *n, *scopes, *conc, *procs, *quiet)
	if err != nil {
		return fmt.Errorf("centrifugo: %w", err)
	}
	res.Centrifugo = &cf
	fmt.Fprintf(&b, "centrifugo, same connections (JWT connect + 1 subscription each, %d channels):\n", *scopes)
	fmt.Fprintf(&b, "server RSS:        %7.1f MiB -> %7.1f MiB   %5.2f KiB per connection (%.2f after %s more)\n", mib(cf.Before), mib(cf.After), cf.RSSKiB, cf.RSSLaterKiB, *quiet)
	fmt.Fprintf(&b, "tide/centrifugo, RSS per connection: %.2f (settled tide vs later centrifugo: %.2f)\n", ratio(res.RSSKiB, cf.RSSKiB), ratio(res.RSSSettledKiB, cf.RSSLaterKiB))
	return emit(cm.json, res, b.String())
}

// idleCFResult is the peer's idle figure: RSS only (its heap is not
// exposed to us).
type idleCFResult struct {
	Before      uint64  `json:"rss_before"`
	After       uint64  `json:"rss_after"`
	Later       uint64  `json:"rss_later"`
	RSSKiB      float64 `json:"rss_kib_per_conn"`
	RSSLaterKiB float64 `json:"rss_later_kib_per_conn"`
}

func idleCentrifugo(ctx context.Context, bin string, n, scopes, conc, procs int, quiet time.Duration) (idleCFResult, error) {
	var r idleCFResult
	p, err := startCentrifugo(ctx, bin, cfOptions{})
	if err != nil {
		return r, err
	}
	defer p.stop()
	time.Sleep(500 * time.Millisecond)
	r.Before = p.rss()
	subs, first, err := startShares(ctx, "", p, n, procs, scopes, 30, false)
	if err != nil {
		return r, err
	}
	defer subs.stop()
	conns, err := openFleet(ctx, first, conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialCentrifugo(ctx, p, i, dialOpts{scope: scopeName(i % scopes), readBuf: 512, round: 1})
	})
	if err != nil {
		return r, err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 20*time.Millisecond, "subscribed", func() bool { return conns.caughtUp() == first }); err != nil {
		return r, err
	}
	for i, dst := range []*uint64{&r.After, &r.Later} {
		select {
		case <-time.After(quiet * time.Duration(i+1)):
		case <-ctx.Done():
			return r, ctx.Err()
		}
		*dst = p.rss()
	}
	per := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / float64(n) / 1024 }
	r.RSSKiB, r.RSSLaterKiB = per(r.Before, r.After), per(r.Before, r.Later)
	return r, nil
}

type idleResult struct {
	Env             env     `json:"env"`
	N               int     `json:"n"`
	Scopes          int     `json:"scopes"`
	Auth            bool    `json:"auth"`
	Connections     int64   `json:"server_connections"`
	Subscriptions   int64   `json:"server_subscriptions"`
	RSSKiB          float64 `json:"rss_kib_per_conn"`
	RSSSettledKiB   float64 `json:"rss_settled_kib_per_conn"`
	HeapKiB         float64 `json:"heap_kib_per_conn"`
	StackKiB        float64 `json:"stack_kib_per_conn"`
	StackSettledKiB float64 `json:"stack_settled_kib_per_conn"`
	GoroutinesPer   float64 `json:"goroutines_per_conn"`
	Procs           int     `json:"load_processes"`
	RSSBefore       uint64  `json:"rss_before"`
	RSSAfter        uint64  `json:"rss_after"`
	RSSSettled      uint64  `json:"rss_settled"`

	Centrifugo *idleCFResult `json:"centrifugo,omitempty"`
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
