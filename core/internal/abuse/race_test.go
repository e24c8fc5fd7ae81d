//go:build race

package abuse_test

// raceEnabled: the race detector slows the server's frame decoding about
// tenfold, so the floods of large frames are scaled down to keep the suite
// within its time (the sabotage check runs without -race).
const raceEnabled = true
