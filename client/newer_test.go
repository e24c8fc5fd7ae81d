package client

import (
	"testing"

	"github.com/tidesync/tide/core/protocol"
)

func TestNewer(t *testing.T) {
	c := cur
	s := snapCur
	other := protocol.Cursor{Epoch: "EpochB", Pos: 1}.String()
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"no cursor is never newer", "", "", false},
		{"no cursor is not newer than a cursor", "", c(1), false},
		{"any cursor is newer than none", c(0), "", true},
		{"a snapshot cursor is newer than none", s(0, 1), "", true},
		{"the same change cursor is not newer", c(5), c(5), false},
		{"a later position is newer", c(6), c(5), true},
		{"an earlier position is not newer", c(4), c(5), false},
		{"positions compare as numbers, not text", c(10), c(9), true},
		{"positions compare as numbers, not text (reverse)", c(9), c(10), false},
		{"huge positions", c(1 << 62), c(1<<62 - 1), true},
		{"a change cursor is newer than a snapshot at its position", c(5), s(5, 3), true},
		{"a snapshot is not newer than a change cursor at its position", s(5, 3), c(5), false},
		{"a later cursor of a snapshot is newer", s(5, 2), s(5, 1), true},
		{"an earlier cursor of a snapshot is not newer", s(5, 1), s(5, 2), false},
		{"snapshot cursors compare by number, not text", s(5, 10), s(5, 9), true},
		{"the same snapshot cursor is not newer", s(5, 1), s(5, 1), false},
		{"a cursor of the same number, sealed anew, is not newer", s(5, 1), protocol.Cursor{Epoch: testEpoch, Pos: 5, Snapshot: true, Seq: 1, Sealed: "another"}.String(), false},
		{"a snapshot cursor of protocol 1 stored: the server's word wins", s(5, 1), "1s." + testEpoch + ".5.a2V5", true},
		{"a snapshot at a later position is newer than a change cursor", s(6, 1), c(5), true},
		{"a change cursor before a snapshot's position is not newer", c(4), s(5, 9), false},
		{"a snapshot at a later position is newer than another snapshot", s(6, 1), s(5, 9), true},
		{"another epoch: the server's word wins", other, c(5), true},
		{"another epoch, even at a lower position", protocol.Cursor{Epoch: "EpochB", Pos: 0}.String(), c(5), true},
		{"an unparsable stored cursor is replaced", c(1), "garbage", true},
		{"an unknown cursor format from the server is taken", "2.EpochA.x", c(5), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newer(tt.a, tt.b); got != tt.want {
				t.Errorf("newer(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}
