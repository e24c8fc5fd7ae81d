package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidesync/tide/core/protocol"
)

// fanout measures deliveries per second: N subscribers on K scopes receive
// a stream of changes written in batches (one feed transaction each) as
// fast as the server fans them out. tide runs with scope matching and
// per-row authorization on (RequireClaim policy, a row filter every row
// passes, principals from the connection), on the in-memory feed. In the
// same run, the same N clients read the same frames from a bare
// gorilla/websocket broadcast (serve-baseline), the ceiling.
//
// Deliveries are entries counted by the clients. Each figure is taken
// over a steady window after a warm-up: entries received in the window
// divided by its length, and the CPU seconds the server process, this
// process (clients and writer) and the rest of the machine spent in it.
func fanout(args []string) error {
	fs := flag.NewFlagSet("fanout", flag.ExitOnError)
	var cm common
	cm.register(fs, 5*time.Minute)
	n := fs.Int("n", 1000, "subscribers (at most 20000)")
	scopes := fs.Int("scopes", 1, "scopes the subscribers spread over (rows too)")
	batch := fs.Int("batch", 100, "rows per write (one feed transaction)")
	bodyLen := fs.Int("body", 64, "bytes of each row's body column")
	duration := fs.Duration("duration", 10*time.Second, "measurement window")
	warmup := fs.Duration("warmup", 2*time.Second, "load before the window starts")
	window := fs.Int("inflight", 16, "batches the writer may be ahead of what the clients received (in all); keep inflight × batch × ~175 B under the server's 1 MiB send buffer")
	maxBatches := fs.Int("max-batches", 1_000_000, "upper bound on batches written")
	auth := fs.Bool("auth", true, "tide with principals, RequireClaim and a row filter (the target's configuration)")
	baseline := fs.Bool("baseline", true, "also measure the bare gorilla/websocket broadcast")
	payloads := fs.Int("payloads", 64, "distinct frames the baseline cycles through")
	baseEntries := fs.Int("baseline-entries", 0, "entries per baseline frame (0: the mean entries per frame tide sent in this run, so both send the same frames)")
	conc := fs.Int("conc", 64, "connections opened at a time")
	prof := fs.String("pprof", "", "write a CPU profile of the tide server over the (first) window to this file")
	rounds := fs.Int("rounds", 1, "tide + baseline pairs measured one after the other; the round with the median ratio is reported as the result")
	cfBin := fs.String("centrifugo", "", "Centrifugo binary: measure it as a peer in every round (after tide and the baseline), publishing the same rows in batch calls")
	_ = fs.Parse(args)
	if *n < 1 || *n > 20000 || *scopes < 1 || *scopes > *n || *batch < 1 || *batch > 10000 || *duration <= 0 || *window < 1 || *rounds < 1 || *rounds > 10 {
		return errors.New("fanout: need 1 ≤ -n ≤ 20000, 1 ≤ -scopes ≤ n, 1 ≤ -batch ≤ 10000, -duration > 0, -inflight ≥ 1, 1 ≤ -rounds ≤ 10")
	}
	ctx, cancel := cm.context()
	defer cancel()

	res := fanoutResult{Env: newEnv(fs), N: *n, Scopes: *scopes, Batch: *batch, Body: *bodyLen,
		Duration: duration.Seconds(), Auth: *auth}
	body := strings.Repeat("lorem ipsum dolor sit amet ", *bodyLen/27+1)[:*bodyLen]
	subsPer := make([]int64, *scopes)
	for i := range *n {
		subsPer[i%*scopes]++
	}

	stopLoadProf, err := cm.profileLoad()
	if err != nil {
		return err
	}
	defer stopLoadProf()
	for round := range *rounds {
		prof := *prof
		if round > 0 {
			prof = ""
		}
		run := fanoutRun{n: *n, scopes: *scopes, batch: *batch, body: body, warmup: *warmup,
			duration: *duration, window: *window, maxBatches: *maxBatches, auth: *auth, conc: *conc, prof: prof, subsPer: subsPer}
		tide, epoch, err := fanoutTide(ctx, run)
		if err != nil {
			return fmt.Errorf("tide: %w", err)
		}
		rd := fanoutRound{Tide: tide}
		if *baseline {
			perFrame := *baseEntries
			if perFrame <= 0 {
				perFrame = max(1, int(tide.EntriesFrame+0.5))
			}
			frames := baselineFrames(*payloads, perFrame, body, epoch)
			b, err := fanoutBaseline(ctx, *n, *conc, frames, perFrame, *warmup, *duration)
			if err != nil {
				return fmt.Errorf("baseline: %w", err)
			}
			rd.Baseline, rd.Ratio = &b, ratio(tide.Deliveries, b.Deliveries)
		}
		if *cfBin != "" {
			cf, err := fanoutCentrifugo(ctx, *cfBin, run)
			switch {
			case err != nil && ctx.Err() != nil:
				return fmt.Errorf("centrifugo: %w", err)
			case err != nil: // a failed peer round is a result (it drops clients it cannot keep up with)
				res.CentrifugoErrors = append(res.CentrifugoErrors, fmt.Sprintf("round %d: %v", round+1, err))
			default:
				rd.Centrifugo, rd.CFRatio = &cf, ratio(tide.Deliveries, cf.Deliveries)
			}
		}
		res.Rounds = append(res.Rounds, rd)
	}
	stopLoadProf()
	// The round with the median ratio (or median tide figure) stands for
	// the run.
	byKey := slices.Clone(res.Rounds)
	slices.SortFunc(byKey, func(a, b fanoutRound) int {
		ka, kb := a.Ratio, b.Ratio
		if !*baseline {
			ka, kb = a.Tide.Deliveries, b.Tide.Deliveries
		}
		return cmp.Compare(ka, kb)
	})
	mid := byKey[(len(byKey)-1)/2]
	res.Tide, res.Baseline, res.Ratio = mid.Tide, mid.Baseline, mid.Ratio
	res.Centrifugo, res.CFRatio = mid.Centrifugo, mid.CFRatio
	return emit(cm.json, res, res.text())
}

type fanoutRun struct {
	n, scopes, batch   int
	body               string
	warmup, duration   time.Duration
	window, maxBatches int
	auth               bool
	conc               int
	prof               string
	subsPer            []int64
}

type fanoutFigures struct {
	Deliveries     float64 `json:"deliveries_per_s"`
	EntriesFrame   float64 `json:"entries_per_frame"`
	BytesEntry     float64 `json:"bytes_per_entry"`
	Usage          usage   `json:"usage"`
	ServerCPUPerM  float64 `json:"server_cpu_s_per_million"` // server CPU seconds per million deliveries
	LoadCPUPerM    float64 `json:"load_cpu_s_per_million"`
	Written        int64   `json:"rows_written,omitempty"`
	Expected       int64   `json:"deliveries_expected,omitempty"`
	Received       int64   `json:"deliveries_received,omitempty"`
	Dropped        int64   `json:"dropped,omitempty"`
	ReplayQueries  int64   `json:"replay_queries,omitempty"`
	ServerRSS      uint64  `json:"server_rss,omitempty"`
	ServerNumGC    uint32  `json:"server_gc_cycles,omitempty"`
	WriteBatchesPS float64 `json:"write_batches_per_s,omitempty"`
}

type fanoutResult struct {
	Env      env            `json:"env"`
	N        int            `json:"n"`
	Scopes   int            `json:"scopes"`
	Batch    int            `json:"batch"`
	Body     int            `json:"body_bytes"`
	Duration float64        `json:"window_s"`
	Auth     bool           `json:"auth"`
	Tide     fanoutFigures  `json:"tide"`
	Baseline *fanoutFigures `json:"baseline,omitempty"`
	Ratio    float64        `json:"tide_over_baseline,omitempty"`
	// Centrifugo is the peer's figures in the median round.
	Centrifugo *fanoutFigures `json:"centrifugo,omitempty"`
	CFRatio    float64        `json:"tide_over_centrifugo,omitempty"`
	// CentrifugoErrors are the peer's failed rounds.
	CentrifugoErrors []string      `json:"centrifugo_errors,omitempty"`
	Rounds           []fanoutRound `json:"rounds"`
}

type fanoutRound struct {
	Tide       fanoutFigures  `json:"tide"`
	Baseline   *fanoutFigures `json:"baseline,omitempty"`
	Ratio      float64        `json:"tide_over_baseline,omitempty"`
	Centrifugo *fanoutFigures `json:"centrifugo,omitempty"`
	CFRatio    float64        `json:"tide_over_centrifugo,omitempty"`
}

func (r fanoutResult) text() string {
	var b strings.Builder
	auth := "scope matching + RequireClaim policy + row filter"
	if !r.Auth {
		auth = "scope matching only (no policy, no filter)"
	}
	fmt.Fprintf(&b, "tideload fanout: %d subscribers on %d scope(s), writes of %d rows (body %d B), %.0f s window; tide: in-memory feed, %s\n",
		r.N, r.Scopes, r.Batch, r.Body, r.Duration, auth)
	fmt.Fprintf(&b, "  (%s; %s)\n", r.Env, r.Env.Flags)
	fmt.Fprintf(&b, "  %-18s %14s %9s %9s %8s %11s %11s %9s %13s %13s\n", "", "deliveries/s", "entr/frm", "B/entry", "window", "server CPU", "load CPU", "other", "srv s/1M del", "load s/1M del")
	row := func(name string, f fanoutFigures) {
		fmt.Fprintf(&b, "  %-18s %14s %9.1f %9.1f %6.2f s %9.2f s %9.2f s %7.2f s %13.3f %13.3f\n", name, commas(f.Deliveries), f.EntriesFrame, f.BytesEntry,
			f.Usage.Seconds, f.Usage.ServerCPU, f.Usage.LoadCPU, f.Usage.OtherCPU, f.ServerCPUPerM, f.LoadCPUPerM)
	}
	if len(r.Rounds) > 1 {
		for i, rd := range r.Rounds {
			row(fmt.Sprintf("tide #%d", i+1), rd.Tide)
			if rd.Baseline != nil {
				row(fmt.Sprintf("gorilla #%d", i+1), *rd.Baseline)
				fmt.Fprintf(&b, "  %-18s %14.2f\n", fmt.Sprintf("tide/baseline #%d", i+1), rd.Ratio)
			}
			if rd.Centrifugo != nil {
				row(fmt.Sprintf("centrifugo #%d", i+1), *rd.Centrifugo)
				fmt.Fprintf(&b, "  %-18s %14.2f\n", fmt.Sprintf("tide/cf #%d", i+1), rd.CFRatio)
			}
		}
		fmt.Fprintf(&b, "  median round:\n")
	}
	row("tide", r.Tide)
	if r.Baseline != nil {
		row("gorilla broadcast", *r.Baseline)
		fmt.Fprintf(&b, "  tide/baseline: %.2f\n", r.Ratio)
	}
	if r.Centrifugo != nil {
		row("centrifugo", *r.Centrifugo)
		fmt.Fprintf(&b, "  tide/centrifugo: %.2f (Centrifugo v6: HTTP API batch publish, memory engine, no policy or filter)\n", r.CFRatio)
	}
	for _, e := range r.CentrifugoErrors {
		fmt.Fprintf(&b, "  centrifugo failed %s\n", e)
	}
	t := r.Tide
	fmt.Fprintf(&b, "  tide run: %s rows written (%.1f writes/s), %s of %s deliveries received after the drain, %d live entries dropped (resynced), %d replay queries, server RSS %.1f MiB, %d GCs\n",
		commas(float64(t.Written)), t.WriteBatchesPS, commas(float64(t.Received)), commas(float64(t.Expected)), t.Dropped, t.ReplayQueries, mib(t.ServerRSS), t.ServerNumGC)
	return b.String()
}

func fanoutTide(ctx context.Context, o fanoutRun) (fanoutFigures, string, error) {
	var f fanoutFigures
	args := []string{}
	if o.auth {
		args = append(args, "-auth")
	}
	srv, err := startChild(ctx, "serve", args...)
	if err != nil {
		return f, "", err
	}
	defer srv.stop()
	conns, err := openFleet(ctx, o.n, o.conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialLoad(ctx, srv.addr, i, dialOpts{path: "/tide/ws", tide: true, auth: o.auth, scope: scopeName(i % o.scopes), readBuf: 16 << 10})
	})
	if err != nil {
		return f, "", err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 10*time.Millisecond, "caught-up", func() bool { return conns.caughtUp() == o.n }); err != nil {
		return f, "", err
	}
	st0, err := srv.stats(ctx, false)
	if err != nil {
		return f, "", err
	}

	post := func(ctx context.Context, rows []item) error {
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(rows); err != nil {
			return err
		}
		return srv.doJSON(ctx, "POST", "/write", &buf, nil)
	}
	f, err = measureFanout(ctx, o, conns, srv, post)
	st1, serr := srv.stats(ctx, false)
	if serr != nil {
		return f, "", serr
	}
	f.Dropped = st1.Engine.Dropped - st0.Engine.Dropped
	f.ReplayQueries = st1.Engine.ReplayQueries - st0.Engine.ReplayQueries
	f.ServerRSS = st1.RSS
	f.ServerNumGC = st1.NumGC - st0.NumGC
	return f, st0.Epoch, err
}

// measureFanout runs the writer against a subscribed fleet and measures
// the window: batches of rows, round-robin over the scopes, posted as fast
// as the clients take them, at most o.window batches ahead of what they
// received; then every row written must reach every subscriber of its
// scope (the drain). srv is the server process whose CPU is sampled; with
// o.prof set, srv must be a tide child (its CPU profile is taken).
func measureFanout(ctx context.Context, o fanoutRun, conns fleet, srv cpuReader, post func(ctx context.Context, rows []item) error) (fanoutFigures, error) {
	var f fanoutFigures
	var expected atomic.Int64 // deliveries the rows written so far make
	var written atomic.Int64
	var batches atomic.Int64
	stop := make(chan struct{})
	werr := make(chan error, 1)
	go func() {
		werr <- func() error {
			var seq int64
			ahead := make([]int64, o.window) // ring: delivery totals of the last batches
			rows := make([]item, o.batch)
			for b := 0; b < o.maxBatches; b++ {
				select {
				case <-stop:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				default:
				}
				var exp int64
				now := clock()
				for j := range rows {
					s := int(seq % int64(o.scopes))
					rows[j] = item{ID: strconv.FormatInt(seq, 10), Scope: scopeName(s), Tenant: tenant, Body: o.body, SentNS: now}
					exp += o.subsPer[s]
					seq++
				}
				if err := post(ctx, rows); err != nil {
					if ctx.Err() != nil {
						return context.Cause(ctx)
					}
					return err
				}
				written.Add(int64(o.batch))
				batches.Add(1)
				cum := expected.Add(exp)
				slot := b % o.window
				need := ahead[slot] // the total once batch b-window is delivered
				ahead[slot] = cum
				if b >= o.window {
					for conns.entries() < need {
						select {
						case <-stop:
							return nil
						case <-ctx.Done():
							return context.Cause(ctx)
						case <-time.After(100 * time.Microsecond):
						}
						if err := conns.failure(); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}()
	}()
	stopWriter := sync.OnceValue(func() error { close(stop); return <-werr })
	defer stopWriter()

	select {
	case <-time.After(o.warmup):
	case <-ctx.Done():
		return f, context.Cause(ctx)
	case err := <-werr:
		return f, fmt.Errorf("writer: %v", err)
	}
	e1, fr1, by1, b1 := conns.entries(), conns.frames(), conns.bytes(), batches.Load()
	s1 := takeSample(srv)
	waitProf := func() error { return nil }
	if c, ok := srv.(*child); ok {
		waitProf = c.profile(ctx, o.prof, o.duration)
	}
	select {
	case <-time.After(o.duration):
	case <-ctx.Done():
		return f, context.Cause(ctx)
	}
	s2 := takeSample(srv)
	e2, fr2, by2, b2 := conns.entries(), conns.frames(), conns.bytes(), batches.Load()
	if err := stopWriter(); err != nil {
		return f, fmt.Errorf("writer: %v", err)
	}
	if err := waitProf(); err != nil {
		return f, fmt.Errorf("profile: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
	derr := waitUntil(dctx, conns, 20*time.Millisecond, "the drain", func() bool { return conns.entries() >= expected.Load() })
	dcancel()
	u := s1.to(s2)
	f = fanoutFigures{
		Deliveries:     float64(e2-e1) / u.Seconds,
		EntriesFrame:   ratio(float64(e2-e1), float64(fr2-fr1)),
		BytesEntry:     ratio(float64(by2-by1), float64(e2-e1)),
		Usage:          u,
		ServerCPUPerM:  ratio(u.ServerCPU*1e6, float64(e2-e1)),
		LoadCPUPerM:    ratio(u.LoadCPU*1e6, float64(e2-e1)),
		Written:        written.Load(),
		Expected:       expected.Load(),
		Received:       conns.entries(),
		WriteBatchesPS: float64(b2-b1) / u.Seconds,
	}
	if derr != nil {
		return f, fmt.Errorf("%v (%d of %d deliveries)", derr, f.Received, f.Expected)
	}
	return f, nil
}

// fanoutCentrifugo is the peer's fan-out round: the same subscribers on
// the same channels, the same rows published in batches (one HTTP API
// batch call of o.batch publishes per write, each to its row's channel),
// the same window and drain. Centrifugo, like tide, puts every publication
// queued for a client meanwhile into one WebSocket frame.
func fanoutCentrifugo(ctx context.Context, bin string, o fanoutRun) (fanoutFigures, error) {
	var f fanoutFigures
	p, err := startCentrifugo(ctx, bin, cfOptions{queueMax: 64 << 20})
	if err != nil {
		return f, err
	}
	defer p.stop()
	conns, err := openFleet(ctx, o.n, o.conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialCentrifugo(ctx, p, i, dialOpts{scope: scopeName(i % o.scopes), readBuf: 16 << 10, round: 1})
	})
	if err != nil {
		return f, err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 10*time.Millisecond, "subscribed", func() bool { return conns.caughtUp() == o.n }); err != nil {
		return f, err
	}
	var req, row []byte
	post := func(ctx context.Context, rows []item) error {
		req = append(req[:0], `{"commands":[`...)
		for i, r := range rows {
			if i > 0 {
				req = append(req, ',')
			}
			id, _ := strconv.ParseInt(r.ID, 10, 64)
			row = cfRow(row[:0], id, r.Scope, r.Body, r.SentNS)
			req = append(req, `{"publish":`...)
			req = cfPublishBody(req, r.Scope, row)
			req = append(req, '}')
		}
		req = append(req, `]}`...)
		return p.api(ctx, "batch", req, nil)
	}
	o.prof = ""
	f, err = measureFanout(ctx, o, conns, p, post)
	f.ServerRSS = p.rss()
	return f, err
}

func scopeName(i int) string { return "s" + strconv.Itoa(i) }

// baselineFrames builds count changes frames of perFrame entries each,
// byte for byte as tide encodes them (protocol.EncodeRow renders the rows;
// the frame and entry framing are tide's), with rows like the ones the
// tide run wrote.
func baselineFrames(count, perFrame int, body, epoch string) []string {
	if epoch == "" {
		epoch = "AAAAAAAAAAAAAAAA"
	}
	out := make([]string, count)
	seq := int64(100_000)
	sent := clock()
	for k := range out {
		var b []byte
		b = append(b, `{"v":1,"type":"changes","id":"1","cursor":"1.`...)
		b = append(b, epoch...)
		b = append(b, '.')
		b = strconv.AppendInt(b, seq+int64(perFrame), 10)
		b = append(b, `","entries":[`...)
		for j := range perFrame {
			key, row, err := protocol.EncodeRow(item{ID: strconv.FormatInt(seq, 10), Scope: scopeName(0), Tenant: tenant, Body: body, SentNS: sent})
			if err != nil {
				panic(err)
			}
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"op":"upsert","key":`...)
			b = strconv.AppendQuote(b, key)
			b = append(b, `,"row":`...)
			b = append(b, row...)
			b = append(b, '}')
			seq++
		}
		b = append(b, ']', '}')
		out[k] = string(b)
	}
	return out
}

func fanoutBaseline(ctx context.Context, n, conc int, frames []string, perFrame int, warmup, duration time.Duration) (fanoutFigures, error) {
	var f fanoutFigures
	srv, err := startChild(ctx, "serve-baseline")
	if err != nil {
		return f, err
	}
	defer srv.stop()
	conns, err := openFleet(ctx, n, conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialLoad(ctx, srv.addr, i, dialOpts{path: "/ws", readBuf: 16 << 10})
	})
	if err != nil {
		return f, err
	}
	defer conns.close()
	for {
		var st baselineStats
		if err := srv.getJSON(ctx, "/debug/stats", &st); err != nil {
			return f, err
		}
		if st.Connections == int64(n) {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return f, context.Cause(ctx)
		}
	}
	// A bound on messages per connection well above what the window can
	// take (50M entries/s in total), so the loop ends even if /stop is
	// never sent.
	maxMsgs := int((warmup+duration+10*time.Second).Seconds()*50e6) / n / perFrame
	req, _ := json.Marshal(baselineStart{Payloads: frames, MaxMessages: max(maxMsgs, 1)})
	if err := srv.doJSON(ctx, "POST", "/start", bytes.NewReader(req), nil); err != nil {
		return f, err
	}
	defer func() { _ = srv.doJSON(context.Background(), "POST", "/stop", nil, nil) }()
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
		return f, context.Cause(ctx)
	}
	e1, fr1, by1 := conns.entries(), conns.frames(), conns.bytes()
	s1 := takeSample(srv)
	select {
	case <-time.After(duration):
	case <-ctx.Done():
		return f, context.Cause(ctx)
	}
	s2 := takeSample(srv)
	e2, fr2, by2 := conns.entries(), conns.frames(), conns.bytes()
	if err := srv.doJSON(ctx, "POST", "/stop", nil, nil); err != nil {
		return f, err
	}
	u := s1.to(s2)
	return fanoutFigures{
		Deliveries:    float64(e2-e1) / u.Seconds,
		EntriesFrame:  ratio(float64(e2-e1), float64(fr2-fr1)),
		BytesEntry:    ratio(float64(by2-by1), float64(e2-e1)),
		Usage:         u,
		ServerCPUPerM: ratio(u.ServerCPU*1e6, float64(e2-e1)),
		LoadCPUPerM:   ratio(u.LoadCPU*1e6, float64(e2-e1)),
	}, nil
}
