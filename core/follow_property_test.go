package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

// TestFollowProperty: three engines share an in-memory feed; subscriptions
// to todos (one project, or an "in" list) start on random connections of
// random users on every node while memberships are added and deleted
// through random nodes, one or several per write, with subscribes and
// writes interleaved so policies run while memberships change under them.
// Nothing calls Reauthorize. Once the writes are re-checked everywhere:
//
//   - no subscription is open whose policy denies it now (a membership it
//     needs is gone);
//   - none was ended that its policy allowed all along (every membership it
//     needs existed when it was sent and was never deleted since), and every
//     one ended was ended as forbidden by its policy.
//
// The dependency's narrowing is chosen at random too. Seeded: TIDE_SEED
// replays the choices (not the interleaving).
func TestFollowProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 7))
	deps := []core.Dependency{
		followedTodos,
		{Resource: "memberships", Principal: "user_id"},
		{Resource: "memberships", Scope: map[string]string{"project_id": "project_id"}},
		{Resource: "memberships"},
	}
	dep := deps[rng.IntN(len(deps))]
	t.Logf("dependency %+v", dep)
	f := memfeed.New(memfeed.Options{})
	nodes := []*followNode{newFollowNode(t, f, dep), newFollowNode(t, f, dep), newFollowNode(t, f, dep)}
	users, projects := []string{"u0", "u1", "u2", "u3", "u4", "u5"}, []string{"p0", "p1", "p2", "p3", "p4", "p5"}

	// The model: which memberships exist, and how often each was deleted.
	present, deletes := map[string]bool{}, map[string]int{}
	var initial []membership
	for _, u := range users {
		for _, p := range projects {
			if rng.IntN(3) > 0 {
				present[u+"/"+p] = true
				initial = append(initial, member(u, p))
			}
		}
	}
	ctx := context.Background()
	if err := nodes[0].members.Upsert(ctx, initial...); err != nil {
		t.Fatal(err)
	}

	type sub struct {
		id       string
		user     string
		projects []string
		allowed  bool           // every membership it needs existed when it was sent
		deletes  map[string]int // their delete counts then
	}
	type client struct {
		*wsClient
		user string
		subs []*sub
	}
	var clients []*client
	for _, n := range nodes {
		for _, u := range users {
			c := dialAt(t, n.url, u)
			c.hello()
			clients = append(clients, &client{wsClient: c, user: u})
		}
	}
	// read reads c's frames until until says stop, noting which
	// subscriptions answered and which were ended.
	ended, answered := map[*sub]protocol.ServerFrame{}, map[*sub]bool{}
	read := func(c *client, until func() bool) {
		for !until() {
			fr := c.Next()
			i := slices.IndexFunc(c.subs, func(s *sub) bool { return s.id == fr.ID })
			if i < 0 {
				if fr.ID == "probe" && fr.Code == protocol.CodeUnknownSub {
					return
				}
				continue
			}
			switch fr.Type {
			case protocol.FrameError:
				ended[c.subs[i]] = fr
				answered[c.subs[i]] = true
			case protocol.FrameCaughtUp:
				answered[c.subs[i]] = true
			}
		}
	}
	write := func() {
		n := nodes[rng.IntN(len(nodes))]
		var ups, dels []membership
		for range 1 + rng.IntN(2) {
			u, p := users[rng.IntN(len(users))], projects[rng.IntN(len(projects))]
			k := u + "/" + p
			if present[k] && !slices.ContainsFunc(ups, func(m membership) bool { return m.ID == k }) {
				delete(present, k)
				deletes[k]++
				dels = append(dels, membership{ID: k})
			} else if !present[k] && !slices.ContainsFunc(dels, func(m membership) bool { return m.ID == k }) {
				present[k] = true
				ups = append(ups, member(u, p))
			}
		}
		if len(ups) > 0 {
			if err := n.members.Upsert(ctx, ups...); err != nil {
				t.Fatal(err)
			}
		}
		if len(dels) > 0 {
			if err := n.members.Delete(ctx, dels...); err != nil {
				t.Fatal(err)
			}
		}
	}
	subscribe := func(i int) {
		c := clients[rng.IntN(len(clients))]
		ps := []string{projects[rng.IntN(len(projects))]}
		if rng.IntN(3) == 0 {
			ps = append(ps, projects[rng.IntN(len(projects))])
		}
		s := &sub{id: fmt.Sprintf("s%d", i), user: c.user, projects: ps, allowed: true, deletes: map[string]int{}}
		for _, p := range ps {
			k := c.user + "/" + p
			s.allowed = s.allowed && present[k]
			s.deletes[k] = deletes[k]
		}
		conds := map[string]any{"project_id": map[string]any{"in": ps}}
		if len(ps) == 1 {
			conds = project(ps[0])
		}
		c.Subscribe(s.id, "todos", conds)
		c.subs = append(c.subs, s)
		if rng.IntN(2) == 0 { // live before the next write; else racing it
			read(c, func() bool { return answered[s] })
		}
	}
	steps := 300
	if testing.Short() {
		steps = 100
	}
	for i := range steps {
		if rng.IntN(5) > 0 {
			subscribe(i)
		} else {
			write()
		}
	}

	// Every subscription answers (caught up, or refused); then every node
	// re-checks what the writes call for; then each connection's frames up
	// to a probe say which subscriptions were ended.
	for _, c := range clients {
		read(c, func() bool {
			return !slices.ContainsFunc(c.subs, func(s *sub) bool { return !answered[s] })
		})
	}
	settle(t, f, nodes...)
	for _, c := range clients {
		c.Unsubscribe("probe")
		read(c, func() bool { return false }) // returns at the probe's answer
	}

	var open, closed int
	for _, c := range clients {
		for _, s := range c.subs {
			fr, gone := ended[s]
			now, allAlong := true, s.allowed
			for _, p := range s.projects {
				k := s.user + "/" + p
				now = now && present[k]
				allAlong = allAlong && deletes[k] == s.deletes[k]
			}
			switch {
			case gone && (fr.Code != protocol.CodeForbidden || !strings.Contains(fr.Message, "not a member")):
				t.Errorf("%s of %s on %v ended with %s %q, want forbidden by its policy", s.id, s.user, s.projects, fr.Code, fr.Message)
			case gone && allAlong:
				t.Errorf("%s of %s on %v was ended, but its policy allowed it all along", s.id, s.user, s.projects)
			case !gone && !now:
				t.Errorf("%s of %s on %v is still open, but its policy denies it now", s.id, s.user, s.projects)
			}
			if gone {
				closed++
			} else {
				open++
			}
		}
	}
	var runs, ends int64
	for _, n := range nodes {
		st := n.e.Stats()
		runs, ends = runs+st.PolicyRechecks, ends+st.RechecksEnded
	}
	t.Logf("%d subscriptions open, %d ended (%d by re-checks, of %d policies re-run)", open, closed, ends, runs)
}
