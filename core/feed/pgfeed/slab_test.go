package pgfeed

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestSlabKeepsWhatItHandsOut renders runs of random lengths in place (free,
// then keep), some longer than the free space or than a chunk, mixed with
// copies (bytes, string), and checks that every run handed out still holds
// what it held when handed out after everything else was written and after
// every run was appended to.
func TestSlabKeepsWhatItHandsOut(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s slab
	type run struct {
		got   []byte
		str   string
		isStr bool
		want  []byte
	}
	var runs []run
	for i := range 20_000 {
		n := rng.IntN(300)
		switch rng.IntN(20) {
		case 0:
			n = rng.IntN(3 * slabChunk) // past the free space, even a chunk
		case 1:
			n = 0
		}
		want := make([]byte, n)
		for j := range want {
			want[j] = byte(rng.UintN(256))
		}
		switch i % 3 {
		case 0, 1:
			room := rng.IntN(2 * snapshotRowRoom)
			dst := s.free(room)
			if len(dst) != 0 || cap(dst) < room {
				t.Fatalf("free(%d) = len %d cap %d", room, len(dst), cap(dst))
			}
			got := s.keep(append(dst, want...))
			runs = append(runs, run{got: got, want: want})
		default:
			if rng.IntN(2) == 0 {
				runs = append(runs, run{got: s.bytes(want), want: want})
			} else {
				runs = append(runs, run{str: s.string(want), isStr: true, want: want})
			}
		}
	}
	// An append to a run must not write over another: every run is
	// appended to, then every run checked.
	for _, r := range runs {
		if !r.isStr {
			_ = append(r.got, 0xAA, 0xBB, 0xCC)
		}
	}
	for i, r := range runs {
		if r.isStr {
			if r.str != string(r.want) {
				t.Fatalf("run %d: string changed after later writes", i)
			}
			continue
		}
		if !bytes.Equal(r.got, r.want) {
			t.Fatalf("run %d (%d bytes): changed after later writes", i, len(r.want))
		}
	}
}
