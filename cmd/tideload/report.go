package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// common are the flags every load mode has.
type common struct {
	json     bool
	timeout  time.Duration
	loadProf string
}

func (c *common) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.BoolVar(&c.json, "json", false, "print the result as JSON")
	fs.DurationVar(&c.timeout, "timeout", timeout, "give up (and stop everything) after this long")
	fs.StringVar(&c.loadProf, "load-pprof", "", "write a CPU profile of this process (the load client) over the measurement to this file")
}

// profileLoad starts a CPU profile of this process if -load-pprof is set;
// the returned function stops it.
func (c *common) profileLoad() (func(), error) {
	if c.loadProf == "" {
		return func() {}, nil
	}
	f, err := os.Create(c.loadProf)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return sync.OnceFunc(func() { pprof.StopCPUProfile(); f.Close() }), nil
}

// context returns the mode's context: it ends at the timeout or on
// SIGINT/SIGTERM, so every deferred cleanup (the server child, the
// Postgres schema) runs.
func (c *common) context() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), c.timeout, errTimeout)
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills at once (the server
		// child then dies with us: Pdeathsig).
		<-sctx.Done()
		stop()
	}()
	return sctx, func() { stop(); cancel() }
}

// sample is a reading of the clocks a figure is computed from.
type sample struct {
	wall    time.Time
	server  time.Duration // the server child's CPU
	load    time.Duration // this process's CPU (load clients and writer)
	machine time.Duration // every process's busy CPU
}

// cpuReader is a server process whose CPU time a sample reads: a tide
// child or a Centrifugo peer.
type cpuReader interface{ cpu() time.Duration }

func takeSample(srv cpuReader) sample {
	s := sample{wall: time.Now(), load: selfCPU(), machine: machineCPU()}
	if srv != nil {
		s.server = srv.cpu()
	}
	return s
}

// usage is the CPU spent between two samples.
type usage struct {
	Seconds   float64 `json:"seconds"`    // wall time
	ServerCPU float64 `json:"server_cpu"` // CPU seconds of the server process
	LoadCPU   float64 `json:"load_cpu"`   // CPU seconds of this process (clients, writer)
	OtherCPU  float64 `json:"other_cpu"`  // CPU seconds of everything else on the machine (Postgres, other work)
}

func (a sample) to(b sample) usage {
	u := usage{
		Seconds:   b.wall.Sub(a.wall).Seconds(),
		ServerCPU: (b.server - a.server).Seconds(),
		LoadCPU:   (b.load - a.load).Seconds(),
	}
	u.OtherCPU = max(0, (b.machine-a.machine).Seconds()-u.ServerCPU-u.LoadCPU)
	return u
}

func (u usage) String() string {
	return fmt.Sprintf("server %.2f s, load client %.2f s, other %.2f s (CPU seconds over %.2f s wall; %d cores)",
		u.ServerCPU, u.LoadCPU, u.OtherCPU, u.Seconds, runtime.NumCPU())
}

// env describes the machine a result was measured on.
type env struct {
	Go    string `json:"go"`
	CPUs  int    `json:"cpus"`
	When  string `json:"when"`
	Flags string `json:"flags"`
}

func newEnv(fs *flag.FlagSet) env {
	var flags []string
	fs.Visit(func(f *flag.Flag) { flags = append(flags, "-"+f.Name+"="+f.Value.String()) })
	return env{Go: runtime.Version(), CPUs: runtime.NumCPU(), When: time.Now().UTC().Format(time.RFC3339), Flags: strings.Join(flags, " ")}
}

func (e env) String() string {
	return fmt.Sprintf("%s, %d CPUs, %s", e.Go, e.CPUs, e.When)
}

// emit prints a result: JSON, or the text block of text.
func emit(asJSON bool, v any, text string) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	fmt.Print(text)
	return nil
}

// quantiles of nanosecond durations, in milliseconds.
type quantiles struct {
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
	N   int     `json:"n"`
}

func quantilesOf(ns []int64) quantiles {
	if len(ns) == 0 {
		return quantiles{}
	}
	slices.Sort(ns)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ns)))) - 1
		return float64(ns[max(i, 0)]) / 1e6
	}
	return quantiles{P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: q(1), N: len(ns)}
}

func (q quantiles) String() string {
	return fmt.Sprintf("p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms  (%d samples)", q.P50, q.P90, q.P99, q.Max, q.N)
}

// commas formats n with thousands separators.
func commas(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
