package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
	routes "github.com/tidesync/tide/internal/transport"
)

// TestColumnVisibilityProperty: with random changes of owners, privacy,
// emails, salaries and notes, no principal ever receives a column its
// policy refuses (not its name, not its value: frames are checked raw)
// nor an upsert that leaves its copy as it was (a change of columns it may
// not see only), whether live from the start, caught up mid-way (snapshot
// then live), resumed from a cursor (replay) or polling; and every copy
// converges to the rows it may see, trimmed to the columns it may see.
//
// Two sabotaged servers prove the checker fires: one whose salary policy
// shows one row's salary to everyone (leak), one whose feed does not
// record previous versions (noprev), so that changes of hidden columns
// reach those they are hidden from.
func TestColumnVisibilityProperty(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("memory/", seed), func(t *testing.T) {
			if err := runColumnProperty(t, seed, "memory", ""); err != nil {
				t.Fatal(err)
			}
		})
	}
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("postgres/", seed), func(t *testing.T) {
			if err := runColumnProperty(t, seed, "postgres", ""); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, sabotage := range []string{"leak", "noprev"} {
		t.Run("sabotage/"+sabotage, func(t *testing.T) {
			err := runColumnProperty(t, 1, "memory", sabotage)
			if err == nil {
				t.Fatal("the checker did not notice the sabotaged server")
			}
			t.Logf("caught: %v", err)
		})
	}
}

// noPrevFeed is an in-memory feed that does not record previous versions.
type noPrevFeed struct{ *memfeed.Feed }

func (f noPrevFeed) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	cs, err := f.Feed.Tail(ctx, after, limit)
	return dropPrev(cs), err
}

func (f noPrevFeed) Replay(ctx context.Context, q feed.ReplayQuery) ([]feed.Change, error) {
	cs, err := f.Feed.Replay(ctx, q)
	return dropPrev(cs), err
}

func dropPrev(cs []feed.Change) []feed.Change {
	out := slices.Clone(cs) // the feed's changes are shared: never modified
	for i := range out {
		out[i].PrevKnown, out[i].Prev = false, nil
	}
	return out
}

// colCopy is one subscription's (or poller's) copy of the staff rows.
type colCopy struct {
	name string
	user string
	rows map[string]map[string]any // key → the row as received
	// consistent: the copy is the scope's state at one position (it had
	// a caught-up since its snapshot began, or started from a cursor
	// taken before any write): only then does an upsert equal to the row
	// held prove a useless entry.
	consistent bool
}

func runColumnProperty(t *testing.T, seed uint64, backend, sabotage string) error {
	rng := rand.New(rand.NewPCG(seed, 41))
	cfg := core.Config{}
	if sabotage == "noprev" {
		cfg.Feed = noPrevFeed{memfeed.New(memfeed.Options{})}
	}
	policies := staffPolicies()
	if sabotage == "leak" {
		policies["salary"] = func(p authz.Principal, r *staffRow) bool { return isAdmin(p) || r.ID == "k1" }
	}
	s := newStaffServer(t, backend, cfg, policies)
	ctx := context.Background()
	users := []string{"alice", "bob", "root"}
	owners := []string{"alice", "bob", "carol"}

	// What u should hold of r, as JSON, or nil if u may not see r.
	view := func(u string, r staffRow) map[string]any {
		p := staffPrincipalOf(u)
		if !staffFilter(p, &r) {
			return nil
		}
		m := map[string]any{"id": r.ID, "project_id": r.ProjectID, "owner": r.Owner, "private": r.Private, "note": r.Note}
		for col, pol := range staffPolicies() {
			if pol(p, &r) {
				m[col] = map[string]any{"email": r.Email, "salary": float64(r.Salary)}[col]
			}
		}
		return m
	}
	// check checks one entry u received on copy c, and applies it.
	check := func(c *colCopy, en protocol.Entry) error {
		p := staffPrincipalOf(c.user)
		if en.Op == "delete" {
			delete(c.rows, en.Key)
			return nil
		}
		var m map[string]any
		if err := json.Unmarshal(en.Row, &m); err != nil {
			return fmt.Errorf("%s: row %s: %v", c.name, en.Row, err)
		}
		var r staffRow
		r.ID, _ = m["id"].(string)
		r.Owner, _ = m["owner"].(string)
		r.Private, _ = m["private"].(bool)
		if !staffFilter(p, &r) {
			return fmt.Errorf("%s received a row it may not see: %s", c.name, en.Row)
		}
		for col, pol := range staffPolicies() {
			_, has := m[col]
			if want := pol(p, &r); has != want {
				return fmt.Errorf("%s received %s with column %s present %v, want %v", c.name, en.Row, col, has, want)
			}
		}
		if c.consistent && reflect.DeepEqual(c.rows[en.Key], m) {
			return fmt.Errorf("%s received an upsert of %s that changed nothing it may see: %s", c.name, en.Key, en.Row)
		}
		c.rows[en.Key] = m
		return nil
	}
	// checkFrame checks a raw frame u received: no salary, no one else's
	// email, unless u is the admin.
	checkFrame := func(u string, frame []byte) error {
		if u == "root" {
			return nil
		}
		if bytes.Contains(frame, []byte(`"salary"`)) {
			return fmt.Errorf("%s received a salary: %s", u, frame)
		}
		for _, o := range owners {
			if o != u && bytes.Contains(frame, []byte("@"+o+`"`)) {
				return fmt.Errorf("%s received an email of %s: %s", u, o, frame)
			}
		}
		return nil
	}

	conns := map[string]*wsClient{}
	cursors := map[string]string{}             // user → a cursor from before any write
	copies := map[string]map[string]*colCopy{} // user → subscription id → copy
	subscribe := func(u, id, cursor string, consistent bool) {
		copies[u][id] = &colCopy{name: u + "/" + id, user: u, rows: map[string]map[string]any{}, consistent: consistent}
		conns[u].SubscribeFrom(id, "staff", project("p7"), cursor)
	}
	// read reads one frame of u and checks it.
	read := func(u string) error {
		f, data, err := conns[u].ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkFrame(u, data); err != nil {
			return err
		}
		c := copies[u][f.ID]
		switch {
		case c == nil:
			return fmt.Errorf("%s: frame %s", u, data)
		case f.Type == protocol.FrameCaughtUp:
			if !c.consistent && cursors[u] == "" {
				cursors[u] = f.Cursor // live's first: the scope's cursor before any write
			}
			c.consistent = true
		case f.Type == protocol.FrameReset:
			c.rows, c.consistent = map[string]map[string]any{}, false
		case f.Type == protocol.FrameChanges:
			for _, en := range f.Entries {
				if err := check(c, en); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, u := range users {
		conns[u] = dialAt(t, s.url, u, "p7")
		conns[u].hello()
		copies[u] = map[string]*colCopy{}
		subscribe(u, "live", "", false)
		for !copies[u]["live"].consistent {
			if err := read(u); err != nil {
				return err
			}
		}
		conns[u].Probe() // nothing else queued
	}
	// Polls: a snapshot mid-way, the replay at the end.
	polls := map[string]*colCopy{}
	pollCursor := map[string]string{}
	poll := func(u string) error {
		c := polls[u]
		for range 100 {
			out, err := routes.Of(s.e).Poll(ctx, staffPrincipalOf(u), "", protocol.PollRequest{V: 1, Resource: "staff", Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}, Cursor: pollCursor[u]})
			if err != nil {
				t.Fatal(err)
			}
			if err := checkFrame(u, out); err != nil {
				return err
			}
			var f protocol.ServerFrame
			if err := json.Unmarshal(out, &f); err != nil || f.Type != protocol.FrameChanges {
				t.Fatalf("poll: %s (%v)", out, err)
			}
			for _, en := range f.Entries {
				if err := check(c, en); err != nil {
					return err
				}
			}
			if pollCursor[u] = f.Cursor; !f.More {
				c.consistent = true
				return nil
			}
		}
		t.Fatal("a poll did not end in 100 requests")
		return nil
	}

	model := map[string]staffRow{}
	seq := 0
	write := func(r staffRow) {
		t.Helper()
		if err := s.tbl.Upsert(ctx, r); err != nil {
			t.Fatal(err)
		}
		model[r.ID] = r
	}
	randomChange := func() staffRow {
		seq++
		k := fmt.Sprintf("k%d", rng.IntN(6))
		r, ok := model[k]
		if !ok {
			o := owners[rng.IntN(len(owners))]
			return staffRow{ID: k, ProjectID: "p7", Owner: o, Email: fmt.Sprintf("m%d@%s", seq, o), Salary: int64(seq), Note: fmt.Sprint("n", seq)}
		}
		switch rng.IntN(6) {
		case 0:
			r.Owner = owners[rng.IntN(len(owners))]
			r.Email = fmt.Sprintf("m%d@%s", seq, r.Owner)
		case 1:
			r.Private = !r.Private
		case 2:
			r.Email = fmt.Sprintf("m%d@%s", seq, r.Owner)
		case 3:
			r.Salary = int64(seq)
		case 4:
			r.Note = fmt.Sprint("n", seq)
		default: // a write that changes nothing
		}
		return r
	}
	const ops = 120
	for i := range ops {
		if i == ops/2 {
			for _, u := range users {
				subscribe(u, "late", "", false)
				subscribe(u, "resumed", cursors[u], true)
				polls[u] = &colCopy{name: u + "/poll", user: u, rows: map[string]map[string]any{}}
				if err := poll(u); err != nil {
					return err
				}
			}
		}
		if rng.IntN(8) == 0 && len(model) > 0 {
			keys := slices.Sorted(maps.Keys(model))
			k := keys[rng.IntN(len(keys))]
			if err := s.tbl.Delete(ctx, model[k]); err != nil {
				t.Fatal(err)
			}
			delete(model, k)
			continue
		}
		write(randomChange())
	}
	// A sentinel every principal sees, written last: a consistent copy
	// that holds it holds everything before it.
	write(staffRow{ID: "zz", ProjectID: "p7", Owner: "nobody", Email: "x@nobody", Note: "end"})
	for _, u := range users {
		for {
			done := true
			for _, c := range copies[u] {
				done = done && c.consistent && c.rows["zz"] != nil
			}
			if done {
				break
			}
			if err := read(u); err != nil {
				return err
			}
		}
		if err := poll(u); err != nil {
			return err
		}
		want := map[string]map[string]any{}
		for k, r := range model {
			if v := view(u, r); v != nil {
				want[k] = v
			}
		}
		for _, c := range append(slices.Collect(maps.Values(copies[u])), polls[u]) {
			if !reflect.DeepEqual(c.rows, want) {
				return fmt.Errorf("%s holds\n%v\nwant\n%v", c.name, c.rows, want)
			}
		}
	}
	return nil
}
