package core

import (
	"fmt"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
)

type member struct {
	ID      string `tide:"id,pk"`
	User    string `tide:"user_id,scope"`
	Project string `tide:"project_id,scope"`
}

type task struct {
	ID      string `tide:"id,pk"`
	Org     string `tide:"org,scope"`
	Project string `tide:"project_id,scope"`
}

// TestRecheckTargets: a change names what it concerns through the
// declaration, a round's targets stay bounded (past maxTargets of one
// resource it re-checks the whole resource), and which scopes a target
// covers follows the subscription's conditions.
func TestRecheckTargets(t *testing.T) {
	e := newTestEngine(t)
	if _, err := Register(e, Resource[member]{Table: "members"}); err != nil {
		t.Fatal(err)
	}
	tasks, err := Register(e, Resource[task]{Table: "tasks", Authorize: authz.Allow,
		DependsOn: []Dependency{{Resource: "members", Principal: "user_id", Scope: map[string]string{"project_id": "project_id"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ed := (*e.follow.edges.Load())["members"][0]
	c := feed.Change{Resource: "members", Op: feed.OpDelete, Key: "alice/p7", Scope: []string{"alice", "p7"}}
	tg, key, ok := ed.target(&c)
	if !ok || !tg.byPrincipal || tg.principal != "alice" || len(tg.conds) != 1 || tg.conds[0] != (targetCond{col: 1, value: "p7"}) {
		t.Fatalf("target %+v %q %v", tg, key, ok)
	}
	s := tasks.res.schema
	for _, tc := range []struct {
		conds  []feed.Cond
		covers bool
	}{
		{nil, true}, // the whole resource
		{[]feed.Cond{{Col: 0, Values: []string{"o1"}}}, true},                                          // no condition on project_id
		{[]feed.Cond{{Col: 1, Values: []string{"p7"}}}, true},                                          // that project
		{[]feed.Cond{{Col: 1, Values: []string{"p1", "p7", "p9"}}}, true},                              // an "in" list holding it
		{[]feed.Cond{{Col: 1, Values: []string{"p8"}}}, false},                                         // another project
		{[]feed.Cond{{Col: 0, Values: []string{"o1"}}, {Col: 1, Values: []string{"p1", "p8"}}}, false}, // a list without it
	} {
		if got := tg.covers(feed.NewScope(s, tc.conds)); got != tc.covers {
			t.Errorf("covers(%v) = %v, want %v", tc.conds, got, tc.covers)
		}
	}
	// A change without the mapped values (a feed that lost them) concerns
	// every subscription.
	var rs recheckSet
	rs.addChange(ed, &feed.Change{Resource: "members", Key: "x", Scope: []string{"alice"}})
	if rr := rs.res[tasks.res]; !rr.all {
		t.Fatalf("a change without its project: %+v, want the whole resource", rr)
	}
	// Targets are deduplicated and bounded.
	rs = recheckSet{}
	for i := range maxTargets {
		for range 2 {
			rs.addChange(ed, &feed.Change{Resource: "members", Key: "k", Scope: []string{fmt.Sprint("u", i), "p7"}})
		}
	}
	if rr := rs.res[tasks.res]; rr.all || len(rr.targets) != maxTargets {
		t.Fatalf("%d distinct changes: all %v, %d targets", maxTargets, rr.all, len(rr.targets))
	}
	rs.addChange(ed, &feed.Change{Resource: "members", Key: "k", Scope: []string{"one more", "p7"}})
	if rr := rs.res[tasks.res]; !rr.all || rr.targets != nil {
		t.Fatalf("past maxTargets: all %v, %d targets; want the whole resource", rr.all, len(rr.targets))
	}
}
