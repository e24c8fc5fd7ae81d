package core

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// sealingEngine is an engine with just what sealing and opening snapshot
// cursors read: an epoch and a sealer of a fixed key.
func sealingEngine(t testing.TB) *Engine {
	s, err := newCursorSealer(bytes.Repeat([]byte{7}, feed.CursorKeySize))
	if err != nil {
		t.Fatal(err)
	}
	return &Engine{epoch: "EpochA", sealer: s}
}

// cursorTargets are a subscription of one resource and one of two.
func cursorTargets() (one, two targets) {
	res := func(name string) target {
		s := &feed.Schema{Name: name, Columns: []protocol.Column{{Name: "id", Kind: protocol.KindString}, {Name: "project_id", Kind: protocol.KindString}}, Scope: []int{1}}
		return target{res: &resource{schema: s}, scope: feed.NewScope(s, []feed.Cond{{Col: 0, Values: []string{"p7"}}})}
	}
	return targets{res("todos")}, targets{res("comments"), res("todos")}
}

// FuzzOpenSnapshotCursor: for any place, principal and number, a sealed
// snapshot cursor opens to its place for its principal and targets when
// the place is one a snapshot can continue from, and is refused otherwise;
// it is refused for another principal or targets; a cursor with any byte
// altered is refused or unparsable; and any string, opened as a cursor,
// is refused or gives a valid place, never a panic.
func FuzzOpenSnapshotCursor(f *testing.F) {
	f.Add("k1", "alice", uint64(1), false, 0, byte(1), "2s.EpochA.5.1.AAAA")
	f.Add("todos\x00k1", "bob", uint64(3), true, 17, byte(0x80), "1s.EpochA.5.azE")
	f.Add("todos", "", uint64(2), true, 40, byte(4), "2s.EpochA.0.1.AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxw")
	f.Add("a\x00b", "alice", uint64(1), false, 3, byte(1), "")
	f.Add("\xff\xfe", "alice", uint64(1), false, 3, byte(1), "2s.EpochA.18446744073709551615.18446744073709551615.__8")
	f.Add("secrets\x00k", "alice", uint64(9), true, 12, byte(2), "2s.EpochA.1.1.c2VjcmV0cwBr")
	e := sealingEngine(f)
	one, two := cursorTargets()
	f.Fuzz(func(t *testing.T, place, principal string, seq uint64, multi bool, at int, xor byte, arbitrary string) {
		ts, other := one, two
		if multi {
			ts, other = two, one
		}
		p := authz.Principal{ID: principal}
		if seq == 0 {
			seq = 1
		}
		s := e.snapshotCursor(p, ts, 5, seq, place)
		cur, err := protocol.ParseCursor(s)
		if err != nil {
			if len(s) <= protocol.MaxCursorLen {
				t.Fatalf("sealed cursor %q does not parse: %v", s, err)
			}
			return
		}
		got, perr := e.openSnapshot(p, ts, cur)
		valid := utf8.ValidString(place) && len(place) <= maxSnapshotAfter
		if multi {
			name, key, _ := strings.Cut(place, "\x00")
			valid = valid && ts.index(name) >= 0 && !strings.Contains(key, "\x00")
		} else {
			valid = valid && !strings.Contains(place, "\x00")
		}
		switch {
		case valid && (perr != nil || got != place):
			t.Fatalf("place %q sealed in %q opened to %q, %v", place, s, got, perr)
		case !valid && perr == nil:
			t.Fatalf("place %q, which a snapshot cannot continue from, opened", place)
		case !valid && perr.Code != protocol.CodeInvalidCursor:
			t.Fatalf("place %q refused with %s, want invalid_cursor", place, perr.Code)
		}
		if _, perr := e.openSnapshot(authz.Principal{ID: principal + "x"}, ts, cur); perr == nil {
			t.Fatalf("cursor %q opened for another principal", s)
		}
		if _, perr := e.openSnapshot(p, other, cur); perr == nil {
			t.Fatalf("cursor %q opened for other targets", s)
		}
		if xor != 0 && len(s) > 0 {
			b := []byte(s)
			i := (at%len(b) + len(b)) % len(b)
			b[i] ^= xor
			if c, err := protocol.ParseCursor(string(b)); err == nil && c != cur {
				if _, perr := e.openSnapshot(p, ts, c); perr == nil {
					t.Fatalf("cursor %q, altered to %q, opened", s, b)
				}
			}
		}
		if c, err := protocol.ParseCursor(arbitrary); err == nil && c.Snapshot {
			if after, perr := e.openSnapshot(p, ts, c); perr == nil && !validSnapshotAfter(ts, after) {
				t.Fatalf("%q opened to a place %q a snapshot cannot continue from", arbitrary, after)
			}
		}
	})
}
