// Command tideload measures tide on loopback: it starts the server under
// test as a child process (so the server's CPU and memory are its own),
// drives load at it from this process, and prints figures for
// docs/performance.md, with the baselines the figures are compared with
// measured in the same run. Every run is bounded in connections, writes
// and time (-timeout), talks only to 127.0.0.0/8, and stops its server
// child and drops its Postgres schemas on success, error, timeout and
// Ctrl-C.
//
//	tideload fanout  -n 1000            # deliveries/s with scopes and row filter vs a bare gorilla broadcast
//	tideload channels -n 1000           # app channel topic fan-out vs Centrifugo broadcast
//	tideload latency -n 1000 -rate 100  # commit-to-client latency on the Postgres feed
//	tideload replay  -rows 100000       # catch-up replay rows/s vs a plain pgx SELECT
//	tideload storm   -n 5000 -scopes 50 # reconnect storm: time to catch up, replay queries
//	tideload idle    -n 10000           # memory per idle subscribed connection
//	tideload capture -writers 1,16,64   # synced vs plain single-row commits: commits/s, WAL, CPU
//	tideload sweep   -what latency      # a mode at several sizes: CSV + SVG chart
//
// Postgres modes use -dsn, else TIDE_TEST_DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/test. Every mode takes -json. Run
// `tideload <mode> -h` for a mode's flags.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		printUsage()
	}
	modes := map[string]func([]string) error{
		"serve":          serve,
		"serve-baseline": serveBaseline,
		"fanout":         fanout,
		"channels":       channels,
		"latency":        latency,
		"replay":         replay,
		"storm":          storm,
		"idle":           idle,
		"capture":        capture,
		"sweep":          sweep,
		"idle-client":    idleClient,
	}
	run, ok := modes[os.Args[1]]
	if !ok {
		printUsage()
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "tideload:", err)
		os.Exit(1)
	}
}

func printUsage() {
	fmt.Fprintln(os.Stderr, `usage: tideload <mode> [flags]
modes:
  fanout          deliveries/s to N subscribers (scopes + row filter on), vs a bare gorilla/websocket broadcast
  channels        messages/s and deliveries/s of one app channel topic to N subscribers, vs Centrifugo (-centrifugo)
  latency         commit-to-client latency of Postgres writes at a rate R to N subscribers
  replay          catch-up replay of a Postgres backlog to one client, vs a plain pgx SELECT
  storm           C clients on S scopes dropped and resuming at once: time to catch up, replay queries
  idle            memory per idle subscribed connection
  capture         commits/s, WAL and CPU per commit of synced single-row writes vs an identical plain table
  sweep           one of the modes at several sizes: a CSV and an SVG chart of the curve
  serve           (internal) the tide server process the modes start
  serve-baseline  (internal) the bare gorilla/websocket broadcast server
  idle-client     (internal) a share of the idle mode's connections in a process of its own`)
	os.Exit(2)
}
