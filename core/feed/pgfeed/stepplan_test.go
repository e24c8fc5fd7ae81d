package pgfeed_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	if _, err := pool.Exec(ctx, `INSERT INTO todos (id, project_id, title) SELECT 'old' || g, 'p' || (g % 50), 'a title' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Head(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := pool.Exec(ctx, `INSERT INTO todos (id, project_id, title) VALUES ($1, 'p1', 'new')`, "new"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+f.ChangesTable()); err != nil {
		t.Fatal(err)
	}

	cfg := pool.Config().ConnConfig.Copy()
	var plans strings.Builder
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { plans.WriteString(n.Message + "\n") }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range []string{
		"LOAD 'auto_explain'",
		"SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_level = notice",
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			testenv.Missing(t, "the auto_explain module of Postgres", err.Error())
		}
	}
	rows, err := conn.Query(ctx, f.StepRowsSQL(), 0)
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
	if n != 20 {
		t.Fatalf("the step gave positions to %d changes, want the 20 written after the first step", n)
	}
	table := strings.Trim(f.ChangesTable()[strings.LastIndex(f.ChangesTable(), ".")+1:], `"`)
	if !strings.Contains(plans.String(), " on "+table) {
		t.Fatalf("no plan reads the change log %s; auto_explain sent:\n%s", table, plans.String())
	}
	for _, line := range strings.Split(plans.String(), "\n") {
		if strings.Contains(line, "Seq Scan on "+table) {
			t.Errorf("a step reads the whole change log: %s\nthe plans:\n%s", strings.TrimSpace(line), plans.String())
		}
	}
}
