package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
	routes "github.com/tidesync/tide/internal/transport"
	"github.com/tidesync/tide/middleware"
)

// grantEnv is an engine that takes channel tokens in hello and, on the HTTP
// routes, as a bearer token read by the app's principal hook; its todos
// have the mutators put (upsert, so also a move), remove (delete) and raw
// (SQL on the feed's transaction, Postgres only). The mutators' policy
// reads the principal's claims only, as apps commonly write it: what binds
// a token to its grants is core, not the policy.
type grantEnv struct {
	e     *core.Engine
	kr    *authz.Keyring
	todos *core.Table[todo]
	pool  *pgxpool.Pool // nil on the in-memory feed
	base  string        // http://host
}

func newGrantEnv(t testing.TB, f feed.Feed, pool *pgxpool.Pool) *grantEnv {
	t.Helper()
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Tokens: kr, Feed: f})
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	claimsOnly := func(_ context.Context, p authz.Principal, a addArgs) error {
		return memberOf(context.Background(), p, a)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(core.AddMutator(todos, "put", core.Mutator[addArgs]{
		Authorize: claimsOnly,
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			return todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: a.ProjectID, Title: a.Title})
		},
	}))
	must(core.AddMutator(todos, "remove", core.Mutator[addArgs]{
		Authorize: claimsOnly,
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			return todos.DeleteTx(ctx, tx, todo{ID: a.ID})
		},
	}))
	must(core.AddMutator(todos, "raw", core.Mutator[addArgs]{
		// The policy checks the project of the arguments; the SQL writes
		// whatever row id names, wherever it is.
		Authorize: claimsOnly,
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			pg := pgfeed.TxOf(tx.Feed())
			if pg == nil {
				return errors.New("raw SQL needs the Postgres feed")
			}
			_, err := pg.Exec(ctx, "UPDATE todos SET title = $2 WHERE id = $1", a.ID, a.Title)
			return err
		},
	}))
	if pf, ok := f.(*pgfeed.Feed); ok {
		must(pf.Migrate(context.Background(), e.Schemas()...))
	}
	bearer := func(r *http.Request) (authz.Principal, error) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return authz.Anonymous, nil
		}
		p, _, err := kr.VerifyToken(r.Context(), tok)
		return p, err
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(bearer))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	must(todos.Upsert(context.Background(), todo{ID: "a1", ProjectID: "p1", Title: "of p1"}, todo{ID: "b2", ProjectID: "p2", Title: "of p2"}))
	return &grantEnv{e: e, kr: kr, todos: todos, pool: pool, base: ts.URL}
}

// grantFeeds returns the feeds the grant tests run on.
func grantFeeds(t testing.TB, backend string) (feed.Feed, *pgxpool.Pool) {
	t.Helper()
	if backend == "memory" {
		return memfeed.New(memfeed.Options{}), nil
	}
	pool, name := testenv.PostgresSchema(t)
	if _, err := pool.Exec(context.Background(), "CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL, done boolean NOT NULL DEFAULT false)"); err != nil {
		t.Fatal(err)
	}
	return newPgFeed(t, pool, name, pgfeed.Options{}), pool
}

// token mints a token for alice, member of p1 and p2 by her claims,
// restricted to the projects given (none: unrestricted).
func (g *grantEnv) token(t *testing.T, projects ...string) string {
	t.Helper()
	p := alice("p1", "p2")
	if len(projects) > 0 {
		p.Grants = []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": projects}}}
	}
	tok, _, err := g.kr.Mint(p, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// transport sends one mutate frame with a token and returns the answer.
type transport func(t *testing.T, g *grantEnv, tok string, frame map[string]any) protocol.ServerFrame

var transports = map[string]transport{
	"websocket": func(t *testing.T, g *grantEnv, tok string, frame map[string]any) protocol.ServerFrame {
		t.Helper()
		c := tidetest.Dial(t, "ws"+strings.TrimPrefix(g.base, "http")+"/tide/ws")
		defer c.Close()
		c.Hello(protocol.ClientFrame{Token: tok, Origin: "dev1"})
		c.Send(frame)
		return c.Next()
	},
	"http": func(t *testing.T, g *grantEnv, tok string, frame map[string]any) protocol.ServerFrame {
		t.Helper()
		body, _ := json.Marshal(frame)
		req, _ := http.NewRequest(http.MethodPost, g.base+"/tide/mutate", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set(middleware.ClientOriginHeader, "dev1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		var f protocol.ServerFrame
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("%d %s: %v", res.StatusCode, data, err)
		}
		if f.Type == protocol.FrameReject && res.StatusCode != http.StatusForbidden && f.Code == protocol.CodeForbidden {
			t.Fatalf("a forbidden reject answered %d", res.StatusCode)
		}
		return f
	},
}

// rows returns the todos of each project as "id=title" sorted, read by an
// unrestricted principal through Poll.
func (g *grantEnv) rows(t *testing.T) string {
	t.Helper()
	return strings.Join(g.allRows(t, []string{"p1", "p2"}), " ")
}

// allRows returns the todos of the given projects as "project/id=title",
// sorted.
func (g *grantEnv) allRows(t *testing.T, projects []string) []string {
	t.Helper()
	var out []string
	for _, pr := range projects {
		rows := map[string]string{}
		cursor := ""
		for i := 0; ; i++ {
			raw, err := routes.Of(g.e).Poll(context.Background(), alice(projects...), "", protocol.PollRequest{V: 1, Resource: "todos",
				Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"` + pr + `"`)}, Cursor: cursor, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			var f protocol.ServerFrame
			if err := json.Unmarshal(raw, &f); err != nil || f.Type != protocol.FrameChanges || i == 20 {
				t.Fatalf("poll %s: %v %s", pr, err, raw)
			}
			for _, en := range f.Entries {
				var row struct{ Title string }
				_ = json.Unmarshal(en.Row, &row)
				if en.Op == "delete" {
					delete(rows, en.Key)
				} else {
					rows[en.Key] = row.Title
				}
			}
			if !f.More {
				break
			}
			cursor = f.Cursor
		}
		for k, v := range rows {
			out = append(out, pr+"/"+k+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

const seededRows = "p1/a1=of p1 p2/b2=of p2"

// TestMutateInsideGrants: a principal whose token grants project p2 commits
// only writes inside p2, over the WebSocket and over HTTP, on the in-memory
// and the Postgres feed, whatever the mutator's policy (which reads the
// claims, and so allows p1 too) says: an upsert into p1, the delete of a
// p1 row, a move between p1 and p2 either way, and on Postgres an UPDATE
// in raw SQL of a p1 row are refused forbidden with nothing committed; the
// same writes inside p2 are acknowledged.
func TestMutateInsideGrants(t *testing.T) {
	for _, backend := range []string{"memory", "postgres"} {
		for tname, send := range transports {
			t.Run(backend+"/"+tname, func(t *testing.T) {
				f, pool := grantFeeds(t, backend)
				g := newGrantEnv(t, f, pool)
				share := g.token(t, "p2")
				cases := []struct {
					name, mutator string
					args          addArgs
					ok            bool
					pgOnly        bool
				}{
					{"upsert outside", "put", addArgs{ID: "x1", ProjectID: "p1", Title: "smuggled"}, false, false},
					{"delete outside", "remove", addArgs{ID: "a1", ProjectID: "p2"}, false, false},
					{"move out of the grant", "put", addArgs{ID: "b2", ProjectID: "p1", Title: "moved"}, false, false},
					{"move into the grant", "put", addArgs{ID: "a1", ProjectID: "p2", Title: "taken"}, false, false},
					{"raw SQL outside", "raw", addArgs{ID: "a1", ProjectID: "p2", Title: "raw"}, false, true},
					{"upsert inside", "put", addArgs{ID: "x2", ProjectID: "p2", Title: "fine"}, true, false},
					{"raw SQL inside", "raw", addArgs{ID: "b2", ProjectID: "p2", Title: "raw ok"}, true, true},
				}
				want := seededRows
				for i, tc := range cases {
					if tc.pgOnly && pool == nil {
						continue
					}
					got := send(t, g, share, mutateFrame(fmt.Sprintf("k%d", i), tc.mutator, tc.args, time.Now()))
					switch {
					case tc.ok && got.Type != protocol.FrameAck:
						t.Fatalf("%s: got %+v, want an ack", tc.name, got)
					case !tc.ok && (got.Type != protocol.FrameReject || got.Code != protocol.CodeForbidden || !strings.Contains(got.Detail, string(authz.CodeScopeNotAllowed))):
						t.Fatalf("%s: got %+v, want reject forbidden (scope_not_allowed)", tc.name, got)
					}
					if tc.ok {
						switch tc.mutator {
						case "put":
							want = "p1/a1=of p1 p2/b2=of p2 p2/x2=fine"
						case "raw":
							want = "p1/a1=of p1 p2/b2=raw ok p2/x2=fine"
						}
					}
					if rows := g.rows(t); rows != want {
						t.Fatalf("%s: rows %q, want %q", tc.name, rows, want)
					}
				}
			})
		}
	}
}

// TestRefusedMutationKeyNotRecorded: a mutation refused for its grants
// records no idempotency key: sent again with the same key once the
// principal's token allows the scope, it runs (acknowledged, not a replay).
func TestRefusedMutationKeyNotRecorded(t *testing.T) {
	for _, backend := range []string{"memory", "postgres"} {
		for tname, send := range transports {
			t.Run(backend+"/"+tname, func(t *testing.T) {
				f, pool := grantFeeds(t, backend)
				g := newGrantEnv(t, f, pool)
				frame := mutateFrame("same-key", "put", addArgs{ID: "x1", ProjectID: "p1", Title: "later"}, time.Now())
				if got := send(t, g, g.token(t, "p2"), frame); got.Type != protocol.FrameReject || got.Code != protocol.CodeForbidden {
					t.Fatalf("with a p2 grant: %+v", got)
				}
				got := send(t, g, g.token(t, "p1", "p2"), frame)
				if got.Type != protocol.FrameAck || got.Replayed {
					t.Fatalf("resent with a p1 grant: %+v", got)
				}
				if rows := g.rows(t); rows != "p1/a1=of p1 p1/x1=later p2/b2=of p2" {
					t.Fatalf("rows %q", rows)
				}
			})
		}
	}
}

// opaqueFeed is the in-memory feed behind a transaction that cannot list
// its writes, as a third-party feed may be.
type opaqueFeed struct{ *memfeed.Feed }

type opaqueTx struct{ tx feed.Tx }

func (o opaqueTx) Apply(ctx context.Context, muts ...feed.Mutation) error {
	return o.tx.Apply(ctx, muts...)
}

func (f opaqueFeed) Transact(ctx context.Context, id feed.MutationID, fn func(context.Context, feed.Tx) ([]byte, error)) ([]byte, bool, error) {
	return f.Feed.Transact(ctx, id, func(ctx context.Context, tx feed.Tx) ([]byte, error) { return fn(ctx, opaqueTx{tx}) })
}

// TestMutateGrantsFailClosed: on a feed whose transactions cannot list
// their writes, a principal with grants may not mutate at all (forbidden),
// even inside its grants; one without grants mutates as before.
func TestMutateGrantsFailClosed(t *testing.T) {
	g := newGrantEnv(t, opaqueFeed{memfeed.New(memfeed.Options{})}, nil)
	send := transports["websocket"]
	if got := send(t, g, g.token(t, "p2"), mutateFrame("k1", "put", addArgs{ID: "x2", ProjectID: "p2", Title: "inside"}, time.Now())); got.Type != protocol.FrameReject || got.Code != protocol.CodeForbidden {
		t.Fatalf("with grants: %+v", got)
	}
	if got := send(t, g, g.token(t), mutateFrame("k2", "put", addArgs{ID: "x2", ProjectID: "p2", Title: "inside"}, time.Now())); got.Type != protocol.FrameAck {
		t.Fatalf("without grants: %+v", got)
	}
}

// TestPollInsideGrants: POST /tide/changes with a token granting p2 polls
// p2, and is refused 403 forbidden (scope_not_allowed) for p1, although the
// token's claims would let the resource's policy allow it.
func TestPollInsideGrants(t *testing.T) {
	g := newGrantEnv(t, memfeed.New(memfeed.Options{}), nil)
	share := g.token(t, "p2")
	for _, tc := range []struct {
		project string
		status  int
	}{{"p2", http.StatusOK}, {"p1", http.StatusForbidden}} {
		body := `{"v":1,"resource":"todos","conditions":{"project_id":"` + tc.project + `"}}`
		req, _ := http.NewRequest(http.MethodPost, g.base+"/tide/changes", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+share)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Fatalf("poll %s: %d %s", tc.project, res.StatusCode, data)
		}
		if tc.status == http.StatusForbidden && !strings.Contains(string(data), string(authz.CodeScopeNotAllowed)) {
			t.Fatalf("poll %s: %s", tc.project, data)
		}
	}
}

// TestMutateGrantsProperty: seeded, randomized, on the in-memory feed. A
// principal granted a random subset of four projects, whose claims allow
// all of them, runs random puts (inserts, updates, moves) and removes:
// each is acknowledged exactly when every change it writes is inside the
// grant (a move: both its old and its new project), and the rows after
// each step are exactly those of a model that applies only the
// acknowledged ones.
func TestMutateGrantsProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 29))
	all := []string{"p1", "p2", "p3", "p4"}
	for round := range 8 {
		g := newGrantEnv(t, memfeed.New(memfeed.Options{}), nil)
		model := map[string]string{"a1": "p1", "b2": "p2"} // id → project
		var granted []string
		for _, pr := range all {
			if rng.IntN(2) == 0 {
				granted = append(granted, pr)
			}
		}
		p := alice(all...)
		if len(granted) > 0 {
			p.Grants = []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": granted}}}
		}
		inside := func(pr string) bool { return len(granted) == 0 || slices.Contains(granted, pr) }
		for step := range 40 {
			id := []string{"a1", "b2", "c3", "d4"}[rng.IntN(4)]
			to := all[rng.IntN(len(all))]
			name, want := "put", true
			old, exists := model[id]
			if rng.IntN(3) == 0 {
				name = "remove"
				want = !exists || inside(old)
			} else {
				want = inside(to) && (!exists || old == to || inside(old))
			}
			args, _ := json.Marshal(addArgs{ID: id, ProjectID: to, Title: fmt.Sprintf("s%d", step)})
			frame, rej := routes.Of(g.e).Mutate(context.Background(), p, "dev", protocol.ClientFrame{V: 1, Type: protocol.FrameMutate,
				Key: fmt.Sprintf("r%d-%d", round, step), Seq: int64(step + 1), Resource: "todos", Name: name, Args: args, At: time.Now().UnixMilli()})
			if got := rej == nil; got != want {
				t.Fatalf("round %d step %d (seed %d): %s %s to %s (was %q) with grants %v: acknowledged %v, want %v: %s",
					round, step, seed, name, id, to, old, granted, got, want, frame)
			}
			if rej != nil && rej.Code != protocol.CodeForbidden {
				t.Fatalf("round %d step %d (seed %d): reject %s", round, step, seed, rej.Code)
			}
			if rej == nil {
				if name == "remove" {
					delete(model, id)
				} else {
					model[id] = to
				}
			}
		}
		var want []string
		for id, pr := range model {
			want = append(want, pr+"/"+id)
		}
		slices.Sort(want)
		var got []string
		for _, r := range g.allRows(t, all) {
			got = append(got, r[:strings.Index(r, "=")])
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("round %d (seed %d): rows %v, model %v", round, seed, got, want)
		}
	}
}

// BenchmarkMutateGrants: a mutation on Postgres, run through the POST
// route's entry point (internal/transport), for a principal without
// grants (no check) and one with grants (its writes listed from the change
// log and checked).
func BenchmarkMutateGrants(b *testing.B) {
	for _, name := range []string{"no grants", "grants"} {
		b.Run(name, func(b *testing.B) {
			f, pool := grantFeeds(b, "postgres")
			g := newGrantEnv(b, f, pool)
			p := alice("p1", "p2")
			if name == "grants" {
				p.Grants = []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": {"p2"}}}}
			}
			b.ResetTimer()
			for i := range b.N {
				args, _ := json.Marshal(addArgs{ID: fmt.Sprintf("x%d", i%100), ProjectID: "p2", Title: "t"})
				if _, rej := routes.Of(g.e).Mutate(context.Background(), p, "dev", protocol.ClientFrame{V: 1, Type: protocol.FrameMutate,
					Key: fmt.Sprintf("b%d", i), Seq: int64(i + 1), Resource: "todos", Name: "put", Args: args, At: time.Now().UnixMilli()}); rej != nil {
					b.Fatal(rej)
				}
			}
		})
	}
}
