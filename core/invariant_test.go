package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/synctest"
)

// seed returns the seed for a randomized test: TIDE_SEED if set, else a new
// one. It is logged so a failure can be replayed.
func seed(t *testing.T) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("TIDE_SEED"); v != "" {
		var err error
		if s, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("TIDE_SEED: %v", err)
		}
	}
	t.Logf("seed %d (rerun with TIDE_SEED=%d)", s, s)
	return s
}

// checkedRows is a synctest.Rows that also checks, batch by batch, that
// the applied cursor never moves backwards and that no changes batch is
// applied twice.
type checkedRows struct {
	*synctest.Rows
	caughtUp   chan struct{} // closed at the first caught-up
	once       sync.Once
	mu         sync.Mutex
	last       protocol.Cursor
	has        bool
	violations []string
}

func (m *checkedRows) Apply(ctx context.Context, b client.Batch) error {
	m.mu.Lock()
	if b.Reset {
		m.has = false
	}
	if b.Cursor != "" {
		cur, err := protocol.ParseCursor(b.Cursor)
		if err != nil {
			m.violations = append(m.violations, fmt.Sprintf("unparsable cursor %q", b.Cursor))
		} else if m.has && cur.Epoch == m.last.Epoch {
			behind := cur.Pos < m.last.Pos || (cur.Pos == m.last.Pos && m.last.Snapshot && cur.Snapshot && cur.Seq < m.last.Seq)
			twice := !b.CaughtUp && len(b.Entries) > 0 && cur.Pos == m.last.Pos && !cur.Snapshot && !m.last.Snapshot
			if behind || twice {
				m.violations = append(m.violations, fmt.Sprintf("cursor %s applied after %s", b.Cursor, m.last.String()))
			}
		}
		m.last, m.has = cur, err == nil
	}
	m.mu.Unlock()
	err := m.Rows.Apply(ctx, b)
	if b.CaughtUp {
		m.once.Do(func() { close(m.caughtUp) })
	}
	return err
}

// TestInvariantsRandomized drives concurrent writers (inserts, updates,
// moves between scopes, deletes, multi-row transactions) while clients
// subscribed to random scopes disconnect at random. When writes stop, every
// client's copy must equal the feed's rows for its scope (no gap,
// convergence), and no client ever saw its cursor go backwards or a batch
// applied twice (no regress). Invariants 1, 2 and 4.
func TestInvariantsRandomized(t *testing.T) {
	// Replays of recent ranges come from the engine's memory; with a memory
	// of one change every replay reads the feed (and coalesces there).
	for _, tc := range []struct {
		name  string
		cache int
	}{{"replays from memory", 0}, {"replays from the feed", 1}} {
		t.Run(tc.name, func(t *testing.T) { invariantsRandomized(t, tc.cache) })
	}
}

func invariantsRandomized(t *testing.T, replayCache int) {
	const (
		projects = 5
		clients  = 12
		writers  = 4
		opsEach  = 600
	)
	master := seed(t)
	s := newServer(t, core.Config{PageSize: 7, ReplayCache: replayCache}) // small pages: replay and snapshot span many
	wsURL := s.url
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure bound only
	defer cancel()

	type sub struct {
		conds  map[string]any
		mirror *checkedRows
	}
	rng := rand.New(rand.NewPCG(master, 1))
	var cls []*client.Client
	var subs [][]sub
	var runs sync.WaitGroup
	for i := 0; i < clients; i++ {
		var mine []string
		for p := 0; p < projects; p++ {
			mine = append(mine, fmt.Sprintf("p%d", p))
		}
		c, err := client.New(client.Config{
			URL:        wsURL,
			Header:     http.Header{"X-User": {fmt.Sprintf("u%d", i)}, "X-Projects": {joinComma(mine)}},
			MinBackoff: time.Millisecond,
			MaxBackoff: 20 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		var ss []sub
		for k := 0; k < 1+rng.IntN(2); k++ {
			var conds map[string]any
			if rng.IntN(2) == 0 {
				conds = map[string]any{"project_id": fmt.Sprintf("p%d", rng.IntN(projects))}
			} else {
				a, b := rng.IntN(projects), rng.IntN(projects)
				conds = map[string]any{"project_id": map[string]any{"in": []any{fmt.Sprintf("p%d", a), fmt.Sprintf("p%d", b)}}}
			}
			m := &checkedRows{Rows: synctest.NewRows(), caughtUp: make(chan struct{})}
			if _, err := c.Subscribe(client.Scope{Resource: "todos", Conditions: conds}, m); err != nil {
				if k > 0 {
					continue // the same scope twice on one client
				}
				t.Fatal(err)
			}
			ss = append(ss, sub{conds: conds, mirror: m})
		}
		cls = append(cls, c)
		subs = append(subs, ss)
		runs.Add(1)
		go func() { defer runs.Done(); _ = c.Run(ctx) }()
	}

	// Writes start once every subscription is live, so they exercise the
	// live path, then replays after the forced reconnects.
	for _, ss := range subs {
		for _, sb := range ss {
			select {
			case <-sb.mirror.caughtUp:
			case <-ctx.Done():
				t.Fatal("a subscription never caught up")
			}
		}
	}
	// Writers. Each has its own generator derived from the master seed.
	var reconnects atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(master, uint64(w+2)))
			row := func() todo {
				return todo{
					ID:        fmt.Sprintf("k%03d", r.IntN(400)), // updates and moves, yet few overwrites that would hide a lost change
					ProjectID: fmt.Sprintf("p%d", r.IntN(projects)),
					Title:     fmt.Sprintf("w%d-%d", w, r.IntN(1000)),
					Done:      r.IntN(2) == 0,
				}
			}
			for op := 0; op < opsEach && ctx.Err() == nil; op++ {
				var err error
				switch n := r.IntN(10); {
				case n < 6:
					err = s.todos.Upsert(ctx, row())
				case n < 8:
					err = s.todos.Delete(ctx, row())
				default: // a transaction of several rows
					err = s.todos.Upsert(ctx, row(), row(), row())
				}
				if err != nil {
					t.Error(err)
					return
				}
				if r.IntN(20) == 0 {
					cls[r.IntN(len(cls))].Reconnect()
					reconnects.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()

	for i, ss := range subs {
		for _, sb := range ss {
			want := expectedRows(t, s, sb.conds)
			err := sb.mirror.Wait(ctx, func(rows map[string]json.RawMessage) bool { return sameRows(rows, want) })
			if err != nil {
				t.Fatalf("client %d scope %v did not converge: has %d rows, want %d: %v", i, sb.conds, sb.mirror.Len(), len(want), err)
			}
			sb.mirror.mu.Lock()
			if len(sb.mirror.violations) > 0 {
				t.Errorf("client %d scope %v: %v", i, sb.conds, sb.mirror.violations)
			}
			sb.mirror.mu.Unlock()
		}
	}
	head, _ := s.e.Feed().Head(ctx)
	t.Logf("%d writes committed %d changes; %d forced reconnects; engine: %+v", writers*opsEach, head, reconnects.Load(), s.e.Stats())
	cancel()
	runs.Wait()
}

func expectedRows(t *testing.T, s *server, conds map[string]any) map[string]json.RawMessage {
	t.Helper()
	rows, err := s.todos.Rows(context.Background(), conds)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, r := range rows {
		_, row, _ := protocol.EncodeRow(r)
		out[r.ID] = row
	}
	return out
}

func sameRows(got, want map[string]json.RawMessage) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || !jsonEqual(string(g), string(w)) {
			return false
		}
	}
	return true
}

func joinComma(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}
