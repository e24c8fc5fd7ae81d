package pgfeed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// mItem is the row the mutations of the property test write.
type mItem struct {
	ID      string `tide:"id,pk" json:"id"`
	Project string `tide:"project,scope" json:"project"`
	Val     int64  `tide:"val" json:"val"`
	By      string `tide:"by" json:"by"`
}

// mApplied is one committed run of a mutator: a key applied twice leaves
// two rows.
type mApplied struct {
	ID      string `tide:"id,pk"`
	Project string `tide:"project,scope"`
	Key     string `tide:"key"`
}

type mArgs struct {
	ID  string `json:"id"`
	Val int64  `json:"val"`
	By  string `json:"by"`
	Key string `json:"key"`
}

const mDDL = `CREATE TABLE m_items (id text PRIMARY KEY, project text NOT NULL, val bigint NOT NULL, by text NOT NULL);
CREATE TABLE m_applied (id text PRIMARY KEY, project text NOT NULL, key text NOT NULL)`

// killDialer dials WebSockets whose connections the test can cut at once.
type killDialer struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (k *killDialer) dialer() *websocket.Dialer {
	return &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				k.mu.Lock()
				k.conns = append(k.conns, c)
				k.mu.Unlock()
			}
			return c, err
		},
	}
}

// kill cuts every connection dialed so far.
func (k *killDialer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

// TestMutationsProperty: several clients mutate overlapping rows
// optimistically while their connections are cut at random — before a
// mutation is sent, after it is sent and before its ack, after its ack —
// and resend on reconnect; one mutator conflicts on the server. At the end
// every key was applied at most once, every acknowledged mutation exactly
// once and no rejected one, no mutation is pending, and every client's copy
// equals the database. It runs on Postgres and on the in-memory feed.
func TestMutationsProperty(t *testing.T) {
	for _, backend := range []string{"postgres", "memfeed"} {
		t.Run(backend, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			runMutationsProperty(t, backend, seed)
		})
	}
}

func runMutationsProperty(t *testing.T, backend string, seed uint64) {
	ctx, cancel := context.WithCancel(testenv.Context(t)) // a failure bound only
	defer cancel()
	var f feed.Feed
	if backend == "postgres" {
		pool, schema := testenv.PostgresSchema(t)
		if _, err := pool.Exec(ctx, mDDL); err != nil {
			t.Fatal(err)
		}
		pf, err := pgfeed.New(pool, pgfeed.Options{Schema: schema + "_tide", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pf.Close() })
		f = pf
	} else {
		f = memfeed.New(memfeed.Options{})
	}
	e, err := core.New(core.Config{Feed: f, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	member := func(_ context.Context, r authz.Request) error {
		if r.Principal.IsAnonymous() {
			return authz.ErrUnauthenticated
		}
		return nil
	}
	items, err := core.Register(e, core.Resource[mItem]{Table: "m_items", Name: "items", Authorize: member})
	if err != nil {
		t.Fatal(err)
	}
	applied, err := core.Register(e, core.Resource[mApplied]{Table: "m_applied", Name: "applied", Authorize: member})
	if err != nil {
		t.Fatal(err)
	}
	if pf, ok := f.(*pgfeed.Feed); ok {
		if err := pf.Migrate(ctx, e.Schemas()...); err != nil {
			t.Fatal(err)
		}
	}
	allow := func(_ context.Context, p authz.Principal, _ mArgs) error {
		if p.IsAnonymous() {
			return authz.ErrUnauthenticated
		}
		return nil
	}
	record := func(ctx context.Context, tx *core.Tx, a mArgs) error {
		// One row per committed run: the key and a fresh id.
		return applied.UpsertTx(ctx, tx, mApplied{ID: fmt.Sprintf("%s/%d", a.Key, rand.Int64()), Project: "p", Key: a.Key})
	}
	if err := core.AddMutator(items, "put", core.Mutator[mArgs]{
		Authorize: allow,
		Run: func(ctx context.Context, tx *core.Tx, a mArgs) error {
			if pg := pgfeed.TxOf(tx.Feed()); pg != nil {
				// Any SQL, in the mutation's transaction.
				if _, err := pg.Exec(ctx, `INSERT INTO m_items (id, project, val, by) VALUES ($1, 'p', $2, $3)
ON CONFLICT (id) DO UPDATE SET val = excluded.val, by = excluded.by`, a.ID, a.Val, a.By); err != nil {
					return err
				}
			} else if err := items.UpsertTx(ctx, tx, mItem{ID: a.ID, Project: "p", Val: a.Val, By: a.By}); err != nil {
				return err
			}
			return record(ctx, tx, a)
		},
	}); err != nil {
		t.Fatal(err)
	}
	if err := core.AddMutator(items, "claim", core.Mutator[mArgs]{
		Authorize: allow,
		Run: func(ctx context.Context, tx *core.Tx, a mArgs) error {
			// A conflict raised by the server: the row is taken.
			if a.Val%3 == 0 {
				return fmt.Errorf("%w: %s is taken", core.ErrConflict, a.ID)
			}
			if err := items.UpsertTx(ctx, tx, mItem{ID: a.ID, Project: "p", Val: a.Val, By: a.By}); err != nil {
				return err
			}
			return record(ctx, tx, a)
		},
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(func(*http.Request) (authz.Principal, error) {
		return authz.Principal{ID: "u"}, nil
	}))(http.NotFoundHandler()))
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = e.Shutdown(sctx)
		srv.Close()
	})
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"

	const clients, ops = 4, 25
	scope := client.Scope{Resource: "items", Conditions: map[string]any{"project": "p"}}
	type outcome struct {
		acked, rejected map[string]bool
	}
	results := make([]outcome, clients)
	subs := make([]*client.Subscription, clients)
	cls := make([]*client.Client, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for ci := range clients {
		kd := &killDialer{}
		c, err := client.New(client.Config{URL: url, Dialer: kd.dialer(), Origin: fmt.Sprintf("dev%d", ci), MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Sync(scope)
		if err != nil {
			t.Fatal(err)
		}
		cls[ci], subs[ci] = c, sub
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		results[ci] = outcome{acked: map[string]bool{}, rejected: map[string]bool{}}
		rng := rand.New(rand.NewPCG(seed, uint64(ci)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var handles []*client.PendingMutation
			for i := range ops {
				key := fmt.Sprintf("c%d-%d", ci, i)
				a := mArgs{ID: fmt.Sprintf("r%d", rng.IntN(6)), Val: rng.Int64N(1000), By: key, Key: key}
				name := "put"
				if rng.IntN(3) == 0 {
					name = "claim"
				}
				mode := rng.IntN(4)
				if mode == 1 {
					kd.kill() // before it is sent: it waits in the offline queue
				}
				h, err := c.Mutate(ctx, client.Mutation{Resource: "items", Name: name, Args: a, Key: key,
					Local: func(tx *client.LocalTx) error {
						return tx.Upsert("items", a.ID, mItem{ID: a.ID, Project: "p", Val: a.Val, By: a.By})
					}})
				if err != nil {
					errs <- fmt.Errorf("client %d: Mutate: %w", ci, err)
					return
				}
				handles = append(handles, h)
				switch mode {
				case 2:
					kd.kill() // sent (or about to be), not answered yet
				case 3:
					_, _ = h.Wait(ctx)
					kd.kill() // after its ack
				}
			}
			for _, h := range handles {
				_, err := h.Wait(ctx)
				var rej *client.RejectError
				switch {
				case err == nil:
					results[ci].acked[h.Key()] = true
				case errors.As(err, &rej):
					results[ci].rejected[h.Key()] = true
				default:
					errs <- fmt.Errorf("client %d: %s: %w", ci, h.Key(), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Every key applied at most once; every ack exactly once; no reject.
	runs, err := applied.Rows(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range runs {
		count[r.Key]++
	}
	total := 0
	for ci, res := range results {
		for k := range res.acked {
			if count[k] != 1 {
				t.Errorf("client %d: acknowledged %s was applied %d times", ci, k, count[k])
			}
		}
		for k := range res.rejected {
			if count[k] != 0 {
				t.Errorf("client %d: rejected %s was applied %d times", ci, k, count[k])
			}
		}
		if len(res.acked)+len(res.rejected) != ops {
			t.Errorf("client %d: %d acks and %d rejects for %d mutations", ci, len(res.acked), len(res.rejected), ops)
		}
		total += len(res.rejected)
	}
	for k, n := range count {
		if n > 1 {
			t.Errorf("key %s applied %d times", k, n)
		}
	}
	t.Logf("%d mutations, %d rejected by the server", clients*ops, total)

	// Every copy converges on the database, with nothing pending.
	dbRows, err := items.Rows(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]mItem{}
	for _, r := range dbRows {
		want[r.ID] = r
	}
	for ci, sub := range subs {
		for _, p := range cls[ci].Pending() {
			select {
			case <-p.Settled():
			case <-ctx.Done():
				t.Fatalf("client %d: mutation %s never settled", ci, p.Key())
			}
		}
		for {
			ch := sub.Changed()
			if sameItems(sub.Rows(), want) && len(cls[ci].Pending()) == 0 {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("client %d did not converge: %d pending, rows %s, want %v", ci, len(cls[ci].Pending()), sub.Rows(), want)
			}
		}
	}
}

func sameItems(rows map[string]json.RawMessage, want map[string]mItem) bool {
	if len(rows) != len(want) {
		return false
	}
	for k, raw := range rows {
		var got mItem
		if err := json.Unmarshal(raw, &got); err != nil || got != want[k] {
			return false
		}
	}
	return true
}

// TestOwnWriteWhileOfflineConverges: a write the app makes for a device
// (tagged with its origin) while the device is offline reaches the
// device's copy when it reconnects, in the replay.
func TestOwnWriteWhileOfflineConverges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure bound only
	defer cancel()
	pool, schema := testenv.PostgresSchema(t)
	if _, err := pool.Exec(ctx, mDDL); err != nil {
		t.Fatal(err)
	}
	pf, err := pgfeed.New(pool, pgfeed.Options{Schema: schema + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pf.Close() })
	e, err := core.New(core.Config{Feed: pf, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[mItem]{Table: "m_items", Name: "items", Authorize: authz.Authenticated}); err != nil {
		t.Fatal(err)
	}
	if err := pf.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(func(*http.Request) (authz.Principal, error) {
		return authz.Principal{ID: "u"}, nil
	}))(http.NotFoundHandler()))
	t.Cleanup(func() { _ = e.Shutdown(context.Background()); srv.Close() })
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"
	scope := client.Scope{Resource: "items", Conditions: map[string]any{"project": "p"}}
	store := client.NewMemoryStore()
	write := func(id string, val int64) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := pgfeed.SetClientOrigin(ctx, tx, "phone"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO m_items (id, project, val, by) VALUES ($1, 'p', $2, 'app')`, id, val); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	session := func(want int) {
		t.Helper()
		c, err := client.New(client.Config{URL: url, Origin: "phone", Store: store})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Sync(scope)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(runCtx) }()
		defer func() { stop(); <-done }()
		if err := sub.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		for {
			ch := sub.Changed()
			if len(sub.Rows()) == want {
				return
			}
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("the copy has %d rows, want %d: %s", len(sub.Rows()), want, sub.Rows())
			}
		}
	}
	write("a", 1)
	session(1)
	write("b", 2) // the device is offline; the app writes on its behalf
	session(2)
}
