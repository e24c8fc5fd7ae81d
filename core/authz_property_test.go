package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

// TestAuthorizationProperty checks invariant 3 (no leak) together with
// convergence under authorization, at random: random principals (claims,
// cookie or token, token grants), random policies built from the authz
// helpers, random row filters, random scopes ("in" lists and the whole
// resource included) and random writes that move rows between scopes and
// in and out of filters. Subscribers join before the writes (live path),
// during them without a cursor (snapshot racing the writes), during them
// from a cursor stored mid-way (possibly inside a snapshot), and after them
// from a cursor stored before any write (replay of the whole log).
//
// Every upsert a subscriber receives is checked against the row versions
// written: it must be a real version, inside the subscription's scope and
// passing the filter for its principal (claims do not change during the
// test, so visibility at the time of the change is visibility of that
// version). Every policy decision is checked against an independent model
// of the helpers. After the writes, each subscriber's copy must equal the
// rows of its scope that pass its filter.
//
// Seeded: the seed is logged; TIDE_SEED=<n> replays its choices (the
// interleaving of network and writes is the scheduler's).
func TestAuthorizationProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("TIDE_SEED: %v", err)
		}
	}
	t.Logf("seed %d (TIDE_SEED=%d go test -run TestAuthorizationProperty ./core/ reproduces its choices)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	writes := 10_000
	if testing.Short() {
		writes = 2_000
	}
	// A world whose random policies allow few subscriptions moves few
	// entries; more worlds (up to four, each checked whole) run until
	// enough entries went through catch-up and live delivery together.
	var catchUp, live int
	for range 4 {
		c, l := newPropWorld(t, rng).run(writes)
		catchUp, live = catchUp+c, live+l
		if t.Failed() || min(catchUp, live) >= 10_000 || testing.Short() {
			break
		}
	}
	if min(catchUp, live) < 10_000 && !testing.Short() {
		t.Fatalf("too few entries went through catch-up (%d) or live (%d) in four worlds", catchUp, live)
	}
}

// propDoc is the synced row of the property test: two scope columns of
// different kinds, and two columns the filters read.
type propDoc struct {
	ID    string `tide:"id,pk"`
	Org   string `tide:"org,scope"`
	Team  int64  `tide:"team,scope"`
	Owner string `tide:"owner"`
	Level int64  `tide:"level"`
	Ver   int64  `tide:"ver"` // unique per written version
}

type fenceRow struct {
	ID string `tide:"id,pk"`
	N  int64  `tide:"n"`
}

var (
	propOrgs  = []string{"o0", "o1", "o2"}
	propTeams = []int64{0, 1, 2, 3}
	propUsers = []string{"u0", "u1", "u2", "u3", "u4"}
)

// propPrincipal is a principal as the model sees it: typed claims.
type propPrincipal struct {
	id        string // "" is anonymous
	orgs      []string
	team      int64
	hasTeam   bool
	teams     []int64
	admin     bool
	clearance int64
}

// claims renders the claims as an app would: lists and numbers of various
// Go types, all of which Principal.Strings reads.
func (pp propPrincipal) principal(rng *rand.Rand) authz.Principal {
	if pp.id == "" {
		return authz.Anonymous
	}
	c := map[string]any{"clearance": pp.clearance}
	if rng.IntN(2) == 0 {
		c["orgs"] = pp.orgs
	} else {
		l := make([]any, len(pp.orgs))
		for i, o := range pp.orgs {
			l[i] = o
		}
		c["orgs"] = l
	}
	if pp.hasTeam {
		c["team"] = float64(pp.team)
	}
	ts := make([]any, len(pp.teams))
	for i, v := range pp.teams {
		ts[i] = v
	}
	c["teams"] = ts
	if pp.admin {
		c["role"] = []string{"member", "admin"}
	} else {
		c["role"] = "member"
	}
	return authz.Principal{ID: pp.id, Claims: c}
}

// policyNode is a random policy and its model.
type policyNode struct {
	kind string // allow, authenticated, requireOrg, orgClaim, teamEquals, teamClaim, admin, all, any
	kids []*policyNode
}

func randPolicy(rng *rand.Rand, depth int) *policyNode {
	atoms := []string{"allow", "authenticated", "requireOrg", "orgClaim", "teamEquals", "teamClaim", "admin"}
	if depth < 2 && rng.IntN(2) == 0 {
		n := &policyNode{kind: []string{"all", "any"}[rng.IntN(2)]}
		for i := 0; i < 2+rng.IntN(2); i++ {
			n.kids = append(n.kids, randPolicy(rng, depth+1))
		}
		return n
	}
	return &policyNode{kind: atoms[rng.IntN(len(atoms))]}
}

func (n *policyNode) policy() authz.Policy {
	switch n.kind {
	case "allow":
		return authz.Allow
	case "authenticated":
		return authz.Authenticated
	case "requireOrg":
		return authz.RequireConditions("org")
	case "orgClaim":
		return authz.RequireClaim("org", "orgs")
	case "teamEquals":
		return authz.ClaimEquals("team", "team")
	case "teamClaim":
		return authz.RequireClaim("team", "teams")
	case "admin":
		return authz.HasClaim("role", "admin")
	}
	var ps []authz.Policy
	for _, k := range n.kids {
		ps = append(ps, k.policy())
	}
	if n.kind == "all" {
		return authz.All(ps...)
	}
	return authz.Any(ps...)
}

func (n *policyNode) String() string {
	if len(n.kids) == 0 {
		return n.kind
	}
	var s []string
	for _, k := range n.kids {
		s = append(s, k.String())
	}
	return n.kind + "(" + strings.Join(s, ",") + ")"
}

// Model decisions.
const (
	mAllow  = ""
	mUnauth = "unauthenticated"
	mForbid = "forbidden"
)

// eval is the model of the authz helpers, written from their documentation.
func (n *policyNode) eval(p propPrincipal, conds map[string][]string) string {
	anon := p.id == ""
	subset := func(vals, set []string) bool {
		for _, v := range vals {
			if !slices.Contains(set, v) {
				return false
			}
		}
		return true
	}
	teamStrs := func(ts []int64) []string {
		var out []string
		for _, v := range ts {
			out = append(out, strconv.FormatInt(v, 10))
		}
		return out
	}
	switch n.kind {
	case "allow":
		return mAllow
	case "authenticated":
		if anon {
			return mUnauth
		}
		return mAllow
	case "requireOrg":
		if len(conds["org"]) == 0 {
			return mForbid
		}
		return mAllow
	case "orgClaim", "teamClaim", "teamEquals", "admin":
		if anon {
			return mUnauth
		}
		switch n.kind {
		case "orgClaim":
			if len(conds["org"]) == 0 || !subset(conds["org"], p.orgs) {
				return mForbid
			}
		case "teamClaim":
			if len(conds["team"]) == 0 || !subset(conds["team"], teamStrs(p.teams)) {
				return mForbid
			}
		case "teamEquals":
			if len(conds["team"]) == 0 || !p.hasTeam || !subset(conds["team"], teamStrs([]int64{p.team})) {
				return mForbid
			}
		case "admin":
			if !p.admin {
				return mForbid
			}
		}
		return mAllow
	case "all":
		for _, k := range n.kids {
			if r := k.eval(p, conds); r != mAllow {
				return r
			}
		}
		return mAllow
	}
	// any
	res := map[string]bool{}
	for _, k := range n.kids {
		r := k.eval(p, conds)
		if r == mAllow {
			return mAllow
		}
		res[r] = true
	}
	if res[mUnauth] {
		return mUnauth
	}
	return mForbid
}

// filterKind names a random row filter; the same function serves the
// engine and the model (the property is that the engine applies it, not
// what it computes).
type filterKind int

const (
	filterNone filterKind = iota
	filterOwner
	filterClearance
	filterOwnerOrPublic
	filterClearedOwned
	nFilters
)

func clearanceOf(p authz.Principal) int64 {
	s := p.Strings("clearance")
	if len(s) != 1 {
		return -1
	}
	n, err := strconv.ParseInt(s[0], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func (f filterKind) fn() authz.RowFilter[propDoc] {
	switch f {
	case filterOwner:
		return func(p authz.Principal, d *propDoc) bool { return d.Owner == p.ID }
	case filterClearance:
		return func(p authz.Principal, d *propDoc) bool { return d.Level <= clearanceOf(p) }
	case filterOwnerOrPublic:
		return func(p authz.Principal, d *propDoc) bool { return d.Owner == p.ID || d.Level == 0 }
	case filterClearedOwned:
		return func(p authz.Principal, d *propDoc) bool { return d.Owner != "" && d.Level <= clearanceOf(p) }
	}
	return nil
}

func (f filterKind) visible(p authz.Principal, d *propDoc) bool {
	if fn := f.fn(); fn != nil {
		return fn(p, d)
	}
	return true
}

type propResource struct {
	name   string
	policy *policyNode
	filter filterKind
	table  *core.Table[propDoc]
}

// propScope is a subscription's scope: the frame's conditions and their
// canonical model.
type propScope struct {
	res   *propResource
	json  string              // conditions object for the frame, "" for none
	conds map[string][]string // canonical, sorted, deduplicated
}

func (sc propScope) match(d *propDoc) bool {
	if v := sc.conds["org"]; v != nil && !slices.Contains(v, d.Org) {
		return false
	}
	if v := sc.conds["team"]; v != nil && !slices.Contains(v, strconv.FormatInt(d.Team, 10)) {
		return false
	}
	return true
}

// randScope picks a scope, half the time among values the principal's
// claims name, so that policies allow a fair share of subscriptions.
func randScope(rng *rand.Rand, r *propResource, pp propPrincipal) propScope {
	sc := propScope{res: r, conds: map[string][]string{}}
	var parts []string
	orgs, teams := propOrgs, propTeams
	if rng.IntN(2) == 0 && len(pp.orgs) > 0 {
		orgs = pp.orgs
	}
	if rng.IntN(2) == 0 && len(pp.teams) > 0 {
		teams = pp.teams
	}
	pickOrgs := func() {
		var vals []string
		n := 1 + rng.IntN(3)
		for i := 0; i < n; i++ {
			vals = append(vals, orgs[rng.IntN(len(orgs))])
		}
		b, _ := json.Marshal(vals)
		if n == 1 && rng.IntN(2) == 0 {
			b, _ = json.Marshal(vals[0])
			parts = append(parts, `"org":`+string(b))
		} else {
			parts = append(parts, `"org":{"in":`+string(b)+`}`)
		}
		slices.Sort(vals)
		sc.conds["org"] = slices.Compact(vals)
	}
	pickTeams := func() {
		var vals, lits []string
		n := 1 + rng.IntN(3)
		for i := 0; i < n; i++ {
			v := strconv.FormatInt(teams[rng.IntN(len(teams))], 10)
			vals = append(vals, v)
			if rng.IntN(4) == 0 {
				lits = append(lits, `"`+v+`"`) // integers may come as strings
			} else {
				lits = append(lits, v)
			}
		}
		if n == 1 && rng.IntN(2) == 0 {
			parts = append(parts, `"team":`+lits[0])
		} else {
			parts = append(parts, `"team":{"in":[`+strings.Join(lits, ",")+`]}`)
		}
		slices.Sort(vals)
		sc.conds["team"] = slices.Compact(vals)
	}
	switch rng.IntN(6) {
	case 0: // the whole resource
	case 1, 2:
		pickOrgs()
	case 3:
		pickTeams()
	default:
		pickOrgs()
		pickTeams()
	}
	if len(parts) > 0 {
		sc.json = "{" + strings.Join(parts, ",") + "}"
	}
	return sc
}

// grantsCover is the model of authz.CheckGrants.
func grantsCover(grants []authz.Grant, resource string, conds map[string][]string) bool {
	if len(grants) == 0 {
		return true
	}
	for _, g := range grants {
		if g.Resource != resource {
			continue
		}
		ok := true
		for col, allowed := range g.Conditions {
			got := conds[col]
			if len(got) == 0 {
				ok = false
			}
			for _, v := range got {
				if !slices.Contains(allowed, v) {
					ok = false
				}
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// propSub is one subscription and the client's copy of its scope.
type propSub struct {
	id       string
	pp       propPrincipal
	p        authz.Principal // as the engine sees it (claims as sent)
	grants   []authz.Grant
	scope    propScope
	decision string // the model's
	conn     *propConn

	// Guarded by conn.mu.
	copy      map[string]propDoc
	cursor    string
	caughtUp  bool
	settled   chan struct{} // closed at the first caught-up or error
	catchUpN  int           // entries received before the first caught-up
	liveN     int           // entries received after it
	refusedAs protocol.Code
}

// propConn is one WebSocket connection and its reader.
type propConn struct {
	w     *propWorld
	ws    *tidetest.Conn
	mu    sync.Mutex
	subs  map[string]*propSub
	fence int64
	fseen chan struct{} // closed when the fence row reaches w.fenceWant
	done  chan struct{} // the reader ended
}

type propWorld struct {
	t     *testing.T
	rng   *rand.Rand
	e     *core.Engine
	kr    *authz.Keyring
	url   string
	fence *core.Table[fenceRow]
	res   []*propResource

	mu        sync.Mutex
	ver       int64
	versions  map[int64]propDoc             // every version ever written, by Ver
	db        map[string]map[string]propDoc // resource → key → current row
	failures  []string
	fenceWant int64
	conns     []*propConn
	subs      []*propSub
	nextID    int
}

func newPropWorld(t *testing.T, rng *rand.Rand) *propWorld {
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "p", Secret: bytes.Repeat([]byte{3}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	// A send buffer no client can fill, so a fence row marks the end of
	// every subscription's live stream (a resync would break that); the
	// test checks nothing was dropped.
	e, err := core.New(core.Config{Tokens: kr, SendBuffer: 1 << 30, PageSize: 50 + rng.IntN(200)})
	if err != nil {
		t.Fatal(err)
	}
	w := &propWorld{t: t, rng: rng, e: e, kr: kr, versions: map[int64]propDoc{}, db: map[string]map[string]propDoc{}}
	for i := 0; i < 3; i++ {
		// Admins may read any scope of any resource (a recipe of
		// docs/authorization.md); the auditors below rely on it.
		policy := &policyNode{kind: "any", kids: []*policyNode{{kind: "admin"}, randPolicy(rng, 0)}}
		r := &propResource{name: fmt.Sprintf("docs%d", i), policy: policy, filter: filterKind(rng.IntN(int(nFilters)))}
		if i == 0 {
			r.filter = filterOwnerOrPublic // at least one filtered resource
		}
		r.table, err = core.Register(e, core.Resource[propDoc]{Name: r.name, Table: r.name, Authorize: r.policy.policy(), Filter: r.filter.fn()})
		if err != nil {
			t.Fatal(err)
		}
		w.res = append(w.res, r)
		w.db[r.name] = map[string]propDoc{}
		t.Logf("resource %s: policy %s, filter %d", r.name, r.policy, r.filter)
	}
	if w.fence, err = core.Register(e, core.Resource[fenceRow]{Table: "fence", Authorize: authz.Allow}); err != nil {
		t.Fatal(err)
	}
	principalHook := func(r *http.Request) (authz.Principal, error) {
		h := r.Header.Get("X-Principal")
		if h == "" {
			return authz.Anonymous, nil
		}
		var p struct {
			ID     string
			Claims map[string]any
		}
		err := json.Unmarshal([]byte(h), &p)
		return authz.Principal{ID: p.ID, Claims: p.Claims}, err
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(principalHook))(http.NotFoundHandler()))
	w.url = "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
	t.Cleanup(func() {
		for _, c := range w.conns {
			c.ws.Close()
			<-c.done
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	return w
}

func (w *propWorld) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failures) < 20 {
		w.failures = append(w.failures, fmt.Sprintf(format, args...))
	}
}

func (w *propWorld) randPrincipal() propPrincipal {
	rng := w.rng
	if rng.IntN(8) == 0 {
		return propPrincipal{}
	}
	pp := propPrincipal{id: propUsers[rng.IntN(len(propUsers))], clearance: int64(rng.IntN(4)), admin: rng.IntN(6) == 0}
	for _, o := range propOrgs {
		if rng.IntN(2) == 0 {
			pp.orgs = append(pp.orgs, o)
		}
	}
	if rng.IntN(4) != 0 {
		pp.team, pp.hasTeam = propTeams[rng.IntN(len(propTeams))], true
	}
	for _, v := range propTeams {
		if rng.IntN(2) == 0 {
			pp.teams = append(pp.teams, v)
		}
	}
	return pp
}

// connect opens a connection for pp, by cookie or (for a principal, unless
// cookie is set) by a token, possibly with grants. It returns the
// connection and the principal and grants the engine will see.
func (w *propWorld) connect(pp propPrincipal, cookie bool) (*propConn, authz.Principal, []authz.Grant) {
	t := w.t
	p := pp.principal(w.rng)
	h := http.Header{}
	useToken := pp.id != "" && !cookie && w.rng.IntN(2) == 0
	var grants []authz.Grant
	if useToken && w.rng.IntN(2) == 0 {
		for i := 0; i < 1+w.rng.IntN(2); i++ {
			g := authz.Grant{Resource: w.res[w.rng.IntN(len(w.res))].name}
			if w.rng.IntN(3) != 0 {
				g.Conditions = map[string][]string{"org": {propOrgs[w.rng.IntN(3)], propOrgs[w.rng.IntN(3)]}}
			}
			grants = append(grants, g)
		}
		grants = append(grants, authz.Grant{Resource: "fence"}) // the test's own barrier
	}
	if !useToken && pp.id != "" {
		b, _ := json.Marshal(struct {
			ID     string
			Claims map[string]any
		}{p.ID, p.Claims})
		h.Set("X-Principal", string(b))
	}
	c := &propConn{w: w, ws: tidetest.Dial(t, w.url, tidetest.WithHeaders(h)), subs: map[string]*propSub{}, fseen: make(chan struct{}), done: make(chan struct{})}
	hello := map[string]any{"v": 1, "type": "hello"}
	if useToken {
		tp := p
		tp.Grants = grants
		tok, _, err := w.kr.Mint(tp, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		hello["token"] = tok
		// The engine sees the claims as decoded from the token's JSON.
		parsed, err := w.kr.Parse(tok)
		if err != nil {
			t.Fatal(err)
		}
		p = parsed.Principal
	}
	c.ws.Send(hello)
	c.ws.Expect(protocol.FrameWelcome)
	w.mu.Lock()
	w.conns = append(w.conns, c)
	w.mu.Unlock()
	go c.read()
	c.ws.Send(map[string]any{"v": 1, "type": "subscribe", "id": "fence", "resource": "fence"})
	return c, p, grants
}

// subscribe adds a subscription on c, with the client's stored copy and
// cursor (both empty for a first subscribe).
func (w *propWorld) subscribe(c *propConn, pp propPrincipal, p authz.Principal, grants []authz.Grant, sc propScope, cursor string, stored map[string]propDoc) *propSub {
	w.mu.Lock()
	w.nextID++
	id := fmt.Sprintf("s%d", w.nextID)
	w.mu.Unlock()
	decision := sc.res.policy.eval(pp, sc.conds)
	if !grantsCover(grants, sc.res.name, sc.conds) {
		decision = mForbid
	}
	s := &propSub{id: id, pp: pp, p: p, grants: grants, scope: sc, decision: decision, conn: c,
		copy: stored, cursor: cursor, settled: make(chan struct{})}
	if s.copy == nil {
		s.copy = map[string]propDoc{}
	}
	c.mu.Lock()
	c.subs[id] = s
	c.mu.Unlock()
	w.mu.Lock()
	w.subs = append(w.subs, s)
	w.mu.Unlock()
	frame := map[string]any{"v": 1, "type": "subscribe", "id": id, "resource": sc.res.name}
	if sc.json != "" {
		frame["conditions"] = json.RawMessage(sc.json)
	}
	if cursor != "" {
		frame["cursor"] = cursor
	}
	c.ws.Send(frame)
	return s
}

// read applies frames to the subscriptions' copies, checking each upsert.
func (c *propConn) read() {
	defer close(c.done)
	w := c.w
	ws := c.ws.Timeout(0) // reads until the connection ends
	for {
		f, data, err := ws.ReadFrame()
		if err != nil && data == nil {
			return
		}
		if err != nil {
			w.fail("%v", err)
			continue
		}
		c.mu.Lock()
		c.apply(f, data)
		c.mu.Unlock()
	}
}

// barrier writes fence row n and waits until every connection has seen
// it. Dispatch is in position order, so every change written before it has
// then been dispatched to every live subscription.
func (w *propWorld) barrier(ctx context.Context, n int64) {
	w.mu.Lock()
	w.fenceWant = n
	conns := slices.Clone(w.conns)
	w.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		if c.fence < n {
			c.fseen = make(chan struct{})
		}
		c.mu.Unlock()
	}
	if err := w.fence.Upsert(ctx, fenceRow{ID: "f", N: n}); err != nil {
		w.t.Fatal(err)
	}
	for _, c := range conns {
		c.mu.Lock()
		seen := c.fseen
		c.mu.Unlock()
		w.await(seen, "the fence")
	}
}

func (c *propConn) apply(f protocol.ServerFrame, data []byte) {
	w := c.w
	if f.ID == "fence" {
		switch f.Type {
		case protocol.FrameChanges:
			for _, e := range f.Entries {
				var r fenceRow
				_ = json.Unmarshal(e.Row, &r)
				if e.Op == "upsert" && r.N > c.fence {
					c.fence = r.N
				}
			}
			w.mu.Lock()
			want := w.fenceWant
			w.mu.Unlock()
			if want > 0 && c.fence >= want {
				select {
				case <-c.fseen:
				default:
					close(c.fseen)
				}
			}
		case protocol.FrameCaughtUp:
		default:
			w.fail("fence subscription got %s", data)
		}
		return
	}
	s := c.subs[f.ID]
	if s == nil {
		w.fail("frame for unknown subscription: %s", data)
		return
	}
	settle := func() {
		select {
		case <-s.settled:
		default:
			close(s.settled)
		}
	}
	switch f.Type {
	case protocol.FrameError:
		s.refusedAs = f.Code
		if s.decision == mAllow {
			w.fail("%s %s %s: refused with %s (%s), the model allows it", s.id, s.pp.id, s.scope.res.name, f.Code, f.Message)
		} else if string(f.Code) != s.decision {
			w.fail("%s: refused with %s, the model says %s (policy %s, conds %v, principal %+v)", s.id, f.Code, s.decision, s.scope.res.policy, s.scope.conds, s.pp)
		}
		settle()
	case protocol.FrameCaughtUp:
		if s.decision != mAllow {
			w.fail("%s: caught up, but the model denies it with %s (policy %s, conds %v, principal %+v, grants %+v)", s.id, s.decision, s.scope.res.policy, s.scope.conds, s.pp, s.grants)
		}
		s.cursor = f.Cursor
		s.caughtUp = true
		settle()
	case protocol.FrameChanges:
		if s.decision != mAllow {
			w.fail("%s: %d entries on a subscription the model denies", s.id, len(f.Entries))
		}
		for _, e := range f.Entries {
			if e.Resource != "" && e.Resource != s.scope.res.name {
				w.fail("%s: entry of resource %s", s.id, e.Resource)
			}
			if s.caughtUp {
				s.liveN++
			} else {
				s.catchUpN++
			}
			if e.Op == "delete" {
				delete(s.copy, e.Key)
				continue
			}
			var d propDoc
			if err := json.Unmarshal(e.Row, &d); err != nil || d.ID != e.Key {
				w.fail("%s: bad row %s", s.id, e.Row)
				continue
			}
			w.mu.Lock()
			v, known := w.versions[d.Ver]
			w.mu.Unlock()
			switch {
			case !known || v != d:
				w.fail("%s: row %s is not a version that was written", s.id, e.Row)
			case !s.scope.match(&d):
				w.fail("LEAK %s: row %s outside the scope %v", s.id, e.Row, s.scope.conds)
			case !s.scope.res.filter.visible(s.p, &d):
				w.fail("LEAK %s: row %s hidden by filter %d from %s", s.id, e.Row, s.scope.res.filter, s.p.ID)
			}
			s.copy[d.ID] = d
		}
		s.cursor = f.Cursor
	case protocol.FrameReset:
		w.fail("%s: unexpected reset %s", s.id, data)
	default:
		w.fail("%s: unexpected frame %s", s.id, data)
	}
}

// checkpoint returns what a client would have persisted for s right now.
func (s *propSub) checkpoint() (string, map[string]propDoc) {
	s.conn.mu.Lock()
	defer s.conn.mu.Unlock()
	cp := make(map[string]propDoc, len(s.copy))
	for k, v := range s.copy {
		cp[k] = v
	}
	return s.cursor, cp
}

// randWrite performs one random write (sometimes a transaction of several
// rows) and records it in the model.
func (w *propWorld) randWrite(ctx context.Context) {
	rng := w.rng
	r := w.res[rng.IntN(len(w.res))]
	n := 1
	if rng.IntN(10) == 0 {
		n = 2 + rng.IntN(3)
	}
	w.mu.Lock()
	db := w.db[r.name]
	var ups, dels []propDoc
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%02d", rng.IntN(60))
		if seen[key] {
			continue
		}
		seen[key] = true
		if old, ok := db[key]; ok && rng.IntN(8) == 0 {
			dels = append(dels, old)
			continue
		}
		d, ok := db[key]
		if !ok || rng.IntN(3) == 0 {
			d = propDoc{ID: key, Org: propOrgs[rng.IntN(3)], Team: propTeams[rng.IntN(4)]}
		}
		switch rng.IntN(4) { // change what moves the row, or what filters read
		case 0:
			d.Org = propOrgs[rng.IntN(3)]
		case 1:
			d.Team = propTeams[rng.IntN(4)]
		case 2:
			if rng.IntN(4) == 0 {
				d.Owner = ""
			} else {
				d.Owner = propUsers[rng.IntN(len(propUsers))]
			}
		case 3:
			d.Level = int64(rng.IntN(4))
		}
		w.nextVerLocked(&d)
		ups = append(ups, d)
	}
	w.mu.Unlock()
	if len(ups) > 0 {
		if err := r.table.Upsert(ctx, ups...); err != nil {
			w.t.Fatal(err)
		}
	}
	if len(dels) > 0 {
		if err := r.table.Delete(ctx, dels...); err != nil {
			w.t.Fatal(err)
		}
	}
	w.mu.Lock()
	for _, d := range ups {
		db[d.ID] = d
	}
	for _, d := range dels {
		delete(db, d.ID)
	}
	w.mu.Unlock()
}

func (w *propWorld) nextVerLocked(d *propDoc) {
	w.ver++
	d.Ver = w.ver
	w.versions[d.Ver] = *d
}

// newSub opens a connection for a random principal and subscribes it to a
// random scope.
func (w *propWorld) newSub() *propSub {
	pp := w.randPrincipal()
	c, p, grants := w.connect(pp, false)
	r := w.res[w.rng.IntN(len(w.res))]
	return w.subscribe(c, pp, p, grants, randScope(w.rng, r, pp), "", nil)
}

// resume subscribes again, on a new connection of the same principal, from
// what the client stored for s.
func (w *propWorld) resume(s *propSub, cursor string, stored map[string]propDoc) *propSub {
	c, _, _ := w.connectAs(s)
	return w.subscribe(c, s.pp, s.p, s.grants, s.scope, cursor, stored)
}

// connectAs opens a connection with exactly s's principal and grants.
func (w *propWorld) connectAs(s *propSub) (*propConn, authz.Principal, []authz.Grant) {
	t := w.t
	h := http.Header{}
	if s.pp.id != "" && len(s.grants) == 0 {
		b, _ := json.Marshal(struct {
			ID     string
			Claims map[string]any
		}{s.p.ID, s.p.Claims})
		h.Set("X-Principal", string(b))
	}
	c := &propConn{w: w, ws: tidetest.Dial(t, w.url, tidetest.WithHeaders(h)), subs: map[string]*propSub{}, fseen: make(chan struct{}), done: make(chan struct{})}
	hello := map[string]any{"v": 1, "type": "hello"}
	if len(s.grants) > 0 {
		tp := s.p
		tp.Grants = s.grants
		tok, _, err := w.kr.Mint(tp, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		hello["token"] = tok
	}
	c.ws.Send(hello)
	c.ws.Expect(protocol.FrameWelcome)
	w.mu.Lock()
	w.conns = append(w.conns, c)
	w.mu.Unlock()
	go c.read()
	c.ws.Send(map[string]any{"v": 1, "type": "subscribe", "id": "fence", "resource": "fence"})
	return c, s.p, s.grants
}

func (w *propWorld) await(ch <-chan struct{}, what string) {
	select {
	case <-ch:
	case <-time.After(2 * time.Minute): // bounds a broken test; not a timing assertion
		w.mu.Lock()
		failures := slices.Clone(w.failures)
		w.mu.Unlock()
		w.t.Fatalf("timed out waiting for %s; failures so far: %v", what, failures)
	}
}

// run builds the world, writes, checks every invariant, and returns the
// entries delivered in catch-up and live.
func (w *propWorld) run(writes int) (catchUp, live int) {
	t, rng := w.t, w.rng
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		w.randWrite(ctx)
	}

	// Before the writes: the live path. An auditor (an admin) on each whole
	// resource sees every change, so both paths carry the whole log.
	var early []*propSub
	auditor := propPrincipal{id: "auditor", admin: true, clearance: 1, orgs: []string{"o0"}}
	for _, r := range w.res {
		c, p, grants := w.connect(auditor, true) // no token grants narrowing it
		early = append(early, w.subscribe(c, auditor, p, grants, propScope{res: r, conds: map[string][]string{}}, "", nil))
	}
	for i := 0; i < 14; i++ {
		early = append(early, w.newSub())
	}
	for _, s := range early {
		w.await(s.settled, s.id+" catching up")
	}
	type stored struct {
		s      *propSub
		cursor string
		copy   map[string]propDoc
	}
	var atStart, midway []stored
	for _, s := range early {
		if s.decision == mAllow {
			cur, cp := s.checkpoint()
			atStart = append(atStart, stored{s, cur, cp})
		}
	}

	var during []*propSub
	for i := 0; i < writes; i++ {
		w.randWrite(ctx)
		switch {
		case i%(writes/8) == writes/16:
			// Without a cursor while writes go on: snapshot and replay race
			// the live path.
			during = append(during, w.newSub(), w.newSub())
		case i%(writes/10) == writes/20:
			// A client stores its copy and cursor now (perhaps mid-snapshot)
			// and comes back with them later.
			all := append(append([]*propSub{}, early...), during...)
			s := all[rng.IntN(len(all))]
			if s.decision == mAllow {
				cur, cp := s.checkpoint()
				midway = append(midway, stored{s, cur, cp})
			}
		case i == writes/2:
			for _, m := range midway {
				during = append(during, w.resume(m.s, m.cursor, m.copy))
			}
			midway = midway[:0]
		}
	}
	// After the writes, once the engine has dispatched all of them (so the
	// late subscriptions' high-water covers the whole log): resume from
	// cursors stored mid-way and from before any write (a replay of the
	// whole log).
	w.barrier(ctx, 1)
	var late []*propSub
	for _, m := range append(midway, atStart...) {
		late = append(late, w.resume(m.s, m.cursor, m.copy))
	}
	all := append(append(append([]*propSub{}, early...), during...), late...)
	for _, s := range all {
		w.await(s.settled, s.id+" catching up")
	}

	// Every subscription is live: a fence row written now reaches each
	// connection after every change before it.
	w.barrier(ctx, 2)

	if st := w.e.Stats(); st.Dropped != 0 {
		t.Fatalf("%d live changes were dropped: the fence does not prove delivery", st.Dropped)
	}
	// The model of the database agrees with the feed.
	for _, r := range w.res {
		rows, err := r.table.Rows(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(w.db[r.name]) {
			t.Fatalf("%s: feed has %d rows, model %d", r.name, len(rows), len(w.db[r.name]))
		}
		for _, row := range rows {
			if w.db[r.name][row.ID] != row {
				t.Fatalf("%s: feed row %+v, model %+v", r.name, row, w.db[r.name][row.ID])
			}
		}
	}
	// Convergence: each copy is exactly the visible part of its scope.
	allowed, denied, catchUp, live, visibleRows := 0, 0, 0, 0, 0
	for _, s := range all {
		s.conn.mu.Lock()
		catchUp += s.catchUpN
		live += s.liveN
		if s.decision != mAllow {
			denied++
			s.conn.mu.Unlock()
			continue
		}
		allowed++
		want := map[string]propDoc{}
		for k, d := range w.db[s.scope.res.name] {
			if s.scope.match(&d) && s.scope.res.filter.visible(s.p, &d) {
				want[k] = d
			}
		}
		visibleRows += len(want)
		if !maps.Equal(s.copy, want) {
			w.fail("%s (%s on %s %v, filter %d): copy has %d rows, want %d; missing %v, extra %v",
				s.id, s.pp.id, s.scope.res.name, s.scope.conds, s.scope.res.filter, len(s.copy), len(want), diffKeys(want, s.copy), diffKeys(s.copy, want))
		}
		s.conn.mu.Unlock()
	}
	head, _ := w.e.Feed().Head(ctx)
	t.Logf("%d changes in the log; %d subscriptions allowed, %d denied; entries delivered: %d in catch-up (snapshot and replay), %d live; %d visible rows at the end",
		head, allowed, denied, catchUp, live, visibleRows)
	if head < 10_000 && !testing.Short() {
		t.Fatalf("only %d changes", head)
	}
	for _, f := range w.failures {
		t.Error(f)
	}
	return catchUp, live
}

func diffKeys(a, b map[string]propDoc) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
