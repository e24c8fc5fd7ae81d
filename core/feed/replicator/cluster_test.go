package replicator_test

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/natsbus"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/synctest"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// item is the synced resource of these tests; tenant is its first scope
// column, so it is the tenant of the NATS subjects.
type item struct {
	ID     string `tide:"id,pk" json:"id"`
	Tenant string `tide:"tenant,scope" json:"tenant"`
	N      int64  `tide:"n" json:"n"`
}

const itemsDDL = `CREATE TABLE items (id text PRIMARY KEY, tenant text NOT NULL, n bigint NOT NULL)`

type busKind string

const (
	busPostgres busKind = "postgres"
	busNATS     busKind = "nats"
)

// node is one app node: its own pool, feed, bus, engine, WebSocket server
// and replicator.
type node struct {
	i      int
	pool   *pgxpool.Pool
	feed   *pgfeed.Feed
	bus    *natsbus.Bus // nil for the Postgres bus
	nc     *nats.Conn
	engine *core.Engine
	rep    *replicator.Replicator
	url    string
	kr     *authz.Keyring // the node's keyring: every node's has the same key
}

// cluster is several nodes on one database (one tide schema) and, for the
// NATS bus, one stream of the test's own.
type cluster struct {
	t      testing.TB
	kind   busKind
	admin  *pgxpool.Pool
	schema string // the feed's schema
	prefix string // NATS subject prefix
	nodes  []*node

	cc      clusterConfig
	natsURL string
	log     *failureLog
}

// failureLog keeps the warnings and errors of a cluster's nodes and prints
// them if the test fails, so a stalled wait shows what each node was
// doing. It writes to t only in the last cleanup, after every node has
// stopped: a line logged later goes to the buffer, never to a finished t.
type failureLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

// maxFailureLog bounds what a failureLog keeps; later lines are dropped.
const maxFailureLog = 1 << 20

func (l *failureLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < maxFailureLog {
		l.buf.Write(p)
	}
	return len(p), nil
}

// logger is node i's logger: warnings and errors, tagged with the node.
func (l *failureLog) logger(i int) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", i)
}

// printOnFailure registers the cleanup that prints the log if t failed;
// registered before the nodes', it runs after them.
func (l *failureLog) printOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Logf("the nodes' warnings and errors:\n%s", l.buf.String())
	})
}

type clusterConfig struct {
	nodes int
	kind  busKind
	rep   replicator.Config // backoffs and intervals
	feed  pgfeed.Options    // Schema and Logger are set by newCluster
	nats  natsbus.Options   // Prefix and Logger are set by newCluster
	// wrap, if set, wraps each node's NATS bus as its engine sees it.
	wrap func(*natsbus.Bus) feed.Bus
	// register, if set, registers more resources on each node's engine
	// (after items, before the node's migration).
	register func(t testing.TB, n *node)
}

// clusterKey signs the tokens of every node.
var clusterKey = authz.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}

// userHeader is the cookie principal of these tests: the X-User header
// (anonymous without it).
func userHeader(r *http.Request) (authz.Principal, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return authz.Principal{ID: u}, nil
	}
	return authz.Anonymous, nil
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func randomHex(n int) string {
	b := make([]byte, n)
	crand.Read(b)
	return hex.EncodeToString(b)
}

func newCluster(t testing.TB, cc clusterConfig) *cluster {
	t.Helper()
	ctx := testCtx(t, 60*time.Second)
	admin, schema := testenv.PostgresSchema(t)
	if _, err := admin.Exec(ctx, itemsDDL); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, kind: cc.kind, admin: admin, schema: schema + "_tide", prefix: "tr" + randomHex(6), log: &failureLog{}}
	c.log.printOnFailure(t)
	var natsURL string
	if cc.kind == busNATS {
		natsURL = testenv.NATSURL(t)
		t.Cleanup(func() { c.deleteStream(natsURL) })
	}
	c.cc, c.natsURL = cc, natsURL
	for range cc.nodes {
		c.addNode()
	}
	return c
}

// addNode starts one more node on the cluster's database (and stream).
func (c *cluster) addNode() *node {
	t, cc, natsURL := c.t, c.cc, c.natsURL
	ctx := testCtx(t, 60*time.Second)
	admin := c.admin
	i := len(c.nodes)
	logger := c.log.logger(i)
	pool, err := pgxpool.NewWithConfig(ctx, admin.Config()) // same search_path
	if err != nil {
		t.Fatal(err)
	}
	n := &node{i: i, pool: pool}
	fo := cc.feed
	fo.Schema, fo.Logger = c.schema, logger
	f, err := pgfeed.New(pool, fo)
	if err != nil {
		t.Fatal(err)
	}
	n.feed = f
	var bus feed.Bus
	var pub replicator.Publisher
	if cc.kind == busNATS {
		n.nc, err = nats.Connect(natsURL, nats.Name(fmt.Sprintf("tide-test node %d", i)), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		no := cc.nats
		no.Prefix, no.Logger = c.prefix, logger
		n.bus, err = natsbus.New(ctx, n.nc, f, no)
		if err != nil {
			t.Fatal(err)
		}
		bus, pub = n.bus, n.bus
		if cc.wrap != nil {
			bus = cc.wrap(n.bus)
		}
	}
	n.kr, err = authz.NewKeyring(authz.KeyringConfig{Current: clusterKey})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Feed: f, Bus: bus, Logger: logger, Tokens: n.kr})
	if err != nil {
		t.Fatal(err)
	}
	n.engine = e
	if _, err := core.Register(e, core.Resource[item]{Name: "items", Table: "items", Authorize: authz.Allow}); err != nil {
		t.Fatal(err)
	}
	if cc.register != nil {
		cc.register(t, n)
	}
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(userHeader))(http.NotFoundHandler()))
	n.url = "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"
	rc := cc.rep
	rc.Feed, rc.Pool, rc.Publisher, rc.Logger = f, pool, pub, logger
	n.rep, err = replicator.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n.rep.Close()
		if err := e.Shutdown(sctx); err != nil {
			t.Errorf("node %d: engine Shutdown: %v", i, err)
		}
		srv.Close()
		if n.bus != nil {
			n.bus.Close()
			n.nc.Close()
		}
		f.Close()
		pool.Close()
	})
	c.nodes = append(c.nodes, n)
	return n
}

func (c *cluster) deleteStream(url string) {
	nc, err := nats.Connect(url)
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, strings.ToUpper(c.prefix)+"_CHANGES")
}

func (c *cluster) start() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { // all at once
			defer wg.Done()
			n.rep.Start()
		}()
	}
	wg.Wait()
}

// leaders returns the nodes whose replicator says it leads.
func (c *cluster) leaders() []int {
	var out []int
	for _, n := range c.nodes {
		if n.rep.Status().Role == replicator.RoleLeader {
			out = append(out, n.i)
		}
	}
	return out
}

// waitLeader waits until a node other than `except` (-1: any) leads, and
// returns it. The timeout is a failure bound.
func (c *cluster) waitLeader(ctx context.Context, except int) int {
	c.t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan int, len(c.nodes))
	for _, n := range c.nodes {
		if n.i == except {
			continue
		}
		go func() {
			if _, err := n.rep.Wait(ctx, func(s replicator.Status) bool { return s.Role == replicator.RoleLeader && s.Ready }); err == nil {
				got <- n.i
			}
		}()
	}
	select {
	case i := <-got:
		return i
	case <-ctx.Done():
		c.t.Fatalf("no replicator (other than %d) became leader: %v", except, ctx.Err())
		return -1
	}
}

// lockHolders counts the sessions holding the replicator's advisory lock.
func (c *cluster) lockHolders(ctx context.Context) int {
	c.t.Helper()
	cls, key := c.nodes[0].rep.LockKey()
	var n int
	err := c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid::text::bigint = $1 AND objid::text::bigint = $2 AND objsubid = 2`, int64(uint32(cls)), int64(uint32(key))).Scan(&n)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// rows returns the table's rows matching keep, by id.
func (c *cluster) rows(ctx context.Context, keep func(item) bool) map[string]item {
	c.t.Helper()
	rs, err := c.admin.Query(ctx, "SELECT id, tenant, n FROM items")
	if err != nil {
		c.t.Fatal(err)
	}
	all, err := pgx.CollectRows(rs, pgx.RowToStructByPos[item])
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]item{}
	for _, it := range all {
		if keep(it) {
			out[it.ID] = it
		}
	}
	return out
}

// streamPositions reads the NATS stream and returns the position of each
// message in stream order, with the base of its first message.
func (c *cluster) streamPositions(ctx context.Context) (feed.Position, []feed.Position) {
	c.t.Helper()
	js, err := jetstream.New(c.nodes[0].nc)
	if err != nil {
		c.t.Fatal(err)
	}
	s, err := js.Stream(ctx, c.nodes[0].bus.StreamConfig().Name)
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	var base feed.Position
	var out []feed.Position
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			c.t.Fatalf("stream message %d: %v", seq, err)
		}
		meta, err := decodeStreamMsg(m)
		if err != nil {
			c.t.Fatalf("stream message %d: %v", seq, err)
		}
		if len(out) == 0 {
			base = meta.base
		} else if meta.prev != out[len(out)-1] {
			c.t.Errorf("stream message %d at %d links to %d, but follows %d", seq, meta.pos, meta.prev, out[len(out)-1])
		}
		if want := c.prefix + ".change." + subjectToken(meta.resource) + "." + subjectToken(meta.tenant); m.Subject != want {
			c.t.Errorf("stream message %d under %q, want %q", seq, m.Subject, want)
		}
		out = append(out, meta.pos)
	}
	return base, out
}

// streamMsg is what streamPositions checks of a stream message.
type streamMsg struct {
	pos, prev, base  feed.Position
	resource, tenant string
}

// decodeStreamMsg decodes a stream message by the wire format package
// natsbus documents, as strictly as natsbus reads it: a valid epoch,
// positions with base <= prev < pos, and a body that is a change at pos
// with a resource, an op and, if present, a row that is a JSON object.
func decodeStreamMsg(m *jetstream.RawStreamMsg) (streamMsg, error) {
	var out streamMsg
	epoch := m.Header.Get(natsbus.HeaderEpoch)
	if len(epoch) == 0 || len(epoch) > 64 || strings.Trim(epoch, plainBytes) != "" {
		return out, fmt.Errorf("invalid epoch %q", epoch)
	}
	for _, h := range []struct {
		name string
		dst  *feed.Position
	}{{natsbus.HeaderPos, &out.pos}, {natsbus.HeaderPrev, &out.prev}, {natsbus.HeaderBase, &out.base}} {
		v, err := strconv.ParseUint(m.Header.Get(h.name), 10, 64)
		if err != nil {
			return out, fmt.Errorf("header %s: %w", h.name, err)
		}
		*h.dst = feed.Position(v)
	}
	if out.pos == 0 || out.prev >= out.pos || out.base > out.prev {
		return out, fmt.Errorf("positions: base %d, prev %d, pos %d", out.base, out.prev, out.pos)
	}
	var body struct {
		Pos      uint64          `json:"pos"`
		Resource string          `json:"resource"`
		Op       string          `json:"op"`
		Scope    []string        `json:"scope"`
		Row      json.RawMessage `json:"row"`
	}
	if err := json.Unmarshal(m.Data, &body); err != nil {
		return out, fmt.Errorf("body: %w", err)
	}
	switch {
	case feed.Position(body.Pos) != out.pos:
		return out, fmt.Errorf("body at %d, headers at %d", body.Pos, out.pos)
	case body.Resource == "":
		return out, fmt.Errorf("body: no resource")
	case body.Op != "upsert" && body.Op != "delete":
		return out, fmt.Errorf("body: op %q", body.Op)
	case len(body.Row) > 0 && !strings.HasPrefix(strings.TrimLeft(string(body.Row), " \t\r\n"), "{"):
		return out, fmt.Errorf("body: row %s is not an object", body.Row)
	case len(body.Scope) == 0:
		return out, fmt.Errorf("body: no scope (items are scoped by tenant)")
	}
	out.resource, out.tenant = body.Resource, body.Scope[0]
	return out, nil
}

const plainBytes = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"

// subjectToken escapes a resource or tenant into one subject token as
// package natsbus documents: plain bytes stay, others are "%XX", "" is "%",
// and an escaped form over 128 bytes is '#' and 32 hex digits of SHA-256.
func subjectToken(s string) string {
	if s == "" {
		return "%"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(plainBytes, s[i]) >= 0 {
			b.WriteByte(s[i])
		} else {
			fmt.Fprintf(&b, "%%%02X", s[i])
		}
	}
	if b.Len() > 128 {
		h := sha256.Sum256([]byte(s))
		return "#" + hex.EncodeToString(h[:16])
	}
	return b.String()
}

// logPositions returns the change log's positions above after.
func (c *cluster) logPositions(ctx context.Context, after feed.Position) []feed.Position {
	c.t.Helper()
	rs, err := c.admin.Query(ctx, "SELECT pos FROM "+pgx.Identifier{c.schema, "log"}.Sanitize()+" WHERE pos > $1 ORDER BY pos", int64(after))
	if err != nil {
		c.t.Fatal(err)
	}
	ps, err := pgx.CollectRows(rs, pgx.RowTo[int64])
	if err != nil {
		c.t.Fatal(err)
	}
	out := make([]feed.Position, len(ps))
	for i, p := range ps {
		out[i] = feed.Position(p)
	}
	return out
}

// subscriber is a Go client on one node with one scope, kept in a synctest.Rows
// and checked: per batch, the cursor never goes back, and a batch with
// entries is strictly after the last applied one (nothing applied twice).
type subscriber struct {
	name  string
	match func(item) bool
	scope client.Scope
	m     *synctest.Rows
	c     *client.Client

	mu         sync.Mutex
	last       feed.Position
	violations []string
	onEntry    func(e protocol.Entry, at time.Time) // optional: latency probe
	lastSeen   time.Time
}

func (s *subscriber) Apply(ctx context.Context, b client.Batch) error {
	now := time.Now()
	s.mu.Lock()
	if b.Reset {
		s.last = 0
	}
	if b.Cursor != "" {
		cur, err := protocol.ParseCursor(b.Cursor)
		switch {
		case err != nil:
			s.violate("batch cursor %q: %v", b.Cursor, err)
		case cur.Snapshot:
		case feed.Position(cur.Pos) < s.last:
			s.violate("cursor went back from %d to %d", s.last, cur.Pos)
		case len(b.Entries) > 0 && feed.Position(cur.Pos) <= s.last:
			s.violate("a batch of %d entries at %d applied again (last applied %d)", len(b.Entries), cur.Pos, s.last)
		default:
			s.last = feed.Position(cur.Pos)
		}
	}
	if len(b.Entries) > 0 {
		s.lastSeen = now
	}
	on := s.onEntry
	s.mu.Unlock()
	if on != nil {
		for _, e := range b.Entries {
			on(e, now)
		}
	}
	return s.m.Apply(ctx, b)
}

func (s *subscriber) violate(format string, args ...any) {
	if len(s.violations) < 10 {
		s.violations = append(s.violations, s.name+": "+fmt.Sprintf(format, args...))
	}
}

func (c *cluster) subscribe(ctx context.Context, n *node, name string, scope client.Scope, match func(item) bool) *subscriber {
	c.t.Helper()
	cl, err := client.New(client.Config{URL: n.url, MinBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	s := &subscriber{name: name, match: match, scope: scope, m: synctest.NewRows(), c: cl}
	if _, err := cl.Subscribe(scope, s); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	rctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		_ = cl.Run(rctx)
	}()
	c.t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// converged waits until the subscriber's copy equals the database's rows
// of its scope.
func (c *cluster) converged(ctx context.Context, s *subscriber) error {
	want := c.rows(ctx, s.match)
	var last map[string]item
	err := s.m.Wait(ctx, func(rows map[string]json.RawMessage) bool {
		got := make(map[string]item, len(rows))
		for k, r := range rows {
			var it item
			if json.Unmarshal(r, &it) != nil {
				return false
			}
			got[k] = it
		}
		last = got
		return maps.Equal(got, want)
	})
	if err != nil {
		return fmt.Errorf("%s did not converge: %d rows, want %d: %w", s.name, len(last), len(want), err)
	}
	return nil
}

// writer writes steadily into Postgres with plain SQL (as any app would),
// one autocommit statement per write: inserts, updates, moves between
// tenants, deletes. N increases with every write, so each write's row
// version is unique.
type writer struct {
	pool    *pgxpool.Pool
	rng     *rand.Rand
	tenants []string
	ids     []string
	next    int
	n       int64

	mu      sync.Mutex
	commits map[int64]time.Time // n → when the commit returned
}

func newWriter(pool *pgxpool.Pool, seed uint64, tenants []string) *writer {
	return &writer{pool: pool, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), tenants: tenants, commits: map[int64]time.Time{}}
}

func (w *writer) step(ctx context.Context) error {
	w.n++
	n := w.n
	tenant := w.tenants[w.rng.IntN(len(w.tenants))]
	var err error
	switch r := w.rng.IntN(10); {
	case r < 4 || len(w.ids) < 5:
		w.next++
		id := fmt.Sprintf("i%04d", w.next)
		w.ids = append(w.ids, id)
		_, err = w.pool.Exec(ctx, "INSERT INTO items (id, tenant, n) VALUES ($1, $2, $3)", id, tenant, n)
	case r < 8:
		_, err = w.pool.Exec(ctx, "UPDATE items SET n = $2 WHERE id = $1", w.ids[w.rng.IntN(len(w.ids))], n)
	case r < 9:
		_, err = w.pool.Exec(ctx, "UPDATE items SET tenant = $2, n = $3 WHERE id = $1", w.ids[w.rng.IntN(len(w.ids))], tenant, n)
	default:
		i := w.rng.IntN(len(w.ids))
		_, err = w.pool.Exec(ctx, "DELETE FROM items WHERE id = $1", w.ids[i])
		w.ids = append(w.ids[:i], w.ids[i+1:]...)
		n = 0
	}
	if err == nil && n > 0 {
		w.mu.Lock()
		w.commits[n] = time.Now()
		w.mu.Unlock()
	}
	return err
}

func (w *writer) committedAt(n int64) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.commits[n]
	return t, ok
}
