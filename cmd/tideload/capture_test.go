package main

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestSummarizeCapture: the runs of each writer count are summed per
// table (commits over the runs' time, drain included; WAL per commit is
// the least round's, since other sessions' WAL only adds), the ratios are
// synced over plain, and the verdict applies the targets: 0.75 of plain at
// one writer, 0.8 at more, and at most 2.5 times plain's WAL.
func TestSummarizeCapture(t *testing.T) {
	run := func(w int, synced bool, commits int64, secs float64, wal int64) captureRun {
		return captureRun{Writers: w, Synced: synced, Commits: commits, Seconds: secs, WALBytes: wal,
			ClientCPU: float64(commits) * 1e-4, NodeCPU: float64(commits) * 2e-4, PostgresCPU: float64(commits) * 3e-4}
	}
	runs := []captureRun{
		run(16, true, 800, 1, 800*2000), run(16, false, 1000, 1, 1000*1000),
		run(16, false, 1000, 1, 1000*1500), run(16, true, 800, 1, 800*2500), // met: 0.8, 2x (the least rounds)
		run(1, true, 70, 1, 70*1000), run(1, false, 100, 1, 100*1000), // missed: 0.7 < 0.75
		run(64, true, 900, 1, 900*3000), run(64, false, 1000, 1, 1000*1000), // missed: WAL 3x
		run(4, true, 100, 1, 100), // no plain run: never met
	}
	got := summarizeCapture(runs)
	if ws := []int{got[0].Writers, got[1].Writers, got[2].Writers, got[3].Writers}; len(got) != 4 || !slices.Equal(ws, []int{16, 1, 64, 4}) {
		t.Fatalf("points %+v, want writer counts 16, 1, 64, 4 in that order", got)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tc := range []struct {
		i                       int
		tps, plain, ratio, walR float64
		target                  float64
		met                     bool
	}{
		{0, 800, 1000, 0.8, 2, 0.8, true},
		{1, 70, 100, 0.7, 1, 0.75, false},
		{2, 900, 1000, 0.9, 3, 0.8, false},
		{3, 100, 0, 0, 0, 0.8, false},
	} {
		p := got[tc.i]
		if !near(p.TPSSynced, tc.tps) || !near(p.TPSPlain, tc.plain) || !near(p.TPSRatio, tc.ratio) || !near(p.WALRatio, tc.walR) || p.Target != tc.target || p.Met != tc.met {
			t.Errorf("%d writers: %+v, want tps %v/%v ratio %v WAL ratio %v target %v met %v", p.Writers, p, tc.tps, tc.plain, tc.ratio, tc.walR, tc.target, tc.met)
		}
	}
	if p := got[0]; !near(p.ClientUSSynced, 100) || !near(p.NodeUSPlain, 200) || !near(p.PostgresUSSynced, 300) {
		t.Errorf("CPU per commit %+v, want 100, 200 and 300 µs", p)
	}
	text := captureResult{Points: got}.String()
	if strings.Count(text, "MISSED") != 3 || strings.Count(text, " met\n") != 1 {
		t.Errorf("report:\n%s", text)
	}
}

// TestSocketPorts reads the local ports of the sockets with the given
// inodes from a /proc/net/tcp table.
func TestSocketPorts(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 21843 1 0000000000000000 100 0 0 10 0
   1: 0100007F:D2A4 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 98765 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:D2A6 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 98766 1 0000000000000000 20 4 30 10 -1
short line
`
	got := socketPorts(table, map[string]bool{"98765": true, "98766": true, "1": true})
	if !slices.Equal(got, []int32{0xD2A4, 0xD2A6}) {
		t.Errorf("ports %v, want %v", got, []int32{0xD2A4, 0xD2A6})
	}
}
