package core_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
	routes "github.com/tidesync/tide/internal/transport"
	"github.com/tidesync/tide/middleware"
)

// TestHiddenKeysProperty: with a row filter and random owner, privacy and
// scope changes, no subscriber ever receives an entry (upsert or delete)
// for a key whose versions were all invisible to it, whether it is live
// from the start, catches up mid-way (snapshot, then replay) or resumes
// from a cursor (replay); and every copy converges to the rows it may see.
// No cursor it is handed, on the WebSocket or by a poll paging a snapshot a
// row at a time, holds such a key either (decoded any way).
// Keys "h…" are private to mallory throughout; the others change at random.
// It holds as well with a feed that records, of each previous version, only
// the columns the filter declares (FilterColumns), and on the Postgres feed,
// whose capture records the previous versions, with and without them.
func TestHiddenKeysProperty(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { testHiddenKeys(t, seed, "memory", false) })
		t.Run(fmt.Sprint(seed, "/filter columns"), func(t *testing.T) { testHiddenKeys(t, seed, "memory", true) })
	}
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("postgres/", seed), func(t *testing.T) { testHiddenKeys(t, seed, "postgres", false) })
		t.Run(fmt.Sprint("postgres/", seed, "/filter columns"), func(t *testing.T) { testHiddenKeys(t, seed, "postgres", true) })
	}
}

// prevColumnsFeed is an in-memory feed that keeps, of each previous
// version, only the columns the filter reads, as a feed may.
type prevColumnsFeed struct {
	*memfeed.Feed
	keep []string
}

func (f prevColumnsFeed) Tail(ctx context.Context, after feed.Position, limit int) ([]feed.Change, error) {
	cs, err := f.Feed.Tail(ctx, after, limit)
	return f.project(cs), err
}

func (f prevColumnsFeed) Replay(ctx context.Context, q feed.ReplayQuery) ([]feed.Change, error) {
	cs, err := f.Feed.Replay(ctx, q)
	return f.project(cs), err
}

func (f prevColumnsFeed) project(cs []feed.Change) []feed.Change {
	out := slices.Clone(cs) // the feed's changes are shared: never modified
	for i := range out {
		if len(out[i].Prev) == 0 {
			continue
		}
		var all map[string]json.RawMessage
		if err := json.Unmarshal(out[i].Prev, &all); err != nil {
			panic(err)
		}
		kept := map[string]json.RawMessage{}
		for _, k := range f.keep {
			kept[k] = all[k]
		}
		out[i].Prev, _ = json.Marshal(kept)
	}
	return out
}

func testHiddenKeys(t *testing.T, seed uint64, backend string, narrow bool) {
	rng := rand.New(rand.NewPCG(seed, 16))
	cfg := core.Config{}
	var filterCols []string
	if narrow {
		filterCols = []string{"owner", "private"}
		if backend == "memory" {
			cfg.Feed = prevColumnsFeed{Feed: memfeed.New(memfeed.Options{}), keep: filterCols}
		}
	}
	var pf *pgfeed.Feed
	if backend == "postgres" {
		pool, name := testenv.PostgresSchema(t)
		if _, err := pool.Exec(context.Background(), "CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, owner text NOT NULL, private boolean NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		pf = newPgFeed(t, pool, name, pgfeed.Options{})
		cfg.Feed = pf
	}
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	visible := func(p string, r ownTodo) bool { return !r.Private || r.Owner == p }
	tbl, err := core.Register(e, core.Resource[ownTodo]{Table: "todos", Authorize: projects,
		Filter: func(p authz.Principal, r *ownTodo) bool { return visible(p.ID, *r) }, FilterColumns: filterCols})
	if err != nil {
		t.Fatal(err)
	}
	if pf != nil {
		if err := pf.Migrate(context.Background(), e.Schemas()...); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		ts.Close()
	})
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
	ctx := context.Background()

	type sub struct {
		user     string
		id       string
		projects []string
		conn     *wsClient
		cursor   string
		rows     map[string]ownTodo
		// consistent: the copy has had a caught-up since its last
		// snapshot began. Only then is it the scope's state at one
		// position: the pages of a snapshot are read at successive
		// positions, and the replay that follows brings the earlier
		// ones up to date.
		consistent bool
	}
	conds := func(ps []string) map[string]any {
		if len(ps) == 1 {
			return project(ps[0])
		}
		return map[string]any{"project_id": map[string]any{"in": ps}}
	}
	users := []string{"alice", "bob", "carol"}
	var subs []*sub
	conns := map[string]*wsClient{}
	for _, u := range users {
		c := dialAt(t, url, u, "p7", "p8")
		c.hello()
		conns[u] = c
	}
	// startPaged is start with catch-up pages of limit entries.
	startPaged := func(u, id string, ps []string, cursor string, limit int) *sub {
		s := &sub{user: u, id: id, projects: ps, conn: conns[u], rows: map[string]ownTodo{}}
		f := protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameSubscribe, ID: id, Resource: "todos", Cursor: cursor, Limit: limit,
			Conditions: map[string]json.RawMessage{}}
		for k, v := range conds(ps) {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			f.Conditions[k] = b
		}
		s.conn.Send(f)
		subs = append(subs, s)
		return s
	}
	start := func(u, id string, ps []string, cursor string) *sub { return startPaged(u, id, ps, cursor, 0) }
	// everVisible[user][key]: some version of key, in the user's scope, was
	// visible to the user. Scopes here are p7 or p7+p8, tracked per project.
	everVisible := map[string]map[string]bool{} // user/project → keys
	model := map[string]ownTodo{}
	written := map[string]bool{} // every key written
	write := func(r ownTodo) {
		t.Helper()
		if err := tbl.Upsert(ctx, r); err != nil {
			t.Fatal(err)
		}
		model[r.ID], written[r.ID] = r, true
		for _, u := range users {
			if visible(u, r) {
				k := u + "/" + r.ProjectID
				if everVisible[k] == nil {
					everVisible[k] = map[string]bool{}
				}
				everVisible[k][r.ID] = true
			}
		}
	}
	for _, u := range users {
		start(u, "live", []string{"p7"}, "")
		start(u, "both", []string{"p7", "p8"}, "")
	}
	// A cursor from before any write, to resume from later.
	for _, u := range users {
		for range 2 {
			f := conns[u].Expect(protocol.FrameCaughtUp)
			for _, s := range subs {
				if s.user == u && s.id == f.ID {
					s.cursor, s.consistent = f.Cursor, true
				}
			}
		}
	}
	randomRow := func() ownTodo {
		var r ownTodo
		if rng.IntN(4) == 0 {
			r = ownTodo{ID: fmt.Sprintf("h%d", rng.IntN(4)), Owner: "mallory", Private: true}
		} else {
			r = ownTodo{ID: fmt.Sprintf("k%d", rng.IntN(8)), Owner: users[rng.IntN(len(users))], Private: rng.IntN(2) == 0}
		}
		r.ProjectID = []string{"p7", "p8"}[rng.IntN(2)]
		return r
	}
	// checkCursor fails the test if cursor, handed to u for a scope of
	// projects ps, holds a key none of whose versions u could see there.
	checkCursor := func(u string, ps []string, cursor string) {
		t.Helper()
		for _, part := range strings.Split(cursor, ".") {
			for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
				b, err := enc.DecodeString(part)
				if err != nil {
					continue
				}
				_, key, _ := strings.Cut(string(b), "\x00") // a subscription of several resources: after the name
				for _, k := range []string{string(b), key} {
					seen := false
					for _, p := range ps {
						seen = seen || everVisible[u+"/"+p][k]
					}
					if written[k] && !seen {
						t.Fatalf("%s was handed cursor %q for %v, holding %q, whose versions were all invisible to it", u, cursor, ps, k)
					}
				}
			}
		}
	}
	// pollSnapshot pages u's snapshot of p7 a row at a time, as a poller.
	pollSnapshot := func(u string) {
		t.Helper()
		p := authz.Principal{ID: u, Claims: map[string]any{"projects": []string{"p7", "p8"}}}
		cursor := ""
		for range 1000 {
			out, err := routes.Of(e).Poll(ctx, p, "", protocol.PollRequest{V: 1, Resource: "todos", Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}, Cursor: cursor, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			var f protocol.ServerFrame
			if err := json.Unmarshal(out, &f); err != nil || f.Type != protocol.FrameChanges {
				t.Fatalf("poll of %s: %s (%v)", u, out, err)
			}
			checkCursor(u, []string{"p7"}, f.Cursor)
			if cursor = f.Cursor; !f.More || !strings.Contains(cursor, "s.") {
				return // the snapshot is over: what follows is replay
			}
		}
		t.Fatalf("the snapshot of %s did not end in 1000 polls", u)
	}
	const ops = 300
	for i := range ops {
		if i == ops/2 {
			for _, u := range users {
				start(u, "late", []string{"p7"}, "")
				// A snapshot of both projects in pages of two rows.
				startPaged(u, "paged", []string{"p7", "p8"}, "", 2)
				start(u, "resumed", []string{"p7"}, subs[slices.IndexFunc(subs, func(s *sub) bool { return s.user == u && s.id == "live" })].cursor)
				pollSnapshot(u)
			}
		}
		if rng.IntN(5) == 0 && len(model) > 0 {
			keys := make([]string, 0, len(model))
			for k := range model {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			k := keys[rng.IntN(len(keys))]
			if err := tbl.Delete(ctx, model[k]); err != nil {
				t.Fatal(err)
			}
			delete(model, k)
			continue
		}
		write(randomRow())
	}
	// Sentinels, visible to all, written last: once a subscription's copy
	// is consistent and has them, it has everything before them. A
	// snapshot page may hold them before the replay of what changed while
	// the earlier pages were read (a snapshot of several pages), so
	// holding them proves nothing before caught-up.
	write(ownTodo{ID: "zz7", ProjectID: "p7", Owner: "x"})
	write(ownTodo{ID: "zz8", ProjectID: "p8", Owner: "x"})

	for _, u := range users {
		c := conns[u]
		byID := map[string]*sub{}
		for _, s := range subs {
			if s.user == u {
				byID[s.id] = s
			}
		}
		done := func() bool {
			for _, s := range byID {
				if !s.consistent {
					return false
				}
				for _, p := range s.projects {
					if _, ok := s.rows["zz"+p[1:]]; !ok {
						return false
					}
				}
			}
			return true
		}
		for !done() {
			f := c.Next()
			if s := byID[f.ID]; s != nil && f.Cursor != "" {
				checkCursor(u, s.projects, f.Cursor)
			}
			switch s := byID[f.ID]; {
			case s == nil:
			case f.Type == protocol.FrameCaughtUp:
				s.consistent = true
			case f.Type == protocol.FrameReset:
				// A snapshot follows: the client drops its copy.
				s.rows, s.consistent = map[string]ownTodo{}, false
			}
			if f.Type != protocol.FrameChanges {
				continue
			}
			s := byID[f.ID]
			for _, en := range f.Entries {
				seen := false
				for _, p := range s.projects {
					seen = seen || everVisible[u+"/"+p][en.Key]
				}
				if !seen {
					t.Fatalf("%s/%s received %s of %s, whose versions were all invisible to it", u, s.id, en.Op, en.Key)
				}
				if en.Op == "delete" {
					delete(s.rows, en.Key)
					continue
				}
				var w struct {
					ID        string `json:"id"`
					ProjectID string `json:"project_id"`
					Owner     string `json:"owner"`
					Private   bool   `json:"private"`
				}
				if err := json.Unmarshal(en.Row, &w); err != nil {
					t.Fatal(err)
				}
				r := ownTodo(w)
				if !visible(u, r) {
					t.Fatalf("%s/%s received a row it may not see: %s", u, s.id, en.Row)
				}
				s.rows[en.Key] = r
			}
		}
		for _, s := range byID {
			want := map[string]ownTodo{}
			for k, r := range model {
				if slices.Contains(s.projects, r.ProjectID) && visible(u, r) {
					want[k] = r
				}
			}
			if fmt.Sprint(want) != fmt.Sprint(s.rows) {
				t.Fatalf("%s/%s holds %v, want %v", u, s.id, s.rows, want)
			}
		}
	}
}
