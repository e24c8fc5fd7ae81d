package pgfeed

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestParseLSN(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0/0", 0, true},
		{"0/F25BBA8", 0xF25BBA8, true},
		{"16/B374D848", 0x16_B374D848, true},
		{"FFFFFFFF/FFFFFFFF", 1<<64 - 1, true},
		{"", 0, false},
		{"0", 0, false},
		{"/1", 0, false},
		{"1/", 0, false},
		{"1/2/3", 0, false},
		{"g/1", 0, false},
		{"100000000/0", 0, false},
		{"-1/0", 0, false},
		{"+1/0", 0, false},
	} {
		got, err := parseLSN(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseLSN(%q) = %#x, %v; want %#x, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestWALMessages(t *testing.T) {
	w := append([]byte{'w'}, binary.BigEndian.AppendUint64(nil, 0x1234)...)
	w = append(w, make([]byte, 16)...)
	w = append(w, "wal bytes"...)
	d, err := parseWALData(w)
	if err != nil || d.start != 0x1234 || string(d.wal) != "wal bytes" {
		t.Fatalf("parseWALData = %+v, %v", d, err)
	}
	k := append([]byte{'k'}, binary.BigEndian.AppendUint64(nil, 0x99)...)
	k = append(k, make([]byte, 8)...)
	for _, reply := range []byte{0, 1} {
		end, want, err := parseKeepalive(append(k, reply))
		if err != nil || end != 0x99 || want != (reply == 1) {
			t.Fatalf("parseKeepalive(reply %d) = %#x, %v, %v", reply, end, want, err)
		}
	}
	for _, bad := range [][]byte{nil, {'w'}, w[:24], {'k'}, k, append([]byte{'x'}, k[1:]...)} {
		if _, err := parseWALData(bad); !errors.Is(err, errWALMessage) {
			t.Errorf("parseWALData(%q): %v, want errWALMessage", bad, err)
		}
	}
	if _, _, err := parseKeepalive(k); !errors.Is(err, errWALMessage) {
		t.Errorf("parseKeepalive of 17 bytes: %v", err)
	}

	now := pgEpoch.Add(90 * time.Second)
	r := appendStandbyStatus(nil, 0xABCD, now)
	if len(r) != 34 || r[0] != 'r' || r[33] != 0 {
		t.Fatalf("standby status %x", r)
	}
	for i := range 3 {
		if got := binary.BigEndian.Uint64(r[1+8*i:]); got != 0xABCD {
			t.Errorf("status position %d = %#x", i, got)
		}
	}
	if got := binary.BigEndian.Uint64(r[25:]); got != 90_000_000 {
		t.Errorf("status time = %d µs, want 90000000", got)
	}
}

// walStream lays content out as WAL from LSN start: a page header at every
// multiple of block (a long one where long says so, filled with marker so
// a scan that reads headers as content finds it), the content in between.
func walStream(content []byte, start, block uint64, long func(page uint64) bool, marker byte) []byte {
	var out []byte
	lsn := start
	for len(content) > 0 {
		if lsn%block == 0 {
			h := walShortHeader
			if long(lsn / block) {
				h = walLongHeader
			}
			hdr := bytes.Repeat([]byte{marker}, h)
			binary.LittleEndian.PutUint16(hdr[2:], 0)
			if h == walLongHeader {
				binary.LittleEndian.PutUint16(hdr[2:], walLongFlag)
			}
			out = append(out, hdr...)
			lsn += uint64(h)
			continue
		}
		n := min(uint64(len(content)), block-lsn%block)
		out = append(out, content[:n]...)
		content, lsn = content[n:], lsn+n
	}
	return out
}

// checkScan feeds the WAL of content to a scan in chunks cut at cuts and
// reports whether the scan's answers agree with a search of content.
func checkScan(t *testing.T, content, pattern []byte, start, block uint64, long func(uint64) bool, cuts []int) {
	t.Helper()
	wal := walStream(content, start, block, long, pattern[0])
	s := &walScan{pattern: pattern, block: block}
	found, prev := false, 0
	for _, c := range append(cuts, len(wal)) {
		c = min(max(c, prev), len(wal))
		if s.feed(start+uint64(prev), wal[prev:c]) {
			found = true
		}
		prev = c
	}
	if want := bytes.Contains(content, pattern); found != want {
		t.Fatalf("scan found %v, content holds the pattern: %v (start %d, block %d, cuts %v)", found, want, start, block, cuts)
	}
}

func TestWALScanRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pattern := []byte("RELFILENODE!")
	for range 2000 {
		block := uint64(64) << rng.IntN(3)
		content := make([]byte, rng.IntN(1000))
		for i := range content {
			content[i] = "RELFIN!x"[rng.IntN(8)]
		}
		if rng.IntN(2) == 0 && len(content) > len(pattern) {
			copy(content[rng.IntN(len(content)-len(pattern)):], pattern)
		}
		// A stream starts at a record boundary: past any page header.
		start := uint64(rng.IntN(4))*block + walLongHeader + uint64(rng.IntN(int(block-walLongHeader)))
		var cuts []int
		for range rng.IntN(6) {
			cuts = append(cuts, rng.IntN(len(content)+200))
		}
		slicesSort(cuts)
		longEvery := uint64(1 + rng.IntN(4))
		checkScan(t, content, pattern, start, block, func(p uint64) bool { return p%longEvery == 0 }, cuts)
	}
}

func slicesSort(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// A scan whose stream has a gap does not join the bytes on either side.
func TestWALScanGap(t *testing.T) {
	s := newWALScan(1, 2, 3, 8192)
	p := s.pattern
	if s.feed(100, p[:6]) {
		t.Fatal("half a locator found")
	}
	if s.feed(200, p[6:]) {
		t.Fatal("a locator joined across a gap")
	}
	if !s.feed(300, p) {
		t.Fatal("a whole locator not found")
	}
	if !bytes.Equal(p, []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}) {
		t.Fatalf("pattern %v", p)
	}
}

// FuzzWALScan checks the scan against a plain search of the content, for
// any content, start, page size, headers and chunking.
func FuzzWALScan(f *testing.F) {
	f.Add([]byte("xxRELFILENODE!xx"), uint16(100), uint8(0), uint8(1), []byte{3, 9})
	f.Add([]byte("RELFILENODE!"), uint16(60), uint8(0), uint8(2), []byte{1})
	f.Add(bytes.Repeat([]byte("RELFILENODE"), 20), uint16(41), uint8(1), uint8(3), []byte{})
	f.Fuzz(func(t *testing.T, content []byte, off uint16, blockShift, longEvery uint8, cuts []byte) {
		pattern := []byte("RELFILENODE!")
		block := uint64(64) << (blockShift % 3)
		start := 3*block + walLongHeader + uint64(off)%(block-walLongHeader)
		every := uint64(longEvery%4) + 1
		var cs []int
		for _, c := range cuts {
			cs = append(cs, int(c)*len(content)/255)
		}
		slicesSort(cs)
		checkScan(t, content, pattern, start, block, func(p uint64) bool { return p%every == 0 }, cs)
	})
}

// FuzzWALMessages feeds arbitrary stream messages to the decoders: an error,
// never a panic, and the decoded parts agree with the bytes.
func FuzzWALMessages(f *testing.F) {
	f.Add(append([]byte{'w'}, make([]byte, 30)...))
	f.Add(append([]byte{'k'}, make([]byte, 17)...))
	f.Add([]byte{'k', 1})
	f.Fuzz(func(t *testing.T, msg []byte) {
		if d, err := parseWALData(msg); err == nil {
			if len(d.wal) != len(msg)-25 || d.start != binary.BigEndian.Uint64(msg[1:]) {
				t.Fatalf("parseWALData(%x) = %+v", msg, d)
			}
		}
		if end, _, err := parseKeepalive(msg); err == nil && end != binary.BigEndian.Uint64(msg[1:]) {
			t.Fatalf("parseKeepalive(%x) end %#x", msg, end)
		}
		s := newWALScan(1, 2, 3, 64)
		s.feed(binary.LittleEndian.Uint64(append(msg, make([]byte, 8)...)), msg) // never panics
	})
}
