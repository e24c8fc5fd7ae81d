package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sweep runs one mode at several sizes and writes the curve: a CSV of every
// point and an SVG chart of it (tide and, with -centrifugo, Centrifugo on
// the same axes). Each point is a run of this same binary in that mode with
// -json, one after the other, so every point starts from a fresh server;
// a point's tide and Centrifugo figures come from the same run.
//
//	tideload sweep -what latency -centrifugo BIN -out docs/perf
//
// writes docs/perf/latency.csv and docs/perf/latency.svg.
func sweep(args []string) error {
	fs := flag.NewFlagSet("sweep", flag.ExitOnError)
	var cm common
	cm.register(fs, 90*time.Minute)
	what := fs.String("what", "", "latency, idle, replay or fanout")
	out := fs.String("out", "docs/perf", "directory the CSV and SVG are written to")
	cfBin := fs.String("centrifugo", "", "Centrifugo binary (the peer's curve)")
	points := fs.String("points", "", "comma-separated sizes (default per mode: latency 100,300,1000,3000,10000 subscribers; idle 1000,5000,10000,19000 connections; replay 10000,100000,1000000 rows; fanout 1000,10000 subscribers)")
	scopes := fs.String("scopes", "1,100", "fanout: comma-separated scope counts")
	duration := fs.Duration("duration", 5*time.Second, "latency: writes per point; fanout: window per point")
	rate := fs.Float64("rate", 100, "latency: commits per second")
	_ = fs.Parse(args)
	defaults := map[string]string{"latency": "100,300,1000,3000,10000", "idle": "1000,5000,10000,19000", "replay": "10000,100000,1000000", "fanout": "1000,10000"}
	def, ok := defaults[*what]
	if !ok {
		return errors.New("sweep: -what must be latency, idle, replay or fanout")
	}
	if *points == "" {
		*points = def
	}
	sizes, err := intList(*points)
	if err != nil {
		return fmt.Errorf("sweep: -points: %w", err)
	}
	scopeList, err := intList(*scopes)
	if err != nil {
		return fmt.Errorf("sweep: -scopes: %w", err)
	}
	ctx, cancel := cm.context()
	defer cancel()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var peer []string
	if *cfBin != "" {
		peer = []string{"-centrifugo", *cfBin}
	}
	e := newEnv(fs)
	var c curve
	switch *what {
	case "latency":
		c, err = sweepLatency(ctx, sizes, *rate, *duration, peer)
	case "idle":
		c, err = sweepIdle(ctx, sizes, peer)
	case "replay":
		c, err = sweepReplay(ctx, sizes, peer)
	case "fanout":
		c, err = sweepFanout(ctx, sizes, scopeList, *duration, peer)
	}
	if err != nil && len(c.rows) == 0 {
		return err
	}
	c.subtitle = fmt.Sprintf("%s; %s", e, c.subtitle)
	if werr := c.write(filepath.Join(*out, *what)); werr != nil {
		return werr
	}
	fmt.Printf("wrote %s.csv and %s.svg (%d rows)\n", filepath.Join(*out, *what), filepath.Join(*out, *what), len(c.rows))
	return err
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// runPoint runs this binary in a mode with -json and decodes its output
// into v. A mode that reports an error after printing its result (missing
// deliveries, say) still yields the result, with the error.
func runPoint(ctx context.Context, v any, mode string, args ...string) error {
	// A point that yields nothing (Postgres refusing connections on a
	// shared server, say) is tried twice more, 15 s apart.
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-time.After(15 * time.Second):
			case <-ctx.Done():
				return err
			}
		}
		var out bool
		if out, err = runPointOnce(ctx, v, mode, args...); out {
			return err
		}
	}
	return err
}

// runPointOnce is one attempt of runPoint; it reports whether the mode
// printed a result.
func runPointOnce(ctx context.Context, v any, mode string, args ...string) (bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	args = append([]string{mode, "-json"}, args...)
	fmt.Fprintf(os.Stderr, "sweep: %s tideload %s\n", time.Now().UTC().Format("15:04:05"), strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, exe, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	runErr := cmd.Run()
	if stdout.Len() == 0 {
		if runErr == nil {
			runErr = errors.New("no output")
		}
		return false, fmt.Errorf("tideload %s: %w", strings.Join(args, " "), runErr)
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		return false, fmt.Errorf("tideload %s: %v", strings.Join(args, " "), err)
	}
	if runErr != nil {
		return true, fmt.Errorf("tideload %s: %w", strings.Join(args, " "), runErr)
	}
	return true, nil
}

// curve is a sweep's result: the CSV's rows and the chart's series.
type curve struct {
	title, subtitle string
	xLabel, yLabel  string
	logX, logY      bool
	header          []string
	rows            [][]string
	series          []series
}

func (c *curve) add(s *series, x, y float64) {
	if y > 0 {
		s.pts = append(s.pts, [2]float64{x, y})
	}
}

func (c *curve) write(base string) error {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(c.header)
	_ = w.WriteAll(c.rows)
	if err := os.WriteFile(base+".csv", b.Bytes(), 0o644); err != nil {
		return err
	}
	svg := chartSVG(chart{title: c.title, subtitle: c.subtitle, xLabel: c.xLabel, yLabel: c.yLabel, logX: c.logX, logY: c.logY, series: c.series})
	return os.WriteFile(base+".svg", []byte(svg), 0o644)
}

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// Colours of the servers: tide's feeds in blues, Centrifugo in orange,
// baselines in greys.
const (
	colTide     = "#1f5fbf"
	colTideMem  = "#4fa3e0"
	colCF       = "#e07b1f"
	colBaseline = "#777777"
	colLog      = "#aaaaaa"
)

func sweepLatency(ctx context.Context, sizes []int, rate float64, d time.Duration, peer []string) (curve, error) {
	c := curve{title: fmt.Sprintf("Commit-to-client latency, %.0f writes/s, by subscribers", rate), xLabel: "subscribers (one scope / channel)",
		yLabel: "latency, ms (write returned → client)", logX: true, logY: true,
		subtitle: fmt.Sprintf("tideload latency -rate %.0f -duration %s -feed both per point", rate, d),
		header:   []string{"subscribers", "server", "feed", "p50_ms", "p90_ms", "p99_ms", "max_ms", "sent_p50_ms", "sent_p99_ms", "writes_per_s", "deliveries", "missing", "server_cpu_s", "load_cpu_s", "other_cpu_s", "note"}}
	pg50 := &series{name: "tide (Postgres) p50", color: colTide}
	pg99 := &series{name: "tide (Postgres) p99", color: colTide, dash: true}
	m50 := &series{name: "tide (in-memory feed) p50", color: colTideMem}
	m99 := &series{name: "tide (in-memory feed) p99", color: colTideMem, dash: true}
	cf50 := &series{name: "Centrifugo p50", color: colCF}
	cf99 := &series{name: "Centrifugo p99", color: colCF, dash: true}
	var firstErr error
	for _, n := range sizes {
		var r latencyReport
		args := append([]string{"-n", strconv.Itoa(n), "-rate", f2(rate), "-duration", d.String(), "-feed", "both", "-timeout", "15m"}, peer...)
		if err := runPoint(ctx, &r, "latency", args...); err != nil {
			fmt.Fprintln(os.Stderr, "sweep:", err)
			if firstErr == nil {
				firstErr = err
			}
			if len(r.Tide) == 0 {
				continue
			}
		}
		all := append(append([]latencyResult{}, r.Tide...), r.Centrifugo...)
		for _, x := range all {
			c.rows = append(c.rows, []string{strconv.Itoa(n), x.Server, x.Feed, f2(x.Latency.P50), f2(x.Latency.P90), f2(x.Latency.P99), f2(x.Latency.Max),
				f2(x.FromSend.P50), f2(x.FromSend.P99), f2(x.CommitsPerS), strconv.Itoa(x.Latency.N), strconv.FormatInt(x.Missing, 10),
				f2(x.Usage.ServerCPU), f2(x.Usage.LoadCPU), f2(x.Usage.OtherCPU), ""})
			p50, p99 := pg50, pg99
			switch {
			case x.Server == "centrifugo":
				p50, p99 = cf50, cf99
			case x.Feed == "mem":
				p50, p99 = m50, m99
			}
			c.add(p50, float64(n), x.Latency.P50)
			c.add(p99, float64(n), x.Latency.P99)
		}
		for _, e := range r.CentrifugoErrors {
			row := make([]string, len(c.header))
			row[0], row[1], row[len(row)-1] = strconv.Itoa(n), "centrifugo", "failed: "+e
			c.rows = append(c.rows, row)
		}
	}
	c.series = []series{*pg50, *pg99, *m50, *m99, *cf50, *cf99}
	return c, firstErr
}

func sweepIdle(ctx context.Context, sizes []int, peer []string) (curve, error) {
	c := curve{title: "Server memory (RSS) with idle subscribed connections", xLabel: "idle subscribed connections (100 scopes / channels)",
		yLabel: "server RSS, MiB", subtitle: "tideload idle -n N per point",
		header: []string{"connections", "server", "rss_before_mib", "rss_mib", "kib_per_conn", "rss_settled_mib", "settled_kib_per_conn"}}
	tide := &series{name: "tide, after the connections open", color: colTide, dash: true}
	settled := &series{name: "tide, settled (after GC)", color: colTide}
	cf := &series{name: "Centrifugo", color: colCF}
	var firstErr error
	for _, n := range sizes {
		var r idleResult
		if err := runPoint(ctx, &r, "idle", append([]string{"-n", strconv.Itoa(n), "-timeout", "15m"}, peer...)...); err != nil {
			fmt.Fprintln(os.Stderr, "sweep:", err)
			if firstErr == nil {
				firstErr = err
			}
			if r.N == 0 {
				continue
			}
		}
		c.rows = append(c.rows, []string{strconv.Itoa(n), "tide", f2(mib(r.RSSBefore)), f2(mib(r.RSSAfter)), f2(r.RSSKiB), f2(mib(r.RSSSettled)), f2(r.RSSSettledKiB)})
		c.add(tide, float64(n), mib(r.RSSAfter))
		c.add(settled, float64(n), mib(r.RSSSettled))
		if r.Centrifugo != nil {
			x := r.Centrifugo
			c.rows = append(c.rows, []string{strconv.Itoa(n), "centrifugo", f2(mib(x.Before)), f2(mib(x.After)), f2(x.RSSKiB), f2(mib(x.Later)), f2(x.RSSLaterKiB)})
			c.add(cf, float64(n), mib(x.Later))
		}
	}
	c.series = []series{*tide, *settled, *cf}
	return c, firstErr
}

func sweepReplay(ctx context.Context, sizes []int, peer []string) (curve, error) {
	c := curve{title: "Catch-up of a backlog by one client", xLabel: "backlog, rows", yLabel: "time to catch up, s", logX: true, logY: true,
		subtitle: "tideload replay -rows N -runs 1 per point",
		header:   []string{"rows", "path", "rows_per_s", "seconds"}}
	tide := &series{name: "tide replay over WebSocket", color: colTide}
	sel := &series{name: "pgx SELECT of the table", color: colBaseline}
	logSel := &series{name: "pgx SELECT of the change log", color: colLog, dash: true}
	cf := &series{name: "Centrifugo history recovery", color: colCF}
	var firstErr error
	for _, n := range sizes {
		var r replayResult
		if err := runPoint(ctx, &r, "replay", append([]string{"-rows", strconv.Itoa(n), "-runs", "1", "-timeout", "30m"}, peer...)...); err != nil {
			fmt.Fprintln(os.Stderr, "sweep:", err)
			if firstErr == nil {
				firstErr = err
			}
			if r.Rows == 0 {
				continue
			}
		}
		for _, p := range []struct {
			name string
			rate float64
			s    *series
		}{{"tide", r.TideMedian, tide}, {"select_table", r.SelectMedian, sel}, {"select_changelog", r.SelectLogMedian, logSel}, {"centrifugo", r.CentrifugoMedian, cf}} {
			if p.rate <= 0 {
				continue
			}
			secs := float64(n) / p.rate
			c.rows = append(c.rows, []string{strconv.Itoa(n), p.name, f2(p.rate), strconv.FormatFloat(secs, 'f', 4, 64)})
			c.add(p.s, float64(n), secs)
		}
	}
	c.series = []series{*tide, *sel, *logSel, *cf}
	return c, firstErr
}

func sweepFanout(ctx context.Context, sizes, scopes []int, d time.Duration, peer []string) (curve, error) {
	c := curve{title: "Fan-out throughput, writes of 100 rows as fast as clients take them", xLabel: "subscribers", yLabel: "deliveries/s, millions",
		logX: true, subtitle: fmt.Sprintf("tideload fanout -n N -scopes S -duration %s per point; tide with RequireClaim + row filter", d),
		header: []string{"subscribers", "scopes", "server", "deliveries_per_s", "entries_per_frame", "server_cpu_s_per_m", "load_cpu_s_per_m", "other_cpu_s", "note"}}
	var ss []series
	var firstErr error
	for si, sc := range scopes {
		tide := &series{name: fmt.Sprintf("tide, %d scope(s)", sc), color: colTide, dash: si > 0}
		base := &series{name: fmt.Sprintf("bare gorilla broadcast, %d scope(s)", sc), color: colBaseline, dash: si > 0}
		cf := &series{name: fmt.Sprintf("Centrifugo, %d channel(s)", sc), color: colCF, dash: si > 0}
		for _, n := range sizes {
			if sc > n {
				continue
			}
			var r fanoutResult
			args := append([]string{"-n", strconv.Itoa(n), "-scopes", strconv.Itoa(sc), "-duration", d.String(), "-timeout", "15m"}, peer...)
			if sc > 1 {
				args = append(args, "-baseline=false") // the baseline broadcasts one stream to everyone
			}
			if err := runPoint(ctx, &r, "fanout", args...); err != nil {
				fmt.Fprintln(os.Stderr, "sweep:", err)
				if firstErr == nil {
					firstErr = err
				}
				if r.N == 0 {
					continue
				}
			}
			row := func(name string, f fanoutFigures, s *series) {
				c.rows = append(c.rows, []string{strconv.Itoa(n), strconv.Itoa(sc), name, strconv.FormatFloat(f.Deliveries, 'f', 0, 64), f2(f.EntriesFrame),
					strconv.FormatFloat(f.ServerCPUPerM, 'f', 3, 64), strconv.FormatFloat(f.LoadCPUPerM, 'f', 3, 64), f2(f.Usage.OtherCPU), ""})
				c.add(s, float64(n), f.Deliveries/1e6)
			}
			row("tide", r.Tide, tide)
			if r.Baseline != nil {
				row("gorilla", *r.Baseline, base)
			}
			if r.Centrifugo != nil {
				row("centrifugo", *r.Centrifugo, cf)
			}
			for _, e := range r.CentrifugoErrors {
				c.rows = append(c.rows, []string{strconv.Itoa(n), strconv.Itoa(sc), "centrifugo", "", "", "", "", "", "failed: " + e})
			}
		}
		ss = append(ss, *tide, *cf)
		if len(base.pts) > 0 {
			ss = append(ss, *base)
		}
	}
	c.series = ss
	return c, firstErr
}
