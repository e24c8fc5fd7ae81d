package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
)

// chunky returns its data in reads of random sizes (1 to 9 bytes), so
// matches straddle reads in every possible way.
type chunky struct {
	data []byte
	rng  *rand.Rand
}

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), 1+c.rng.IntN(9))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestCountStream(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var msg []byte
		for range rng.IntN(40) {
			switch rng.IntN(4) {
			case 0:
				msg = append(msg, patEntry...)
			case 1:
				msg = append(msg, patEntry[:1+rng.IntN(len(patEntry)-1)]...) // a partial match
			case 2:
				msg = append(msg, `{"{"op":`...)
			default:
				msg = append(msg, "xyz"[:rng.IntN(3)]...)
			}
		}
		want := bytes.Count(msg, patEntry)
		r := &chunky{data: msg, rng: rng}
		buf := make([]byte, 7)
		n, err := io.ReadAtLeast(r, buf, min(len(buf), 4))
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			t.Fatal(err)
		}
		got, size, err := countStream(r, buf, n, eof)
		if err != nil || got != want || size != len(msg) {
			t.Fatalf("%q: count %d size %d err %v, want %d and %d", msg, got, size, err, want, len(msg))
		}
	}
}

func TestNoteKeys(t *testing.T) {
	c := &loadConn{recv: make([]int64, 10)}
	c.noteKeys([]byte(`{"v":1,"type":"changes","id":"1","cursor":"1.x.9","entries":[{"op":"upsert","key":"3","row":{"id":"3"}},{"op":"upsert","key":"7","row":{}},{"op":"upsert","key":"12","row":{}},{"op":"delete","key":"x3"}]}`), 55)
	c.noteKeys([]byte(`{"op":"upsert","key":"3","row":{}}`), 66)
	for k, v := range c.recv {
		want := int64(0)
		if k == 3 || k == 7 {
			want = 55
		}
		if v != want {
			t.Fatalf("key %d: %d, want %d", k, v, want)
		}
	}
	if c.dups.Load() != 1 {
		t.Fatalf("%d duplicates, want 1", c.dups.Load())
	}
}

func TestFrameKind(t *testing.T) {
	for frame, want := range map[string]int{
		`{"v":1,"type":"changes","id":"1"`:     kindChanges,
		`{"v":1,"type":"caught-up","id":"1"}`:  kindCaughtUp,
		`{"v":1,"type":"error","code":"x"}`:    kindBad,
		`{"v":1,"type":"reset","id":"1"}`:      kindBad,
		`{"v":1,"type":"welcome","limits":{}}`: kindOther,
		`{"v":1,"type":"changesx","id":"1"}`:   kindOther,
		`{"v":1,"type":"`:                      kindOther,
	} {
		if got := frameKind([]byte(frame)); got != want {
			t.Errorf("%s: kind %d, want %d", frame, got, want)
		}
	}
}
