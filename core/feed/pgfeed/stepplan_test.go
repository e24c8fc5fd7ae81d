package pgfeed_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// TestStepReadsThroughTheIndex: a sequencing step reads the changes it
// ticked through the transaction index, whatever the size of the change
// log. A join of the ticked transactions with the log let the planner read
// the whole log on every step (it cannot know how few transactions a step
// ticks), so each step cost the size of the log: with 20,000 changes
// logged, a step of a few single-row transactions scanned all of them.
// The step's plans are read with auto_explain, sent to this session as
// notices.
func TestStepReadsThroughTheIndex(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{}, todoSchema)
	ctx := testenv.Context(t)
	// A log of 20,000 changes, all ticked, then a few transactions more.
	writeOld(t, ctx, f, pool)
	writeNew(t, ctx, pool, "new")
	if _, err := pool.Exec(ctx, "ANALYZE "+f.ChangesTable()); err != nil {
		t.Fatal(err)
	}
	s := explainSession(t, ctx, pool)
	s.step(t, ctx, f, 20)
	s.checkIndexed(t, f)
}

// TestStepPlanOutlivesGrowth: the sequencer's session keeps its steps'
// plans, and a plan made while the change log was small must not read the
// log whole once it has grown. Its steps ran with a handful of changes
// logged (the plans are made then: a sequential scan is the cheapest read
// of a small table), then the log grew to 20,000 changes with no new
// statistics: each step read all of them until statistics happened to be
// refreshed, and the sequencer fell behind the writers. Nor may a step's
// plan be compiled (JIT), which takes longer than the step.
func TestStepPlanOutlivesGrowth(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{}, todoSchema)
	ctx := testenv.Context(t)
	s := explainSession(t, ctx, pool)
	for i := range 3 {
		writeNew(t, ctx, pool, "warm"+strconv.Itoa(i))
		s.step(t, ctx, f, 20)
	}
	writeOld(t, ctx, f, pool)
	writeNew(t, ctx, pool, "new")
	s.reset()
	s.step(t, ctx, f, 20)
	s.checkIndexed(t, f)
}

// writeOld logs 20,000 changes and gives them positions.
func writeOld(t *testing.T, ctx context.Context, f *pgfeed.Feed, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(ctx, `INSERT INTO todos (id, project_id, title) SELECT 'old' || g, 'p' || (g % 50), 'a title' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Head(ctx); err != nil {
		t.Fatal(err)
	}
}

// writeNew commits 20 single-row transactions.
func writeNew(t *testing.T, ctx context.Context, pool *pgxpool.Pool, prefix string) {
	t.Helper()
	for i := range 20 {
		if _, err := pool.Exec(ctx, `INSERT INTO todos (id, project_id, title) VALUES ($1, 'p1', 'new')`, prefix+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// planSession is a session whose statements' plans, nested ones too, come
// back as notices (auto_explain), as the sequencer's session would run
// them.
type planSession struct {
	conn  *pgx.Conn
	mu    sync.Mutex
	plans strings.Builder
}

func explainSession(t *testing.T, ctx context.Context, pool *pgxpool.Pool) *planSession {
	t.Helper()
	s := &planSession{}
	cfg := pool.Config().ConnConfig.Copy()
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.plans.WriteString(n.Message + "\n")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, q := range []string{
		"LOAD 'auto_explain'",
		"SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_level = notice",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			testenv.Missing(t, "the auto_explain module of Postgres", err.Error())
		}
	}
	s.conn = conn
	return s
}

func (s *planSession) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plans.Reset()
}

func (s *planSession) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plans.String()
}

// step runs one sequencing step in the session and checks it gave
// positions to want changes.
func (s *planSession) step(t *testing.T, ctx context.Context, f *pgfeed.Feed, want int) {
	t.Helper()
	rows, err := s.conn.Query(ctx, f.StepRowsSQL(), 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("the step gave positions to %d changes, want the %d written after the last step", n, want)
	}
}

// checkIndexed fails the test if a plan the session reported reads the
// change log whole, or was compiled.
func (s *planSession) checkIndexed(t *testing.T, f *pgfeed.Feed) {
	t.Helper()
	plans := s.String()
	table := strings.Trim(f.ChangesTable()[strings.LastIndex(f.ChangesTable(), ".")+1:], `"`)
	if !strings.Contains(plans, " on "+table) {
		t.Fatalf("no plan reads the change log %s; auto_explain sent:\n%s", table, plans)
	}
	for _, line := range strings.Split(plans, "\n") {
		if strings.Contains(line, "Seq Scan on "+table) {
			t.Errorf("a step reads the whole change log: %s\nthe plans:\n%s", strings.TrimSpace(line), plans)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "JIT:") {
			t.Errorf("a step's plan was compiled\nthe plans:\n%s", plans)
		}
	}
}
