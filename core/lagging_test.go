package core_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

// lagging returns the engine's LaggingSubscriptions at its current head.
func lagging(t *testing.T, e *core.Engine, n int) []core.SubscriptionLag {
	t.Helper()
	head, err := e.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return e.LaggingSubscriptions(head, n)
}

// TestLaggingSubscriptions: a client that stops reading is listed before
// the clients that keep up, with its lag (head − delivered), its queue and
// its desyncs; the list is bounded by n, and n ≤ 0 lists none.
func TestLaggingSubscriptions(t *testing.T) {
	s := newInspectServer(t, core.Config{SendBuffer: 64 << 10, MaxDrops: 1 << 20, WriteTimeout: time.Minute})
	ctx := context.Background()
	if got := s.e.LaggingSubscriptions(0, 5); len(got) != 0 {
		t.Fatalf("no connections: %+v", got)
	}
	// Two clients that keep reading (they tell the keys they receive), and
	// one that stops after catching up.
	type receipt struct{ user, key string }
	received := make(chan receipt, 1<<17)
	for _, user := range []string{"amy", "bo"} {
		c := dialAt(t, s.url, user, "p7")
		c.hello()
		c.Subscribe("s", "notes", project("p7"))
		c.collect("s")
		go func() {
			for {
				f, _, err := c.ReadFrame()
				if err != nil {
					return // closed at the test's end
				}
				for _, en := range f.Entries {
					select {
					case received <- receipt{user, en.Key}:
					default: // the test reads only up to the last key
					}
				}
			}
		}()
	}
	slow := dialAt(t, s.url, "sid", "p7")
	slow.Hello(protocol.ClientFrame{Origin: "tablet"})
	slow.Subscribe("s", "notes", project("p7"))
	slow.collect("s")

	title := strings.Repeat("x", 2000)
	const maxRows = 20000 // 40 MB: well beyond loopback socket buffers
	desynced := false
	var last string
	for i := 0; i < maxRows && !desynced; i++ {
		last = fmt.Sprintf("n%05d", i)
		if err := s.notes.Upsert(ctx, note{ID: last, ProjectID: "p7", Title: title}); err != nil {
			t.Fatal(err)
		}
		for _, l := range lagging(t, s.e, 3) {
			desynced = desynced || l.Principal == "sid" && l.State == "desynced"
		}
	}
	if !desynced {
		t.Fatalf("sid's subscription never desynced after %d rows", maxRows)
	}
	// The readers get the last row; sid stays behind.
	head, err := s.e.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for caughtUp := map[string]bool{}; len(caughtUp) < 2; {
		if r := <-received; r.key == last {
			caughtUp[r.user] = true
		}
	}
	got := s.e.LaggingSubscriptions(head, 10)
	if len(got) != 3 {
		t.Fatalf("want 3 subscriptions: %+v", got)
	}
	first := got[0]
	if first.Principal != "sid" || first.Origin != "tablet" || first.ID != "s" || first.Resource != "notes" ||
		first.Scope != "notes where project_id = p7" || first.State != "desynced" || first.Lag == 0 ||
		first.Lag != uint64(head)-first.Delivered || first.Desyncs == 0 || first.QueueBytes == 0 || first.QueueEntries == 0 {
		t.Errorf("first is not sid's desynced subscription: %+v", first)
	}
	for _, l := range got[1:] {
		if l.Principal != "amy" && l.Principal != "bo" || l.State != "live" || l.Delivered != uint64(head) || l.Desyncs != 0 {
			t.Errorf("a reader: %+v", l)
		}
	}
	if top := s.e.LaggingSubscriptions(head, 1); len(top) != 1 || top[0].Principal != "sid" {
		t.Errorf("n = 1: %+v", top)
	}
	if none := s.e.LaggingSubscriptions(head, 0); len(none) != 0 {
		t.Errorf("n = 0: %+v", none)
	}
}
