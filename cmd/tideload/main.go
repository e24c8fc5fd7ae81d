// Command tideload measures tide on loopback: it starts a tide server as a
// child process (so the server's memory and CPU are its own), drives load at
// it, and reports figures for docs/performance.md. Every run is bounded in
// client count and time, and talks only to 127.0.0.0/8.
//
//	go run ./cmd/tideload idle -n 10000     # memory per idle subscribed connection
//
// Run `tideload <mode> -h` for a mode's flags.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "idle":
		err = idle(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tideload:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: tideload <mode> [flags]
modes:
  idle    memory per idle subscribed connection
  serve   (internal) the server process the other modes start`)
	os.Exit(2)
}
