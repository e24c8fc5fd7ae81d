package core

import (
	"context"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

func TestHistory(t *testing.T) {
	s := &feed.Schema{Name: "r", Columns: []protocol.Column{{Name: "id", Kind: protocol.KindString}, {Name: "t", Kind: protocol.KindString}}, Scope: []int{1}}
	h := newHistory(4)
	h.reset(10)
	batch := func(ps ...feed.Position) []feed.Change {
		var out []feed.Change
		for _, p := range ps {
			out = append(out, feed.Change{Pos: p, Resource: "r", Scope: []string{[]string{"a", "b"}[p%2]}})
		}
		return out
	}
	h.add(batch(11, 12, 14))
	all := feed.NewScope(s, nil)
	onlyA := feed.NewScope(s, []feed.Cond{{Col: 0, Values: []string{"a"}}})
	positions := func(cs []feed.Change) []feed.Position {
		var out []feed.Position
		for _, c := range cs {
			out = append(out, c.Pos)
		}
		return out
	}
	for _, tt := range []struct {
		sc           feed.Scope
		after, until feed.Position
		want         []feed.Position
		ok           bool
	}{
		{all, 10, 14, []feed.Position{11, 12, 14}, true},
		{all, 11, 13, []feed.Position{12}, true},
		{onlyA, 10, 14, []feed.Position{12, 14}, true},
		{all, 9, 14, nil, false},  // before what is held
		{all, 10, 15, nil, false}, // beyond what was dispatched
	} {
		got, ok := h.read(targets{{scope: tt.sc}}, tt.after, tt.until)
		if ok != tt.ok || len(got) != len(tt.want) {
			t.Fatalf("read(%d, %d) = %v %v, want %v %v", tt.after, tt.until, positions(got), ok, tt.want, tt.ok)
		}
		for i := range got {
			if got[i].Pos != tt.want[i] {
				t.Fatalf("read(%d, %d) = %v, want %v", tt.after, tt.until, positions(got), tt.want)
			}
		}
	}
	// One more than fits pushes the oldest out: the floor moves to it.
	h.add(batch(15, 16))
	if h.holds(10) || !h.holds(11) {
		t.Fatalf("floor %d after eviction", h.floor)
	}
	if got, ok := h.read(targets{{scope: all}}, 12, 16); !ok || len(got) != 3 {
		t.Fatalf("after eviction: %v %v", positions(got), ok)
	}
	// await returns once the tailer reaches the position, or gives up.
	done := make(chan bool)
	go func() { done <- h.await(context.Background(), 17, time.Minute) }()
	h.add(batch(17))
	if !<-done {
		t.Fatal("await did not see 17")
	}
	if h.await(context.Background(), 99, 0) {
		t.Fatal("await reported a position never dispatched")
	}
	// A reset forgets everything held.
	h.reset(20)
	if _, ok := h.read(targets{{scope: all}}, 17, 20); ok {
		t.Fatal("read across a reset")
	}
}
