package client

// At most once across restarts (docs/writes.md, "Restarts"): a mutation
// restored from a FileStore is resent under the origin the store records,
// so the server answers it from its record instead of running it again.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
)

type addArgs struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// addCountingMutator declares todos.add on srv: it counts its run in the
// runs table (plain SQL, in the mutation's transaction, so a run counts
// only if it commits) and upserts the todo. Each run sends its id on
// started, when started is not nil and not full.
func addCountingMutator(t *testing.T, srv *pgServer, started chan<- string) {
	t.Helper()
	err := core.AddMutator(srv.todos, "add", core.Mutator[addArgs]{
		Authorize: func(context.Context, authz.Principal, addArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a addArgs) error {
			if _, err := pgfeed.TxOf(tx.Feed()).Exec(ctx, "INSERT INTO runs (id) VALUES ($1)", a.ID); err != nil {
				return err
			}
			if started != nil {
				select {
				case started <- a.ID:
				default:
				}
			}
			return srv.todos.UpsertTx(ctx, tx, todo{ID: a.ID, ProjectID: "p1", Title: a.Title})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lockTodos holds a lock that stalls every write of the todos table (a
// mutator's included) until the returned release is called.
func lockTodos(ctx context.Context, t *testing.T, srv *pgServer) (release func()) {
	t.Helper()
	tx, err := srv.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE todos IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			if err := tx.Commit(context.Background()); err != nil {
				t.Errorf("release the lock: %v", err)
			}
		}
	}
	t.Cleanup(release)
	return release
}

func waitStarted(ctx context.Context, t *testing.T, started <-chan string, id string) {
	t.Helper()
	for {
		select {
		case got := <-started:
			if got == id {
				return
			}
		case <-ctx.Done():
			t.Fatalf("the mutator of %s did not start", id)
		}
	}
}

// TestRestoredMutationIsReplayed: a mutation
// stalled on the server (a lock held on its table) while the client quits
// before the ack; a new Client on the same FileStore, with the default
// origin, resends it, and the server answers from its record: the mutator
// ran once and the restored mutation is Replayed.
func TestRestoredMutationIsReplayed(t *testing.T) {
	ctx := testCtx(t)
	srv := newPGServer(t, core.Config{}, authz.Allow)
	started := make(chan string, 16)
	addCountingMutator(t, srv, started)
	path := filepath.Join(t.TempDir(), "store.json")

	release := lockTodos(ctx, t, srv)
	store1, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := newTestClient(t, Config{URL: srv.url, Store: store1})
	h1 := start(t, c1)
	m, err := c1.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: addArgs{ID: "n1", Title: "once"}})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(ctx, t, started, "n1")
	h1.stop(t) // the client quits before the ack
	release()  // the mutation commits, with nobody to ack

	store2, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := newTestClient(t, Config{URL: srv.url, Store: store2})
	if c2.Origin() != c1.Origin() {
		t.Errorf("the second client's origin %q is not the store's %q", c2.Origin(), c1.Origin())
	}
	pending := c2.Pending()
	if len(pending) != 1 || pending[0].Key() != m.Key() {
		t.Fatalf("restored %v, want the mutation %s", keysOfPending(pending), m.Key())
	}
	start(t, c2)
	res, err := pending[0].Wait(ctx)
	if err != nil {
		t.Fatalf("restored mutation: %v", err)
	}
	if !res.Replayed {
		t.Errorf("the restored mutation was not answered replayed: %+v", res)
	}
	if n := srv.runs(t)["n1"]; n != 1 {
		t.Errorf("the mutator ran %d times, want once", n)
	}

	// Config.Origin still overrides the stored origin.
	store3, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c3, _ := newTestClient(t, Config{URL: srv.url, Store: store3, Origin: "fixed"})
	if c3.Origin() != "fixed" {
		t.Errorf("Config.Origin %q did not override the store's", c3.Origin())
	}
}

// forgetfulStore is the sabotage of the restart check: a FileStore that
// loses its origin between clients, as the client did before the origin
// lived in the store.
type forgetfulStore struct{ *FileStore }

func (s forgetfulStore) LoadMeta(ctx context.Context) (Meta, error) {
	m, err := s.FileStore.LoadMeta(ctx)
	m.Origin = ""
	return m, err
}

// restartCheck is the outcome of one run of the randomized restart check.
type restartCheck struct {
	rounds, mutations, stalls, restored int
	acked, replayed                     int
	problems                            []string
}

// TestAtMostOnceAcrossRestarts is the randomized at-most-once check: Go
// clients of three devices (three FileStores, the default origin)
// start and stop at random while mutating, offline, online, and with
// mutations stalled on the server (a lock held on their table) when they
// quit; at the end every device runs until its queue is empty. A checker
// reads Postgres and fails on any mutation applied twice, any acknowledged
// mutation missing, any mutation lost or left pending after quiesce.
//
// Seeded: the seed is logged, TIDE_SEED=<n> replays its choices (not the
// timing). TIDE_ROUNDS sets the rounds (default 100). Sabotage:
// TIDE_SABOTAGE=forget-origin makes every client forget the store's
// origin, and the check must fail (TestRestartCheckCatchesForgottenOrigin
// runs that in every run).
func TestAtMostOnceAcrossRestarts(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("TIDE_SEED: %v", err)
		}
	}
	rounds := 100
	if s := os.Getenv("TIDE_ROUNDS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("TIDE_ROUNDS=%q", s)
		}
	}
	sabotage := os.Getenv("TIDE_SABOTAGE") == "forget-origin"
	t.Logf("seed %d (TIDE_SEED=%d go test -run TestAtMostOnceAcrossRestarts ./client/ replays its choices), %d rounds, sabotage %v", seed, seed, rounds, sabotage)
	res := runRestartCheck(t, seed, rounds, sabotage)
	t.Logf("%d rounds, %d mutations (%d restored by a later client, %d stalled at a quit): %d acknowledged, %d of them replayed; %d problems",
		res.rounds, res.mutations, res.restored, res.stalls, res.acked, res.replayed, len(res.problems))
	for _, p := range res.problems {
		t.Error(p)
	}
}

// TestRestartCheckCatchesForgottenOrigin proves the checker of
// TestAtMostOnceAcrossRestarts fires: with clients that forget the
// store's origin, a mutation stalled at a quit runs twice.
func TestRestartCheckCatchesForgottenOrigin(t *testing.T) {
	res := runRestartCheck(t, 1, 4, true)
	if !slices.ContainsFunc(res.problems, func(p string) bool { return strings.Contains(p, "applied 2 times") }) {
		t.Errorf("the checker found no mutation applied twice with the origin forgotten: %+v", res)
	}
}

// runRestartCheck runs the randomized restart check; with sabotage every
// client forgets its store's origin. Rounds are chosen by the seed, except
// that the first stalls a mutation, so that a sabotaged run surely has a
// mutation to run twice.
func runRestartCheck(t *testing.T, seed uint64, rounds int, sabotage bool) restartCheck {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // the check's bound
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	srv := newPGServer(t, core.Config{}, authz.Allow)
	started := make(chan string, 64)
	addCountingMutator(t, srv, started)
	dir := t.TempDir()
	const devices = 3
	var out restartCheck

	made := map[string]string{}    // mutation key → id
	acked := map[string]bool{}     // ids acknowledged
	rejected := map[string]error{} // ids rejected
	owner := map[string]int{}      // id → device
	// record notes the answers of handles that have one.
	record := func(hs []*PendingMutation) {
		for _, h := range hs {
			select {
			case <-h.Done():
			default:
				continue
			}
			id := made[h.Key()]
			res, err := h.Wait(ctx)
			switch {
			case err == nil:
				if !acked[id] {
					out.acked++
					if res.Replayed {
						out.replayed++
					}
				}
				acked[id] = true
			default:
				rejected[id] = err
			}
		}
	}
	open := func(dev int) (*Client, []*PendingMutation) {
		fs, err := NewFileStore(filepath.Join(dir, fmt.Sprintf("device-%d.json", dev)))
		if err != nil {
			t.Fatal(err)
		}
		var store CursorStore = fs
		if sabotage {
			store = forgetfulStore{fs}
		}
		c, _ := newTestClient(t, Config{URL: srv.url, Store: store})
		if _, err := c.Sync(p1); err != nil {
			t.Fatal(err)
		}
		restored := c.Pending()
		out.restored += len(restored)
		return c, restored
	}
	mutate := func(c *Client, dev, round, i int) *PendingMutation {
		id := fmt.Sprintf("d%d-r%d-%d", dev, round, i)
		title := fmt.Sprintf("t%d", rng.IntN(1000))
		m, err := c.Mutate(ctx, Mutation{Resource: "todos", Name: "add", Args: addArgs{ID: id, Title: title},
			Local: func(tx *LocalTx) error { return tx.Upsert("todos", id, todoRow(id, title)) }})
		if err != nil {
			t.Fatalf("Mutate %s: %v", id, err)
		}
		made[m.Key()], owner[id] = id, dev
		out.mutations++
		return m
	}
	waitAnswered := func(hs []*PendingMutation) {
		for _, h := range hs {
			select {
			case <-h.Done():
			case <-ctx.Done():
				t.Fatalf("mutation %s was not answered while its client ran", made[h.Key()])
			}
		}
	}

	for round := range rounds {
		if ctx.Err() != nil {
			t.Fatalf("the check's time ran out at round %d", round)
		}
		out.rounds++
		dev := rng.IntN(devices)
		c, restored := open(dev)
		mode := rng.IntN(4) // 0 offline, 1 online and settle, 2 online and quit at once, 3 stall at the quit
		if round == 0 {
			mode = 3
		}
		if mode == 0 {
			for i := range 1 + rng.IntN(3) {
				mutate(c, dev, round, i)
			}
			continue // never run: the mutations stay queued in the store
		}
		h := start(t, c)
		var hs []*PendingMutation
		for i := range rng.IntN(4) {
			hs = append(hs, mutate(c, dev, round, i))
		}
		switch mode {
		case 1:
			waitAnswered(c.Pending())
		case 3:
			// Everything sent so far answered, the next mutation is the
			// one the server runs next on this connection: stall it.
			waitAnswered(c.Pending())
			for len(started) > 0 {
				<-started // runs of earlier mutations: room for this one's
			}
			release := lockTodos(ctx, t, srv)
			m := mutate(c, dev, round, 9)
			hs = append(hs, m)
			waitStarted(ctx, t, started, made[m.Key()])
			if err := h.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v", err)
			}
			release()
			out.stalls++
		}
		if err := h.stop(t); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		record(slices.Concat(restored, hs, c.Pending()))
	}

	// Quiesce: every device runs until its queue is empty.
	var pendingAfter []string
	for dev := range devices {
		c, hs := open(dev)
		h := start(t, c)
		qctx, qcancel := context.WithTimeout(ctx, failAfter)
		for _, m := range hs {
			select {
			case <-m.Settled():
			case <-qctx.Done():
			}
		}
		qcancel()
		record(hs)
		for _, m := range c.Pending() {
			pendingAfter = append(pendingAfter, made[m.Key()])
		}
		_ = h.stop(t)
	}

	// The checker.
	runs := srv.runs(t)
	var ids []string
	for _, id := range made {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := runs[id]
		switch {
		case n > 1:
			out.problems = append(out.problems, fmt.Sprintf("mutation %s (device %d) applied %d times", id, owner[id], n))
		case n == 0 && acked[id]:
			out.problems = append(out.problems, fmt.Sprintf("mutation %s (device %d) acknowledged but not applied", id, owner[id]))
		case n == 0 && rejected[id] == nil && !slices.Contains(pendingAfter, id):
			out.problems = append(out.problems, fmt.Sprintf("mutation %s (device %d) lost: neither applied, rejected nor pending", id, owner[id]))
		}
		if err := rejected[id]; err != nil {
			out.problems = append(out.problems, fmt.Sprintf("mutation %s (device %d) rejected: %v", id, owner[id], err))
		}
	}
	for _, id := range pendingAfter {
		out.problems = append(out.problems, fmt.Sprintf("mutation %s (device %d) left pending after quiesce", id, owner[id]))
	}
	for id, n := range runs {
		if _, ok := owner[id]; !ok {
			out.problems = append(out.problems, fmt.Sprintf("a run of %s, which no client made (%d)", id, n))
		}
	}
	return out
}
