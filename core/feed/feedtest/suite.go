package feedtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// Harness makes fresh feeds for the suite.
type Harness interface {
	// New returns a fresh, empty feed holding the given resources, and its
	// writer: Items and Notes, or Values (a harness of a Postgres-backed
	// feed creates its table with ValuesSQL). It registers cleanup with t. Unless the harness implements
	// Serial, New is called from parallel subtests.
	New(t *testing.T, schemas ...*feed.Schema) (feed.Feed, feed.Writer)
	// Prune makes f drop every change at or below through (the feed's
	// retention mechanism).
	Prune(t *testing.T, f feed.Feed, through feed.Position)
}

// Serial may be implemented by a Harness whose feeds cannot coexist, for
// example because they share tables. When Serial returns true, Run runs its
// subtests one at a time instead of in parallel.
type Serial interface {
	Serial() bool
}

// SeedEnv is the environment variable that overrides the seed of the
// randomized subtests, to reproduce a failure: TIDE_SEED=1234 go test ./...
const SeedEnv = "TIDE_SEED"

// timeout bounds every subtest, so a feed whose Tail never wakes fails the
// test instead of hanging it. It is a safety net, not a timing assertion.
const timeout = 2 * time.Minute

// Run runs the feed conformance suite against the feeds h makes. Every
// subtest takes a fresh feed holding Items and Notes, but CompositeKeys,
// whose feed holds Members.
func Run(t *testing.T, h Harness) {
	s := &suite{h: h, seed: seed(t)}
	if sh, ok := h.(Serial); ok {
		s.serial = sh.Serial()
	}
	t.Run("Fresh", s.testFresh)
	t.Run("InsertUpdateDelete", s.testInsertUpdateDelete)
	t.Run("MoveBetweenScopes", s.testMove)
	t.Run("ApplyAtomicOrdered", s.testApplyAtomic)
	t.Run("ApplyInvalid", s.testApplyInvalid)
	t.Run("Positions", s.testPositions)
	t.Run("Tail", s.testTail)
	t.Run("ValueKinds", s.testValueKinds)
	t.Run("Replay", s.testReplay)
	t.Run("Snapshot", s.testSnapshot)
	t.Run("Count", s.testCount)
	t.Run("Sample", s.testSample)
	t.Run("Random", s.testRandom)
	t.Run("ConcurrentWriters", s.testConcurrent)
	t.Run("Retention", s.testRetention)
	t.Run("PruneBeyondHead", s.testPruneBeyondHead)
	t.Run("TransactWritten", s.testTransactWritten)
	t.Run("CompositeKeys", s.testCompositeKeys)
}

type suite struct {
	h      Harness
	serial bool
	seed   uint64
}

// seed returns the seed from SeedEnv, or a random one, and logs it.
func seed(t *testing.T) uint64 {
	if v := os.Getenv(SeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("feedtest: %s=%q is not an unsigned integer", SeedEnv, v)
		}
		t.Logf("feedtest: seed %d (from %s)", n, SeedEnv)
		return n
	}
	n := rand.Uint64() >> 1
	t.Logf("feedtest: seed %d (set %s=%d to reproduce)", n, SeedEnv, n)
	return n
}

// rng returns the random source of one subtest: the same for the same seed.
func (s *suite) rng(salt uint64) *rand.Rand {
	return rand.New(rand.NewPCG(s.seed, salt))
}

// env is one subtest's fresh feed.
type env struct {
	t   *testing.T
	ctx context.Context
	f   feed.Feed
	w   feed.Writer
	s   *suite
	// schemas are the resources the feed holds.
	schemas []*feed.Schema
}

// setup marks t parallel (unless the harness is serial) and makes a fresh feed.
func (s *suite) setup(t *testing.T) *env {
	t.Helper()
	if !s.serial {
		t.Parallel()
	}
	return s.setupWith(t, Items, Notes)
}

// setupWith makes a fresh feed holding schemas.
func (s *suite) setupWith(t *testing.T, schemas ...*feed.Schema) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	f, w := s.h.New(t, schemas...)
	if f == nil || w == nil {
		t.Fatal("feedtest: Harness.New returned a nil feed or writer")
	}
	return &env{t: t, ctx: ctx, f: f, w: w, s: s, schemas: schemas}
}

// apply writes muts and fails the test on error.
func (e *env) apply(origin string, muts ...feed.Mutation) {
	e.t.Helper()
	if err := e.w.Apply(e.ctx, origin, muts...); err != nil {
		e.t.Fatalf("Apply(%q, %d mutations): %v", origin, len(muts), err)
	}
}

func (e *env) head() feed.Position {
	e.t.Helper()
	p, err := e.f.Head(e.ctx)
	if err != nil {
		e.t.Fatalf("Head: %v", err)
	}
	return p
}

// tail returns every change in (after, until] through Tail. Head need not be
// the position of a change, so it asks Replay whether any change is left
// before each Tail, which would block otherwise.
func (e *env) tail(after, until feed.Position) []feed.Change {
	e.t.Helper()
	var out []feed.Change
	for after < until && e.pending(after, until) {
		cs, err := e.f.Tail(e.ctx, after, 1000)
		if err != nil {
			e.t.Fatalf("Tail(after %d): %v", after, err)
		}
		if len(cs) == 0 {
			e.t.Fatalf("Tail(after %d) returned no changes and no error", after)
		}
		checkIncreasing(e.t, "Tail", after, cs)
		for _, c := range cs {
			if c.Pos <= until {
				out = append(out, c)
			}
		}
		after = cs[len(cs)-1].Pos
	}
	return out
}

// pending reports whether any change of the feed's resources lies in
// (after, until], according to Replay.
func (e *env) pending(after, until feed.Position) bool {
	e.t.Helper()
	for _, s := range e.schemas {
		sc := feed.NewScope(s, nil)
		cs, err := e.f.Replay(e.ctx, feed.ReplayQuery{Scope: sc, After: after, Until: until, Limit: 1})
		if err != nil {
			e.t.Fatalf("Replay(%s, after %d, until %d): %v", sc.Key(), after, until, err)
		}
		if len(cs) > 0 {
			return true
		}
	}
	return false
}

// noChangesAfter fails the test if any change lies after p, up to the head.
func (e *env) noChangesAfter(p feed.Position, what string) {
	e.t.Helper()
	h := e.head()
	if h < p {
		e.t.Fatalf("%s: Head went back from %d to %d", what, p, h)
	}
	if e.pending(p, h) {
		e.t.Fatalf("%s produced changes: %s", what, fmtChanges(e.tail(p, h)))
	}
}

func fmtChanges(cs []feed.Change) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = fmtChange(c)
	}
	return strings.Join(s, ", ")
}

// all returns every change in the feed, through Tail.
func (e *env) all() []feed.Change {
	e.t.Helper()
	return e.tail(0, e.head())
}

// replay pages through Replay of scope in (after, until] by limit and
// returns the changes. Between pages it calls between, if not nil.
func (e *env) replay(scope feed.Scope, after, until feed.Position, limit int, between func()) []feed.Change {
	e.t.Helper()
	var out []feed.Change
	for pages := 0; ; pages++ {
		if pages > 100000 {
			e.t.Fatal("Replay: paging does not end")
		}
		cs, err := e.f.Replay(e.ctx, feed.ReplayQuery{Scope: scope, After: after, Until: until, Limit: limit})
		if err != nil {
			e.t.Fatalf("Replay(%s, after %d, until %d, limit %d): %v", scope.Key(), after, until, limit, err)
		}
		if len(cs) > limit {
			e.t.Fatalf("Replay(%s, limit %d) returned %d changes", scope.Key(), limit, len(cs))
		}
		checkIncreasing(e.t, "Replay", after, cs)
		for _, c := range cs {
			if c.Pos > until {
				e.t.Fatalf("Replay(%s, until %d) returned position %d", scope.Key(), until, c.Pos)
			}
			if !inScope(scope, c) {
				e.t.Fatalf("Replay(%s) returned a change outside the scope: %s", scope.Key(), fmtChange(c))
			}
		}
		out = append(out, cs...)
		if len(cs) < limit {
			return out
		}
		after = cs[len(cs)-1].Pos
		if between != nil {
			between()
		}
	}
}

// snapshot pages through Snapshot of scope by limit, calling between (if
// not nil) between pages. It checks that every row is in the scope and
// appears once, and returns the rows and the Pos of the first and last page.
func (e *env) snapshot(scope feed.Scope, limit int, between func()) (rows Rows, first, last feed.Position) {
	e.t.Helper()
	rows = make(Rows)
	q := feed.SnapshotQuery{Scope: scope, Limit: limit}
	for pages := 0; ; pages++ {
		if pages > 100000 {
			e.t.Fatal("Snapshot: paging does not end")
		}
		page, err := e.f.Snapshot(e.ctx, q)
		if err != nil {
			e.t.Fatalf("Snapshot(%s, after %q/%v, limit %d): %v", scope.Key(), q.After, q.HasAfter, limit, err)
		}
		if len(page.Rows) > limit {
			e.t.Fatalf("Snapshot(%s, limit %d) returned %d rows", scope.Key(), limit, len(page.Rows))
		}
		if pages == 0 {
			first = page.Pos
		} else if page.Pos < last {
			e.t.Fatalf("Snapshot page position went back from %d to %d", last, page.Pos)
		}
		last = page.Pos
		for _, c := range page.Rows {
			if c.Op != feed.OpUpsert {
				e.t.Fatalf("Snapshot row %s has op %v, want upsert", c.Key, c.Op)
			}
			if !inScope(scope, c) {
				e.t.Fatalf("Snapshot(%s) returned a row outside the scope: %s", scope.Key(), fmtChange(c))
			}
			id := RowID{c.Resource, c.Key}
			if _, dup := rows[id]; dup {
				e.t.Fatalf("Snapshot(%s, limit %d) returned row %s twice", scope.Key(), limit, id)
			}
			rows[id] = c
		}
		if len(page.Rows) < limit {
			return rows, first, last
		}
		q.After, q.HasAfter = page.Rows[len(page.Rows)-1].Key, true
		if between != nil {
			between()
		}
	}
}

func inScope(s feed.Scope, c feed.Change) bool {
	return c.Resource == s.Schema.Name && s.Match(c.Scope)
}

// filter returns the changes of cs in scope with after < Pos <= until.
func filter(cs []feed.Change, scope feed.Scope, after, until feed.Position) []feed.Change {
	var out []feed.Change
	for _, c := range cs {
		if c.Pos > after && c.Pos <= until && inScope(scope, c) {
			out = append(out, c)
		}
	}
	return out
}

// onlyScope returns the rows of rows in scope.
func onlyScope(rows Rows, scope feed.Scope) Rows {
	out := make(Rows)
	for id, c := range rows {
		if inScope(scope, c) {
			out[id] = c
		}
	}
	return out
}

// checkIncreasing fails t unless the positions of cs are strictly increasing
// and above after.
func checkIncreasing(t *testing.T, what string, after feed.Position, cs []feed.Change) {
	t.Helper()
	for _, c := range cs {
		if c.Pos <= after {
			t.Fatalf("%s: position %d follows %d (positions must strictly increase)", what, c.Pos, after)
		}
		after = c.Pos
	}
}

// diffChange describes how got differs from want, or returns "". Pos is
// compared only when want has one.
func diffChange(got, want feed.Change) string {
	switch {
	case want.Pos != 0 && got.Pos != want.Pos:
		return fmt.Sprintf("Pos %d, want %d", got.Pos, want.Pos)
	case got.Resource != want.Resource:
		return fmt.Sprintf("Resource %q, want %q", got.Resource, want.Resource)
	case got.Op != want.Op:
		return fmt.Sprintf("Op %v, want %v", got.Op, want.Op)
	case got.Key != want.Key:
		return fmt.Sprintf("Key %q, want %q", got.Key, want.Key)
	case !slices.Equal(got.Scope, want.Scope):
		return fmt.Sprintf("Scope %q, want %q", got.Scope, want.Scope)
	case !JSONEqual(got.Row, want.Row):
		return fmt.Sprintf("Row %s, want %s", got.Row, want.Row)
	case got.Origin != want.Origin:
		return fmt.Sprintf("Origin %q, want %q", got.Origin, want.Origin)
	}
	return ""
}

// checkChanges fails t unless got matches want one by one (see diffChange).
func checkChanges(t *testing.T, what string, got, want []feed.Change) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Fatalf("%s: %d changes, want %d; first missing: %s", what, len(got), len(want), fmtChange(want[i]))
		case i >= len(want):
			t.Fatalf("%s: %d changes, want %d; first extra: %s", what, len(got), len(want), fmtChange(got[i]))
		}
		if d := diffChange(got[i], want[i]); d != "" {
			t.Fatalf("%s: change %d (%s): %s", what, i, fmtChange(got[i]), d)
		}
	}
}

func fmtChange(c feed.Change) string {
	return fmt.Sprintf("{%d %s %v %q scope=%q origin=%q row=%s}", c.Pos, c.Resource, c.Op, c.Key, c.Scope, c.Origin, c.Row)
}

// withOrigin returns c tagged with origin (for expectations).
func withOrigin(origin string, cs ...feed.Change) []feed.Change {
	out := make([]feed.Change, len(cs))
	for i, c := range cs {
		c.Origin = origin
		out[i] = c
	}
	return out
}

// expectExpired fails t unless err is feed.ErrCursorExpired.
func expectExpired(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, feed.ErrCursorExpired) {
		t.Fatalf("%s: error %v, want feed.ErrCursorExpired", what, err)
	}
}
