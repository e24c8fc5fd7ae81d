package tidetest

import (
	"strings"
	"testing"
	"time"
)

func TestClockRunsDueTimersInOrder(t *testing.T) {
	c := NewClock(time.Unix(0, 0))
	var got []string
	c.AfterFunc(2*time.Second, func() { got = append(got, "b") })
	c.AfterFunc(time.Second, func() {
		got = append(got, "a")
		// Armed by a callback and due already: runs in the same Advance.
		c.AfterFunc(0, func() { got = append(got, "a2") })
	})
	c.AfterFunc(2*time.Second, func() { got = append(got, "c") })
	stopLate := c.AfterFunc(3*time.Second, func() { got = append(got, "late") })
	c.AfterFunc(0, func() { got = append(got, "now") })
	if len(got) != 0 {
		t.Fatalf("ran inside AfterFunc: %v", got)
	}
	c.Advance(2 * time.Second)
	if s := strings.Join(got, " "); s != "now a b c a2" {
		t.Fatalf("ran %s", s)
	}
	if !stopLate() {
		t.Fatal("stop of a pending timer reported false")
	}
	if stopLate() {
		t.Fatal("second stop reported true")
	}
	c.Advance(time.Hour)
	if len(got) != 5 {
		t.Fatalf("a stopped timer ran: %v", got)
	}
	if !c.Now().Equal(time.Unix(0, 0).Add(time.Hour + 2*time.Second)) {
		t.Fatalf("now %v", c.Now())
	}
}
