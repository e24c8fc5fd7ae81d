package core

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tidesync/tide/core/feed"
)

// TestMutationTraceLinks runs the matching rule of mutationTraces through
// table cases: each step begins or ends a mutation, or dispatches a batch
// whose expected links are listed.
func TestMutationTraceLinks(t *testing.T) {
	type step struct {
		begin  string        // begin the mutation named so (origin "o" unless set)
		origin string        // its origin
		end    string        // end the named mutation...
		at     feed.Position // ...acknowledged at this position
		refuse bool          // ...refused instead
		batch  []feed.Change // dispatch this batch
		links  []string      // and expect links to these mutations
	}
	ch := func(pos feed.Position, origin string) feed.Change { return feed.Change{Pos: pos, Origin: origin} }
	cases := []struct {
		name  string
		steps []step
	}{
		{"acked then dispatched", []step{
			{begin: "m1"}, {end: "m1", at: 2},
			{batch: []feed.Change{ch(1, "o"), ch(2, "o")}, links: []string{"m1"}},
			{batch: []feed.Change{ch(3, "o")}}, // forgotten once dispatched past its ack
		}},
		{"dispatched before its ack", []step{
			{begin: "m1"},
			{batch: []feed.Change{ch(1, "o")}, links: []string{"m1"}},
			{end: "m1", at: 1}, // already dispatched: forgotten
			{batch: []feed.Change{ch(2, "o")}},
		}},
		{"sequential mutations of one origin", []step{
			{begin: "m1"}, {end: "m1", at: 2},
			{begin: "m2"}, {end: "m2", at: 4},
			{batch: []feed.Change{ch(1, "o"), ch(2, "o")}, links: []string{"m1"}},
			{batch: []feed.Change{ch(3, "o"), ch(4, "o")}, links: []string{"m2"}},
		}},
		{"refused mutation links nothing", []step{
			{begin: "m1"}, {end: "m1", refuse: true},
			{batch: []feed.Change{ch(1, "o")}},
		}},
		{"other origins and no origin", []step{
			{begin: "m1"}, {end: "m1", at: 3},
			{batch: []feed.Change{ch(1, ""), ch(2, "x"), ch(3, "o")}, links: []string{"m1"}},
		}},
		{"changes dispatched before it began", []step{
			{batch: []feed.Change{ch(5, "o")}},
			{begin: "m1"}, {end: "m1", at: 7},
			{batch: []feed.Change{ch(6, "o")}, links: []string{"m1"}},
		}},
		{"concurrent mutations of one origin link both", []step{
			{begin: "m1"}, {begin: "m2"},
			{batch: []feed.Change{ch(1, "o")}, links: []string{"m1", "m2"}},
			{end: "m1", at: 1}, {end: "m2", at: 2},
			{batch: []feed.Change{ch(2, "o")}, links: []string{"m2"}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMutationTraces()
			live := map[string]*mutationTrace{}
			for i, s := range tc.steps {
				origin := s.origin
				if origin == "" {
					origin = "o"
				}
				switch {
				case s.begin != "":
					live[s.begin] = m.begin(origin, s.begin)
				case s.end != "":
					m.end(origin, live[s.end], s.at, !s.refuse)
				default:
					got := m.links(s.batch)
					slices.Sort(got)
					if !slices.Equal(got, s.links) {
						t.Fatalf("step %d: links %v, want %v", i, got, s.links)
					}
				}
			}
		})
	}
}

// TestMutationTracesBounded: the memory holds at most
// maxTracedMutationsOrigin mutations per origin and maxTracedMutations in
// all, and is empty again once the tailer passed every ack.
func TestMutationTracesBounded(t *testing.T) {
	m := newMutationTraces()
	var pos feed.Position
	for i := range maxTracedMutations + 100 {
		origin := fmt.Sprint("o", i%(maxTracedMutations/maxTracedMutationsOrigin+10))
		if mt := m.begin(origin, "tp"); mt != nil {
			pos++
			m.end(origin, mt, pos, true)
		}
	}
	if n := m.count.Load(); n != maxTracedMutations {
		t.Fatalf("%d remembered, want the bound %d", n, maxTracedMutations)
	}
	for origin, list := range m.byOrigin {
		if len(list) > maxTracedMutationsOrigin {
			t.Fatalf("origin %s: %d remembered", origin, len(list))
		}
	}
	m.links([]feed.Change{{Pos: pos}})
	if n, k := m.count.Load(), len(m.byOrigin); n != 0 || k != 0 {
		t.Fatalf("%d remembered in %d origins after the tailer passed every ack", n, k)
	}
}
