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
		{"a snapshot cursor is newer than none", s(0, "a"), "", true},
		{"the same change cursor is not newer", c(5), c(5), false},
		{"a later position is newer", c(6), c(5), true},
		{"an earlier position is not newer", c(4), c(5), false},
		{"positions compare as numbers, not text", c(10), c(9), true},
		{"positions compare as numbers, not text (reverse)", c(9), c(10), false},
		{"huge positions", c(1 << 62), c(1<<62 - 1), true},
		{"a change cursor is newer than a snapshot at its position", c(5), s(5, "k"), true},
		{"a snapshot is not newer than a change cursor at its position", s(5, "k"), c(5), false},
		{"a snapshot past a later key is newer", s(5, "b"), s(5, "a"), true},
		{"a snapshot past an earlier key is not newer", s(5, "a"), s(5, "b"), false},
		{"snapshot keys compare bytewise", s(5, "B"), s(5, "a"), false},
		{"the same snapshot cursor is not newer", s(5, "a"), s(5, "a"), false},
		{"a snapshot at a later position is newer than a change cursor", s(6, "a"), c(5), true},
		{"a change cursor before a snapshot's position is not newer", c(4), s(5, "z"), false},
		{"a snapshot at a later position is newer than another snapshot", s(6, "a"), s(5, "z"), true},
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
