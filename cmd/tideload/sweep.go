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
	"slices"
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
	replot := fs.Bool("replot", false, "measure nothing: draw the SVG again from the CSV in -out")
	procs := fs.Int("procs", 2, "idle: load processes the connections are split over")
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
	base := filepath.Join(*out, *what)
	if *replot {
		c, err := readCurve(*what, base+".csv")
		if err != nil {
			return err
		}
		return c.writeSVG(base)
	}
	e := newEnv(fs)
	c := newCurve(*what, *rate, *duration)
	switch *what {
	case "latency":
		err = sweepLatency(ctx, &c, sizes, *rate, *duration, peer)
	case "idle":
		err = sweepIdle(ctx, &c, sizes, *procs, peer)
	case "replay":
		err = sweepReplay(ctx, &c, sizes, peer)
	case "fanout":
		err = sweepFanout(ctx, &c, sizes, scopeList, *duration, peer)
	}
	if err != nil && len(c.rows) == 0 {
		return err
	}
	c.measured = e.String()
	for i := range c.rows {
		c.rows[i] = append(c.rows[i], c.measured)
	}
	if werr := c.write(base); werr != nil {
		return werr
	}
	fmt.Printf("wrote %s.csv and %s.svg (%d rows)\n", base, base, len(c.rows))
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

// curve is a sweep's result: the CSV's rows (the record), and how the
// chart draws them.
type curve struct {
	title, command string
	measured       string // the environment line of the run
	xLabel, yLabel string
	logX, logY     bool
	header         []string
	rows           [][]string
	specs          func(rows [][]string) []seriesSpec
	// alt, if set, is a second chart of the same rows, written to
	// <base>-<alt.suffix>.svg.
	alt *altChart
}

// altChart is a second view of a sweep's rows.
type altChart struct {
	suffix, title, yLabel string
	specs                 func(rows [][]string) []seriesSpec
}

// seriesSpec draws the rows whose columns equal where as one line: x and y
// are column names, y is multiplied by scale.
type seriesSpec struct {
	name, color string
	dash        bool
	where       map[string]string
	x, y        string
	scale       float64
}

// newCurve is a mode's CSV columns and chart; the last column of every row
// is the run's environment.
func newCurve(what string, rate float64, d time.Duration) curve {
	var c curve
	switch what {
	case "latency":
		c.title = fmt.Sprintf("Commit-to-client latency, %.0f writes/s, by subscribers", rate)
		c.command = fmt.Sprintf("tideload latency -rate %.0f -duration %s -feed both -centrifugo BIN per point", rate, d)
		c.xLabel, c.yLabel, c.logX, c.logY = "subscribers (one scope / channel)", "latency, ms (write returned → client)", true, true
		c.header = []string{"subscribers", "server", "feed", "p50_ms", "p90_ms", "p99_ms", "max_ms", "sent_p50_ms", "sent_p99_ms", "writes_per_s", "deliveries", "missing", "server_cpu_s", "load_cpu_s", "other_cpu_s", "note"}
		quantiles := func(prefix string) func([][]string) []seriesSpec {
			return func([][]string) []seriesSpec {
				var ss []seriesSpec
				for _, x := range []struct{ name, server, feed, color string }{
					{"tide (Postgres)", "tide", "pg", colTide}, {"tide (in-memory feed)", "tide", "mem", colTideMem}, {"Centrifugo", "centrifugo", "", colCF}} {
					for _, q := range []string{"p50", "p99"} {
						ss = append(ss, seriesSpec{name: x.name + " " + q, color: x.color, dash: q == "p99",
							where: map[string]string{"server": x.server, "feed": x.feed}, x: "subscribers", y: prefix + q + "_ms", scale: 1})
					}
				}
				return ss
			}
		}
		c.specs = quantiles("")
		c.alt = &altChart{suffix: "sent", title: fmt.Sprintf("Write-sent-to-client latency, %.0f writes/s, by subscribers", rate),
			yLabel: "latency, ms (write sent → client)", specs: quantiles("sent_")}
	case "idle":
		c.title = "Server memory (RSS) with idle subscribed connections"
		c.command = "tideload idle -n N -procs 2 -centrifugo BIN per point (100 scopes / channels; load client in 2 processes)"
		c.xLabel, c.yLabel = "idle subscribed connections", "server RSS, MiB"
		c.header = []string{"connections", "server", "rss_before_mib", "rss_mib", "kib_per_conn", "rss_settled_mib", "settled_kib_per_conn"}
		c.specs = func([][]string) []seriesSpec {
			return []seriesSpec{
				{name: "tide, after the connections open", color: colTide, dash: true, where: map[string]string{"server": "tide"}, x: "connections", y: "rss_mib", scale: 1},
				{name: "tide, settled (after GC)", color: colTide, where: map[string]string{"server": "tide"}, x: "connections", y: "rss_settled_mib", scale: 1},
				{name: "Centrifugo (3 s later)", color: colCF, where: map[string]string{"server": "centrifugo"}, x: "connections", y: "rss_settled_mib", scale: 1},
			}
		}
	case "replay":
		c.title = "Catch-up of a backlog by one client"
		c.command = "tideload replay -rows N -runs 1 -centrifugo BIN per point"
		c.xLabel, c.yLabel, c.logX, c.logY = "backlog, rows", "time to catch up, s", true, true
		c.header = []string{"rows", "path", "rows_per_s", "seconds", "note"}
		c.specs = func([][]string) []seriesSpec {
			var ss []seriesSpec
			for _, x := range []struct {
				name, path, color string
				dash              bool
			}{{"tide replay over WebSocket", "tide", colTide, false}, {"pgx SELECT of the table", "select_table", colBaseline, false},
				{"pgx SELECT of the change log", "select_changelog", colLog, true}, {"Centrifugo history recovery", "centrifugo", colCF, false}} {
				ss = append(ss, seriesSpec{name: x.name, color: x.color, dash: x.dash, where: map[string]string{"path": x.path}, x: "rows", y: "seconds", scale: 1})
			}
			return ss
		}
	case "fanout":
		c.title = "Fan-out throughput: writes of 100 rows, as fast as the clients take them"
		c.command = fmt.Sprintf("tideload fanout -n N -scopes S -duration %s -centrifugo BIN per point; tide: RequireClaim + row filter", d)
		c.xLabel, c.yLabel, c.logX, c.logY = "subscribers", "deliveries/s, millions", true, true
		c.header = []string{"subscribers", "scopes", "server", "deliveries_per_s", "entries_per_frame", "server_cpu_s_per_m", "load_cpu_s_per_m", "other_cpu_s", "note"}
		c.specs = func(rows [][]string) []seriesSpec {
			var scopes []string
			for _, r := range rows {
				if len(r) > 1 && !slices.Contains(scopes, r[1]) {
					scopes = append(scopes, r[1])
				}
			}
			var ss []seriesSpec
			for i, sc := range scopes {
				for _, x := range []struct{ name, server, color string }{{"tide", "tide", colTide}, {"Centrifugo", "centrifugo", colCF}, {"bare gorilla broadcast", "gorilla", colBaseline}} {
					ss = append(ss, seriesSpec{name: fmt.Sprintf("%s, %s scope(s)", x.name, sc), color: x.color, dash: i > 0,
						where: map[string]string{"server": x.server, "scopes": sc}, x: "subscribers", y: "deliveries_per_s", scale: 1e-6})
				}
			}
			return ss
		}
	}
	c.header = append(c.header, "measured")
	return c
}

// readCurve reads a sweep's CSV back.
func readCurve(what, file string) (curve, error) {
	c := newCurve(what, 100, 5*time.Second)
	b, err := os.ReadFile(file)
	if err != nil {
		return c, err
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(recs) < 1 {
		return c, fmt.Errorf("%s: %v", file, err)
	}
	c.header, c.rows = recs[0], recs[1:]
	if len(c.rows) > 0 {
		c.measured = c.rows[0][len(c.rows[0])-1]
	}
	return c, nil
}

// series draws the rows as the chart's lines.
func (c *curve) series(specs func(rows [][]string) []seriesSpec) []series {
	col := map[string]int{}
	for i, h := range c.header {
		col[h] = i
	}
	var out []series
	for _, sp := range specs(c.rows) {
		s := series{name: sp.name, color: sp.color, dash: sp.dash}
	rows:
		for _, r := range c.rows {
			for k, v := range sp.where {
				if i, ok := col[k]; !ok || i >= len(r) || r[i] != v {
					continue rows
				}
			}
			x, errX := strconv.ParseFloat(r[col[sp.x]], 64)
			y, errY := strconv.ParseFloat(r[col[sp.y]], 64)
			if errX == nil && errY == nil && y > 0 {
				s.pts = append(s.pts, [2]float64{x, y * sp.scale})
			}
		}
		out = append(out, s)
	}
	return out
}

func (c *curve) write(base string) error {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(c.header)
	_ = w.WriteAll(c.rows)
	if err := os.WriteFile(base+".csv", b.Bytes(), 0o644); err != nil {
		return err
	}
	return c.writeSVG(base)
}

func (c *curve) writeSVG(base string) error {
	svg := chartSVG(chart{title: c.title, subtitle: []string{c.command, c.measured}, xLabel: c.xLabel, yLabel: c.yLabel,
		logX: c.logX, logY: c.logY, series: c.series(c.specs)})
	if err := os.WriteFile(base+".svg", []byte(svg), 0o644); err != nil {
		return err
	}
	if c.alt == nil {
		return nil
	}
	svg = chartSVG(chart{title: c.alt.title, subtitle: []string{c.command, c.measured}, xLabel: c.xLabel, yLabel: c.alt.yLabel,
		logX: c.logX, logY: c.logY, series: c.series(c.alt.specs)})
	return os.WriteFile(base+"-"+c.alt.suffix+".svg", []byte(svg), 0o644)
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

func sweepLatency(ctx context.Context, c *curve, sizes []int, rate float64, d time.Duration, peer []string) error {
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
		}
		for _, e := range r.CentrifugoErrors {
			row := make([]string, len(c.header)-1) // the environment is appended last
			row[0], row[1], row[len(row)-1] = strconv.Itoa(n), "centrifugo", "failed: "+e
			c.rows = append(c.rows, row)
		}
	}
	return firstErr
}

func sweepIdle(ctx context.Context, c *curve, sizes []int, procs int, peer []string) error {
	var firstErr error
	for _, n := range sizes {
		var r idleResult
		if err := runPoint(ctx, &r, "idle", append([]string{"-n", strconv.Itoa(n), "-procs", strconv.Itoa(procs), "-timeout", "15m"}, peer...)...); err != nil {
			fmt.Fprintln(os.Stderr, "sweep:", err)
			if firstErr == nil {
				firstErr = err
			}
			if r.N == 0 {
				continue
			}
		}
		c.rows = append(c.rows, []string{strconv.Itoa(n), "tide", f2(mib(r.RSSBefore)), f2(mib(r.RSSAfter)), f2(r.RSSKiB), f2(mib(r.RSSSettled)), f2(r.RSSSettledKiB)})
		if r.Centrifugo != nil {
			x := r.Centrifugo
			c.rows = append(c.rows, []string{strconv.Itoa(n), "centrifugo", f2(mib(x.Before)), f2(mib(x.After)), f2(x.RSSKiB), f2(mib(x.Later)), f2(x.RSSLaterKiB)})
		}
	}
	return firstErr
}

func sweepReplay(ctx context.Context, c *curve, sizes []int, peer []string) error {
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
		}{{"tide", r.TideMedian}, {"select_table", r.SelectMedian}, {"select_changelog", r.SelectLogMedian}, {"centrifugo", r.CentrifugoMedian}} {
			if p.rate <= 0 {
				continue
			}
			secs := float64(n) / p.rate
			c.rows = append(c.rows, []string{strconv.Itoa(n), p.name, f2(p.rate), strconv.FormatFloat(secs, 'f', 4, 64), ""})
		}
		for _, e := range r.CentrifugoErrors {
			c.rows = append(c.rows, []string{strconv.Itoa(n), "centrifugo", "", "", "failed: " + e})
		}
	}
	return firstErr
}

func sweepFanout(ctx context.Context, c *curve, sizes, scopes []int, d time.Duration, peer []string) error {
	var firstErr error
	for _, sc := range scopes {
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
			row := func(name string, f fanoutFigures) {
				c.rows = append(c.rows, []string{strconv.Itoa(n), strconv.Itoa(sc), name, strconv.FormatFloat(f.Deliveries, 'f', 0, 64), f2(f.EntriesFrame),
					strconv.FormatFloat(f.ServerCPUPerM, 'f', 3, 64), strconv.FormatFloat(f.LoadCPUPerM, 'f', 3, 64), f2(f.Usage.OtherCPU), ""})
			}
			row("tide", r.Tide)
			if r.Baseline != nil {
				row("gorilla", *r.Baseline)
			}
			if r.Centrifugo != nil {
				row("centrifugo", *r.Centrifugo)
			}
			for _, e := range r.CentrifugoErrors {
				c.rows = append(c.rows, []string{strconv.Itoa(n), strconv.Itoa(sc), "centrifugo", "", "", "", "", "", "failed: " + e})
			}
		}
	}
	return firstErr
}
