package core

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
)

// recordingBus is a feed.Interested bus that records the calls it gets.
type recordingBus struct {
	feed.Bus
	mu      sync.Mutex
	calls   []string
	fail    bool
	covered feed.Position // returned by AddInterest, growing
}

func (b *recordingBus) AddInterest(_ context.Context, ts []feed.Topic) (feed.Position, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail {
		return 0, errors.New("bus down")
	}
	b.calls = append(b.calls, "+"+topicList(ts))
	b.covered += 10
	return b.covered, nil
}

func (b *recordingBus) DropInterest(ts []feed.Topic) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, "-"+topicList(ts))
}

func (b *recordingBus) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls
	b.calls = nil
	return c
}

func topicList(ts []feed.Topic) string {
	var s []string
	for _, t := range ts {
		if t.All {
			s = append(s, t.Resource+".*")
		} else {
			s = append(s, t.Resource+"."+t.Tenant)
		}
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

// TestBusInterest: the hub tells an Interested bus each topic the first time
// a scope group needs it (a scope without a condition on the first scope
// column needs the whole resource), before the subscription goes on, and
// when no group needs it any more; a bus that is not Interested costs
// nothing.
func TestBusInterest(t *testing.T) {
	mf := memfeed.New(memfeed.Options{})
	rb := &recordingBus{Bus: mf}
	e, err := New(Config{Feed: mf, Bus: rb})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID      string `tide:"id,pk"`
		Project string `tide:"project,scope"`
		Owner   string `tide:"owner,scope"`
	}
	if _, err := Register(e, Resource[row]{Name: "todos", Table: "todos"}); err != nil {
		t.Fatal(err)
	}
	schema := e.resource("todos").schema
	ctx := context.Background()
	sub := func(conds ...feed.Cond) *subscription {
		return &subscription{scope: feed.NewScope(schema, conds), ctx: ctx}
	}
	join := func(s *subscription) {
		t.Helper()
		if err := e.joinHub(s); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, want ...string) {
		t.Helper()
		if got := rb.take(); !slices.Equal(got, want) {
			t.Errorf("%s: bus calls %q, want %q", step, got, want)
		}
	}
	p7 := sub(feed.Cond{Col: 0, Values: []string{"p7"}})
	join(p7)
	check("first tenant", "+todos.p7")
	p7b := sub(feed.Cond{Col: 0, Values: []string{"p7"}})
	join(p7b)
	check("same scope again")
	p7owner := sub(feed.Cond{Col: 0, Values: []string{"p7"}}, feed.Cond{Col: 1, Values: []string{"ann"}})
	join(p7owner)
	check("another scope of the same tenant")
	in := sub(feed.Cond{Col: 0, Values: []string{"p7", "p8", "p9"}})
	join(in)
	check("in list", "+todos.p8,todos.p9")
	owner := sub(feed.Cond{Col: 1, Values: []string{"ann"}})
	join(owner)
	check("no condition on the tenant column", "+todos.*")
	e.hub.remove(in)
	check("removal is lazy")
	e.hub.remove(p7)
	e.hub.remove(p7b)
	join(sub(feed.Cond{Col: 0, Values: []string{"p1"}}))
	check("drops are flushed with the next add", "-todos.p8,todos.p9", "+todos.p1")
	// A topic dropped and needed again before a flush is never dropped.
	e.hub.remove(p7owner)
	join(sub(feed.Cond{Col: 0, Values: []string{"p7"}}))
	check("re-added before the flush")
	// A failing add fails the subscription and is retried by the next.
	rb.mu.Lock()
	rb.fail = true
	rb.mu.Unlock()
	bad := sub(feed.Cond{Col: 0, Values: []string{"p2"}})
	if err := e.joinHub(bad); err == nil {
		t.Fatal("joinHub succeeded with a failing bus")
	}
	rb.mu.Lock()
	rb.fail = false
	rb.mu.Unlock()
	join(sub(feed.Cond{Col: 0, Values: []string{"p3"}}))
	check("after a failed add", "+todos.p3")
	join(sub(feed.Cond{Col: 0, Values: []string{"p2"}}))
	check("the failed topic is added when needed again", "+todos.p2")

	// The default bus (the feed) keeps no interest bookkeeping.
	e2, err := New(Config{Feed: mf})
	if err != nil {
		t.Fatal(err)
	}
	if e2.bus.interest != nil || e2.bus.src != feed.Bus(mf) {
		t.Fatalf("default bus: %+v", e2.bus)
	}
}
