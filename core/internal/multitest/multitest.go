// Package multitest is a randomized end-to-end check of subscriptions of
// several resources, run on every feed: writers commit transactions that
// write two or three resources of one project at once (todos, comments,
// attachments, with moves between projects and a row filter), while
// clients follow a project's three resources with one subscription,
// reconnecting at random, some over the polling route. After every batch a
// client applies, its copy must be the feed's state at the batch's cursor
// (no gap, nothing extra) and that cursor must not fall inside a
// transaction (no client ever holds part of one); at the end every copy
// equals the database's rows.
package multitest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/transport"
	"github.com/tidesync/tide/middleware"
)

// Todo, Comment and Attachment are the three resources of a project. Every
// row carries the writer's transaction id (Tx), so the check can tell which
// rows one transaction wrote. Comments have another scope column before
// project_id, so the shared condition column sits at a different index.
type Todo struct {
	ID        string `tide:"id,pk" json:"id"`
	ProjectID string `tide:"project_id,scope" json:"project_id"`
	Title     string `tide:"title" json:"title"`
	Tx        string `tide:"tx" json:"tx"`
}

// Comment is a comment on a todo.
type Comment struct {
	ID        string `tide:"id,pk" json:"id"`
	Author    string `tide:"author,scope" json:"author"`
	ProjectID string `tide:"project_id,scope" json:"project_id"`
	TodoID    string `tide:"todo_id" json:"todo_id"`
	Tx        string `tide:"tx" json:"tx"`
}

// Attachment is a file on a todo; a secret one is hidden by a row filter.
type Attachment struct {
	ID        string `tide:"id,pk" json:"id"`
	ProjectID string `tide:"project_id,scope" json:"project_id"`
	TodoID    string `tide:"todo_id" json:"todo_id"`
	Secret    bool   `tide:"secret" json:"secret"`
	Tx        string `tide:"tx" json:"tx"`
}

// DDL creates the resources' tables on Postgres.
const DDL = `CREATE TABLE mt_todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL, tx text NOT NULL);
CREATE TABLE mt_comments (id text PRIMARY KEY, author text NOT NULL, project_id text NOT NULL, todo_id text NOT NULL, tx text NOT NULL);
CREATE TABLE mt_attachments (id text PRIMARY KEY, project_id text NOT NULL, todo_id text NOT NULL, secret boolean NOT NULL, tx text NOT NULL)`

// Resources are the names of the three resources.
var Resources = []string{"attachments", "comments", "todos"}

// Options size a run. Zero values take the defaults in brackets.
type Options struct {
	Writers int // concurrent writers [3]
	Txs     int // transactions per writer [60]
	Clients int // socket clients [4]
	Pollers int // polling clients [1]
	Seed    uint64
}

// Env is what a feed needs to run the check.
type Env struct {
	Feed feed.Feed
	// Config configures the engine; its Feed is set to Feed.
	Config core.Config
	// Prepare runs once the resources are registered: create the tables,
	// migrate. Optional.
	Prepare func(t testing.TB, e *core.Engine)
}

// tables are the registered resources.
type tables struct {
	todos       *core.Table[Todo]
	comments    *core.Table[Comment]
	attachments *core.Table[Attachment]
}

// writeArgs is one transaction.
type writeArgs struct {
	Todos       []Todo       `json:"todos"`
	Comments    []Comment    `json:"comments"`
	Attachments []Attachment `json:"attachments"`
	DelComments []Comment    `json:"del_comments"`
}

func projectPolicy(_ context.Context, r authz.Request) error {
	want := r.Conditions["project_id"]
	if len(want) == 0 {
		return authz.ErrForbidden
	}
	for _, p := range want {
		if !slices.Contains(r.Principal.Strings("projects"), p) {
			return authz.ErrForbidden
		}
	}
	return nil
}

// NewEngine starts an engine on f with the three resources, served on
// loopback, and returns it, its WebSocket URL and the tables.
func NewEngine(t testing.TB, env Env) (*core.Engine, string) {
	e, url, _ := newEngine(t, env)
	return e, url
}

func newEngine(t testing.TB, env Env) (*core.Engine, string, tables) {
	t.Helper()
	cfg := env.Config
	cfg.Feed = env.Feed
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var tb tables
	if tb.todos, err = core.Register(e, core.Resource[Todo]{Name: "todos", Table: "mt_todos", Authorize: projectPolicy}); err != nil {
		t.Fatal(err)
	}
	if tb.comments, err = core.Register(e, core.Resource[Comment]{Name: "comments", Table: "mt_comments", Authorize: projectPolicy}); err != nil {
		t.Fatal(err)
	}
	if tb.attachments, err = core.Register(e, core.Resource[Attachment]{
		Name: "attachments", Table: "mt_attachments", Authorize: projectPolicy,
		Filter: func(_ authz.Principal, a *Attachment) bool { return !a.Secret },
	}); err != nil {
		t.Fatal(err)
	}
	err = core.AddMutator(tb.todos, "write", core.Mutator[writeArgs]{
		Authorize: func(context.Context, authz.Principal, writeArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a writeArgs) error {
			if err := tb.todos.UpsertTx(ctx, tx, a.Todos...); err != nil {
				return err
			}
			if err := tb.comments.UpsertTx(ctx, tx, a.Comments...); err != nil {
				return err
			}
			if err := tb.attachments.UpsertTx(ctx, tx, a.Attachments...); err != nil {
				return err
			}
			return tb.comments.DeleteTx(ctx, tx, a.DelComments...)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if env.Prepare != nil {
		env.Prepare(t, e)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(principalOf))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
	})
	return e, "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws", tb
}

// principalOf reads the principal from X-Projects, standing in for a
// session.
func principalOf(r *http.Request) (authz.Principal, error) {
	return Principal(strings.Split(r.Header.Get("X-Projects"), ",")...), nil
}

// Principal is a user who may see the projects.
func Principal(projects ...string) authz.Principal {
	return authz.Principal{ID: "u", Claims: map[string]any{"projects": projects}}
}

const debug = false

var projects = []string{"p1", "p2"}

// observation is a client's copy right after it applied a batch at a
// change cursor.
type observation struct {
	client  string
	project string
	pos     feed.Position
	state   string
}

// Run runs the check on env.
func Run(t *testing.T, env Env, o Options) {
	if o.Writers == 0 {
		o.Writers = 3
	}
	if o.Txs == 0 {
		o.Txs = 60
	}
	if o.Clients == 0 {
		o.Clients = 4
	}
	if o.Pollers == 0 {
		o.Pollers = 1
	}
	e, url, _ := newEngine(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var (
		mu   sync.Mutex
		seen []observation
	)
	observe := func(ob observation) {
		mu.Lock()
		seen = append(seen, ob)
		mu.Unlock()
	}

	writing := make(chan struct{})
	var wg sync.WaitGroup
	var clients []*client
	for i := range o.Clients + o.Pollers {
		c := &client{
			name: fmt.Sprintf("c%d", i), project: projects[i%len(projects)], url: url, e: e,
			rng: rand.New(rand.NewPCG(o.Seed, uint64(i)+100)), observe: observe, poll: i >= o.Clients,
		}
		clients = append(clients, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(ctx, t, writing)
		}()
	}
	var wwg sync.WaitGroup
	for w := range o.Writers {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			write(ctx, t, e, w, o.Txs, rand.New(rand.NewPCG(o.Seed, uint64(w))))
		}()
	}
	wwg.Wait()
	head, err := env.Feed.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	close(writing) // clients now catch up to head and stop
	wg.Wait()
	if t.Failed() {
		return
	}

	// The feed's log of each project, in position order, and the check of
	// every observation against it.
	for _, p := range projects {
		log := projectLog(ctx, t, e, env.Feed, p, head)
		var obs []observation
		for _, ob := range seen {
			if ob.project == p {
				obs = append(obs, ob)
			}
		}
		checkObservations(t, p, log, obs)
		want := foldString(log, head)
		for _, c := range clients {
			if c.project == p && c.final != want {
				t.Errorf("%s (%s) did not converge:\n got %s\nwant %s", c.name, p, c.final, want)
			}
		}
	}
	n := 0
	for _, c := range clients {
		n += c.reconnects
	}
	t.Logf("%d transactions, %d observations checked, %d reconnects", o.Writers*o.Txs, len(seen), n)
}

// write commits n random transactions, each writing two or three resources
// of one project: a todo, comments on it, sometimes an attachment (some
// secret), sometimes moving the todo to the other project, sometimes
// deleting a comment.
func write(ctx context.Context, t *testing.T, e *core.Engine, w, n int, rng *rand.Rand) {
	for i := range n {
		txID := fmt.Sprintf("w%d-%d", w, i)
		p := projects[rng.IntN(len(projects))]
		todo := fmt.Sprintf("t%d", rng.IntN(6))
		a := writeArgs{Todos: []Todo{{ID: todo, ProjectID: p, Title: txID, Tx: txID}}}
		for k := range 1 + rng.IntN(2) {
			a.Comments = append(a.Comments, Comment{ID: fmt.Sprintf("c%d-%d", rng.IntN(8), k), Author: "a", ProjectID: p, TodoID: todo, Tx: txID})
		}
		if rng.IntN(2) == 0 {
			a.Attachments = []Attachment{{ID: fmt.Sprintf("a%d", rng.IntN(4)), ProjectID: p, TodoID: todo, Secret: rng.IntN(4) == 0, Tx: txID}}
		}
		if rng.IntN(5) == 0 {
			a.DelComments = []Comment{{ID: fmt.Sprintf("c%d-0", rng.IntN(8))}}
		}
		args, _ := json.Marshal(a)
		// Writers touch the same rows in any order: Postgres may end one
		// of two deadlocked transactions, which rolls back and is
		// answered unavailable (nothing applied); write it again. Any
		// other refusal fails the test.
		for attempt := 0; ; attempt++ {
			f := protocol.ClientFrame{V: 1, Type: protocol.FrameMutate, Key: fmt.Sprintf("%s.%d", txID, attempt), Resource: "todos", Name: "write", Args: args, At: time.Now().UnixMilli()}
			_, err := transport.Of(e).Mutate(ctx, Principal(projects...), "w", f)
			if err == nil {
				break
			}
			if err.Code != protocol.CodeUnavailable || attempt == 5 {
				t.Errorf("write %s: %v", txID, err)
				return
			}
		}
	}
}

// client follows one project's three resources with one subscription.
type client struct {
	name, project, url string
	e                  *core.Engine
	rng                *rand.Rand
	observe            func(observation)
	poll               bool

	rows   map[string]json.RawMessage // "resource/key" → row
	cursor string
	// clean: the copy is the feed's state at cursor (false from a
	// snapshot's first page to the end of the replay that follows it).
	clean      bool
	final      string
	reconnects int
}

func (c *client) conditions() map[string]any { return map[string]any{"project_id": c.project} }

func (c *client) run(ctx context.Context, t *testing.T, writing <-chan struct{}) {
	c.rows = map[string]json.RawMessage{}
	for ctx.Err() == nil {
		done := false
		select {
		case <-writing:
			done = true
		default:
		}
		var caught bool
		if c.poll {
			caught = c.pollRound(ctx, t, done)
		} else {
			caught = c.socketRound(t, done, writing)
		}
		if t.Failed() {
			return
		}
		if done && caught {
			c.final = stateString(c.rows)
			return
		}
		c.reconnects++
	}
}

// socketRound connects, subscribes from the stored cursor and applies
// frames: until a random number of frames while writers run (then it drops
// the connection), or until caught up once writing is done.
func (c *client) socketRound(t *testing.T, done bool, writing <-chan struct{}) bool {
	conn := tidetest.Dial(t, c.url, tidetest.WithHeader("X-Projects", c.project), tidetest.WithTimeout(time.Minute))
	defer conn.Close()
	conn.Hello(protocol.ClientFrame{})
	limit := []int{0, 1, 2, 3}[c.rng.IntN(4)]
	conn.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "s", Resources: Resources, Conditions: raw(c.conditions()), Cursor: c.cursor, Limit: limit})
	if !done {
		// Once writers stop, a round waiting for more frames would wait
		// forever: drop it, and the next round catches up.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-writing:
				conn.Close()
			case <-stop:
			}
		}()
	}
	budget := 1 + c.rng.IntN(12)
	for n := 0; done || n < budget; n++ {
		f, _, err := conn.ReadFrame()
		if err != nil {
			if done {
				t.Errorf("%s: read: %v", c.name, err)
			}
			return false
		}
		switch f.Type {
		case protocol.FrameReset:
			clear(c.rows)
			c.cursor, c.clean = "", false
		case protocol.FrameChanges:
			if debug {
				var ks []string
				for _, en := range f.Entries {
					ks = append(ks, en.Resource+"/"+en.Key+":"+string(en.Row))
				}
				t.Logf("DEBUG %s %s live=%v %v", c.name, f.Cursor, c.clean, ks)
			}
			if !c.apply(t, f.Entries, f.Cursor) {
				return false
			}
		case protocol.FrameCaughtUp:
			c.cursor, c.clean = f.Cursor, true
			c.note(t)
			if done {
				return true
			}
		case protocol.FrameError:
			if f.Code != protocol.CodeUnavailable { // the feed failed for a moment: retry, as clients do
				t.Errorf("%s: error %s: %s", c.name, f.Code, f.Message)
			}
			return false
		}
	}
	return false
}

// pollRound polls pages from the stored cursor: a random number of them
// while writers run, or until one says there is no more once writing is
// done.
func (c *client) pollRound(ctx context.Context, t *testing.T, done bool) bool {
	budget := 1 + c.rng.IntN(6)
	for n := 0; done || n < budget; n++ {
		limit := []int{0, 1, 2}[c.rng.IntN(3)]
		out, err := transport.Of(c.e).Poll(ctx, Principal(c.project), "", protocol.PollRequest{V: 1, Resources: Resources, Conditions: raw(c.conditions()), Cursor: c.cursor, Limit: limit})
		if err != nil {
			if core.ErrorFor(err).Code != protocol.CodeUnavailable {
				t.Errorf("%s: poll: %v", c.name, err)
			}
			return false
		}
		f, perr := protocol.DecodeServerFrame(out)
		if perr != nil {
			t.Errorf("%s: poll answer: %v", c.name, perr)
			return false
		}
		if f.Type == protocol.FrameReset {
			clear(c.rows)
			c.cursor, c.clean = "", false
			continue
		}
		if !c.apply(t, f.Entries, f.Cursor) {
			return false
		}
		if !f.More {
			c.clean = true
			c.note(t)
			if done {
				return true
			}
		}
	}
	return false
}

// apply applies one batch and, if the copy is clean, records it.
func (c *client) apply(t *testing.T, entries []protocol.Entry, cursor string) bool {
	for _, en := range entries {
		if !slices.Contains(Resources, en.Resource) {
			t.Errorf("%s: entry %s of resource %q", c.name, en.Key, en.Resource)
			return false
		}
		k := en.Resource + "/" + en.Key
		if en.Op == "upsert" {
			c.rows[k] = en.Row
		} else {
			delete(c.rows, k)
		}
	}
	cur, err := protocol.ParseCursor(cursor)
	if err != nil {
		t.Errorf("%s: cursor %q: %v", c.name, cursor, err)
		return false
	}
	if cur.Snapshot {
		c.clean = false
	}
	c.cursor = cursor
	if c.clean {
		c.note(t)
	}
	return true
}

// note records the copy at the stored (change) cursor.
func (c *client) note(t *testing.T) {
	cur, err := protocol.ParseCursor(c.cursor)
	if err != nil || cur.Snapshot {
		t.Errorf("%s: a clean copy at cursor %q", c.name, c.cursor)
		return
	}
	c.observe(observation{client: c.name, project: c.project, pos: feed.Position(cur.Pos), state: stateString(c.rows)})
}

func raw(conds map[string]any) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range conds {
		out[k], _ = json.Marshal(v)
	}
	return out
}

// projectLog reads the changes of project p of every resource up to head,
// in position order.
func projectLog(ctx context.Context, t *testing.T, e *core.Engine, f feed.Feed, p string, head feed.Position) []feed.Change {
	var out []feed.Change
	for _, s := range e.Schemas() {
		col := s.ScopeIndex("project_id")
		sc := feed.NewScope(s, []feed.Cond{{Col: col, Values: []string{p}}})
		for after := feed.Position(0); ; {
			cs, err := f.Replay(ctx, feed.ReplayQuery{Scope: sc, After: after, Until: head, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, cs...)
			if len(cs) < 1000 {
				break
			}
			after = cs[len(cs)-1].Pos
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pos < out[j].Pos })
	return out
}

// checkObservations checks every copy a client held after a batch at a
// change cursor: it is the fold of the log up to the cursor (with the row
// filter applied), and the cursor does not split a transaction, by the
// feed's commit groups and by the writers' own transaction ids.
func checkObservations(t *testing.T, p string, log []feed.Change, obs []observation) {
	sort.Slice(obs, func(i, j int) bool { return obs[i].pos < obs[j].pos })
	rows := map[string]json.RawMessage{}
	i := 0
	bad := 0
	for _, ob := range obs {
		for i < len(log) && log[i].Pos <= ob.pos {
			applyChange(rows, &log[i])
			i++
		}
		if got, want := ob.state, stateString(rows); got != want {
			bad++
			if bad <= 3 {
				t.Errorf("%s: %s at %d holds\n %s\nthe feed's state there is\n %s", p, ob.client, ob.pos, got, want)
			}
			continue
		}
		// The rest of a transaction the batch ended in may be hidden from
		// the client (a secret attachment): the copy must then be the state
		// after the whole transaction.
		j := i
		for j > 0 && j < len(log) && (feed.SameCommit(&log[j-1], &log[j]) || splitTx(log, j) != "") {
			j++
		}
		if j > i {
			after := maps.Clone(rows)
			for k := i; k < j; k++ {
				applyChange(after, &log[k])
			}
			if got, want := ob.state, stateString(after); got != want {
				t.Errorf("%s: %s holds part of the transaction at %d..%d: it has\n %s\nthe whole transaction makes\n %s", p, ob.client, log[i-1].Pos, log[j-1].Pos, got, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d observations differ from the feed", p, bad, len(obs))
	}
}

// splitTx returns the writer's transaction id that has upserts both
// before and after index i of log, or "".
func splitTx(log []feed.Change, i int) string {
	before := map[string]bool{}
	for k := i - 1; k >= 0 && k >= i-8; k-- {
		if tx := txOf(&log[k]); tx != "" {
			before[tx] = true
		}
	}
	for k := i; k < len(log) && k < i+8; k++ {
		if tx := txOf(&log[k]); before[tx] {
			return tx
		}
	}
	return ""
}

func txOf(c *feed.Change) string {
	if c.Op != feed.OpUpsert {
		return ""
	}
	var r struct {
		Tx string `json:"tx"`
	}
	_ = json.Unmarshal(c.Row, &r)
	return r.Tx
}

func applyChange(rows map[string]json.RawMessage, c *feed.Change) {
	k := c.Resource + "/" + c.Key
	if c.Op == feed.OpUpsert && visible(c) {
		rows[k] = c.Row
	} else {
		delete(rows, k)
	}
}

// visible is the attachments' row filter.
func visible(c *feed.Change) bool {
	if c.Resource != "attachments" {
		return true
	}
	var a Attachment
	return json.Unmarshal(c.Row, &a) == nil && !a.Secret
}

func foldString(log []feed.Change, head feed.Position) string {
	rows := map[string]json.RawMessage{}
	for i := range log {
		if log[i].Pos <= head {
			applyChange(rows, &log[i])
		}
	}
	return stateString(rows)
}

// stateString renders a copy canonically: keys sorted, rows re-encoded.
func stateString(rows map[string]json.RawMessage) string {
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		var v any
		_ = json.Unmarshal(rows[k], &v)
		js, _ := json.Marshal(v)
		b.WriteString(k)
		b.WriteByte('=')
		b.Write(js)
		b.WriteByte(' ')
	}
	return b.String()
}
