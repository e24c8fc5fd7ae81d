package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
}

// tide runs the command in-process with DATABASE_URL set to the test
// database and returns its exit code and output.
func tide(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return tideEnv(t, map[string]string{"DATABASE_URL": databaseURL()}, args...)
}

// tideEnv runs the command in-process with the given environment.
func tideEnv(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errb, func(k string) string { return vars[k] })
	return code, out.String(), errb.String()
}

// databaseURL is the test database (testenv.DatabaseURL).
func databaseURL() string { return testenv.DatabaseURL() }

// setup makes a fresh schema of the test's own and returns a pool whose
// search_path is it, and the name tide's own schema gets there. Both
// schemas are dropped when the test ends. Without Postgres the test skips,
// except in CI (CI=true), where it fails.
func setup(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool, name := testenv.PostgresSchema(t)
	return pool, name + "_tide"
}

// write installs a captured "todos" table and writes n rows through an
// engine on the feed.
func write(t *testing.T, pool *pgxpool.Pool, schema string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := core.New(core.Config{Feed: f})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(ctx)
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := todos.Upsert(ctx, todo{ID: fmt.Sprint("t", i), ProjectID: fmt.Sprint("p", i%2), Title: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	// Positions are given by the sequencer; Head gives them to every
	// committed change, so the tests can read the change log directly.
	if _, err := f.Head(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMigrate(t *testing.T) {
	_, schema := setup(t)
	code, out, errs := tide(t, "migrate", "--schema", schema)
	if code != exitOK || !strings.Contains(out, "migrated from version 0 to") {
		t.Fatalf("first migrate: %d %q %q", code, out, errs)
	}
	code, out, _ = tide(t, "migrate", "--schema", schema, "--json")
	var res struct {
		Version int  `json:"version"`
		Changed bool `json:"changed"`
	}
	if err := json.Unmarshal([]byte(out), &res); code != exitOK || err != nil || res.Changed || res.Version != pgfeed.SchemaVersion() {
		t.Fatalf("second migrate (idempotent): %d %q %v", code, out, err)
	}
}

// TestMigrateFails: a schema already holding a foreign "changes" table
// cannot be migrated; an unreachable database neither; a bad flag is a
// usage error.
func TestMigrateFails(t *testing.T) {
	pool, schema := setup(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.changes (x int)`); err != nil {
		t.Fatal(err)
	}
	code, out, errs := tide(t, "migrate", "--schema", schema)
	if code != exitFail || out != "" || !strings.Contains(errs, "tide migrate: migrating schema") || !strings.Contains(errs, "already exists") {
		t.Fatalf("conflicting schema: %d %q %q", code, out, errs)
	}
	u, _ := url.Parse(databaseURL())
	u.Host = "127.0.0.1:1" // nothing listens there
	code, _, errs = tide(t, "migrate", "--database-url", u.String(), "--schema", schema)
	if code != exitFail || !strings.Contains(errs, "tide migrate: connect to postgres@127.0.0.1:1/") {
		t.Fatalf("unreachable: %d %q", code, errs)
	}
	if code, _, errs = tide(t, "migrate", "--nope"); code != exitUsage || !strings.Contains(errs, "flag provided but not defined") {
		t.Fatalf("bad flag: %d %q", code, errs)
	}
	if code, _, _ = tide(t, "frobnicate"); code != exitUsage {
		t.Fatalf("unknown command: %d", code)
	}
}

func TestStatus(t *testing.T) {
	pool, schema := setup(t)
	if code, _, errs := tide(t, "status", "--schema", schema); code != exitFail || !strings.Contains(errs, "not installed: run tide migrate") ||
		!strings.Contains(errs, "(database postgres@") {
		t.Fatalf("before migrate: %d %q", code, errs)
	}
	write(t, pool, schema, 5)
	code, out, errs := tide(t, "status", "--schema", schema, "--json")
	var st status
	if err := json.Unmarshal([]byte(out), &st); code != exitOK || err != nil {
		t.Fatalf("%d %q %q %v", code, out, errs, err)
	}
	if st.Version != pgfeed.SchemaVersion() || st.Head < 5 || st.Changes != 5 || st.Floor != 0 || st.NewestCommit == nil ||
		len(st.Resources) != 1 || st.Resources[0].Name != "todos" || st.Resources[0].Changes != 5 || len(st.Roles) != 2 ||
		st.Roles[0].Role != "sequencer" || st.Roles[1].Role != "replicator" || st.Roles[1].Holder != nil || !strings.Contains(st.Database, "@") {
		t.Fatalf("status %+v", st)
	}
	code, out, _ = tide(t, "status", "--schema", schema)
	if code != exitOK || !strings.Contains(out, "5 changes") || !strings.Contains(out, "resource todos") ||
		!regexp.MustCompile(`(?m)^sequencer +none`).MatchString(out) {
		t.Fatalf("text status: %d %q", code, out)
	}

	// A node running: status names it as the sequencer's holder.
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: schema, Node: "web-7"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.StartSequencer()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for f.SequencerStatus().Role != pgfeed.SequencerLeader {
		select {
		case <-ctx.Done():
			t.Fatal("the feed never took the sequencer role")
		case <-time.After(10 * time.Millisecond): // polls the role; nothing to wait on
		}
	}
	code, out, _ = tide(t, "status", "--schema", schema)
	if code != exitOK || !regexp.MustCompile(`(?m)^sequencer +node web-7 \(backend \d+`).MatchString(out) {
		t.Fatalf("status with a sequencer: %d %q", code, out)
	}
	roles, err := f.Roles(ctx)
	if err != nil || len(roles) != 1 || roles[0].Holder != "web-7" || roles[0].State != "leader" || roles[0].HolderPID != f.SequencerStatus().PID {
		t.Fatalf("Roles() = %+v, %v", roles, err)
	}
}

func TestTail(t *testing.T) {
	pool, schema := setup(t)
	write(t, pool, schema, 4)
	code, out, errs := tide(t, "tail", "--schema", schema, "--from", "0", "--scope", "p1", "-n", "2", "--json")
	if code != exitOK {
		t.Fatalf("%d %q", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%q", out)
	}
	for i, l := range lines {
		var c change
		if err := json.Unmarshal([]byte(l), &c); err != nil || c.Resource != "todos" || c.Op != "upsert" ||
			c.Key != fmt.Sprint("t", 2*i+1) || len(c.Scope) != 1 || c.Scope[0] != "p1" {
			t.Fatalf("line %q: %+v %v", l, c, err)
		}
	}
	// Following: the command waits for a change committed after it starts.
	done := make(chan string)
	var head int64
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(max(pos), 0) FROM `+schema+`.log`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, out, _ := tide(t, "tail", "--schema", schema, "--from", fmt.Sprint(head), "--resource", "todos", "-n", "1")
		done <- out
	}()
	write(t, pool, schema, 5) // rewrites t0..t3, adds t4: the first new change is t0
	if out := <-done; !strings.Contains(out, "\ttodos\tupsert\tt0\t[p0]\t") {
		t.Fatalf("followed %q", out)
	}
}

func TestPrune(t *testing.T) {
	pool, schema := setup(t)
	write(t, pool, schema, 6)
	var third int64
	if err := pool.QueryRow(context.Background(), `SELECT pos FROM `+schema+`.log ORDER BY pos OFFSET 2 LIMIT 1`).Scan(&third); err != nil {
		t.Fatal(err)
	}
	code, out, errs := tide(t, "prune", "--schema", schema, "--through", fmt.Sprint(third), "--json")
	var res struct{ Floor int64 }
	if err := json.Unmarshal([]byte(out), &res); code != exitOK || err != nil || res.Floor != third {
		t.Fatalf("%d %q %q", code, out, errs)
	}
	code, out, _ = tide(t, "prune", "--schema", schema, "--max-changes", "1")
	if code != exitOK || !strings.Contains(out, "floor ") {
		t.Fatalf("%d %q", code, out)
	}
	var left int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+schema+`.changes`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("left %d %v", left, err)
	}
}

// TestPruneBeyondHead: prune refuses a position beyond the head (the floor
// stays, and changes committed later are read like any others), says what
// it would remove with --dry-run without removing it, and prunes at the
// head.
func TestPruneBeyondHead(t *testing.T) {
	pool, schema := setup(t)
	write(t, pool, schema, 6)
	ctx := context.Background()
	var head int64
	if err := pool.QueryRow(ctx, `SELECT max(pos) FROM `+schema+`.log`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	code, out, errs := tide(t, "prune", "--schema", schema, "--through", "999999")
	if code != exitFail || out != "" || !strings.Contains(errs, "beyond the head") || !strings.Contains(errs, "(database postgres@") {
		t.Fatalf("beyond the head: %d %q %q", code, out, errs)
	}
	floor := func() int64 {
		var f int64
		if err := pool.QueryRow(ctx, `SELECT floor FROM `+schema+`.meta`).Scan(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	if f := floor(); f != 0 {
		t.Fatalf("floor %d after a refused prune", f)
	}
	code, out, errs = tide(t, "prune", "--schema", schema, "--through", fmt.Sprint(head), "--dry-run", "--json")
	var res pruneResult
	if err := json.Unmarshal([]byte(out), &res); code != exitOK || err != nil || !res.DryRun || res.Removed != 6 || res.Floor != head || res.Head != head {
		t.Fatalf("dry run: %d %q %q", code, out, errs)
	}
	if f := floor(); f != 0 {
		t.Fatalf("floor %d after a dry run", f)
	}
	code, out, errs = tide(t, "prune", "--schema", schema, "--through", fmt.Sprint(head))
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("removed 6 changes at or below position %d", head)) {
		t.Fatalf("at the head: %d %q %q", code, out, errs)
	}
	// Writes after pruning at the head are read.
	write(t, pool, schema, 2)
	code, out, errs = tide(t, "tail", "--schema", schema, "--from", fmt.Sprint(head), "-n", "2")
	if code != exitOK || strings.Count(out, "\ttodos\tupsert\t") != 2 || !strings.Contains(errs, "tide tail: postgres@") {
		t.Fatalf("tail after pruning: %d %q %q", code, out, errs)
	}
	// Below the floor: those changes are gone, said at once.
	if code, out, errs = tide(t, "tail", "--schema", schema, "--from", "1"); code != exitFail || out != "" || !strings.Contains(errs, "below the floor") {
		t.Fatalf("tail below the floor: %d %q %q", code, out, errs)
	}
	if code, _, errs = tide(t, "prune", "--schema", schema, "--through", "-5"); code != exitUsage {
		t.Fatalf("negative position: %d %q", code, errs)
	}
}

// TestBadArguments: every command fails at once, with an error naming
// what is wrong, on an unknown resource or arguments that cannot match.
func TestBadArguments(t *testing.T) {
	pool, schema := setup(t)
	write(t, pool, schema, 2)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tail", "--resource", "nosuch"}, exitFail, `unknown resource "nosuch" (resources: todos)`},
		{[]string{"tail", "--resource", "todos", "--scope", "p1,extra"}, exitFail, "has 2 values; resource todos has 1 scope columns (project_id)"},
		{[]string{"tail", "--scope", "p1,p2"}, exitFail, "no resource has 2 scope columns (todos: project_id)"},
		{[]string{"tail", "-n", "-1"}, exitUsage, "-n -1"},
		{[]string{"tail", "--from", "999999"}, exitFail, "beyond the head"},
		{[]string{"tail", "--from", "-3"}, exitUsage, "--from -3"},
		{[]string{"prune", "--through", "1", "--max-changes", "5"}, exitUsage, "does not combine"},
		{[]string{"status", "extra"}, exitUsage, `unexpected argument "extra"`},
	} {
		code, out, errs := tide(t, append(tc.args, "--schema", schema)...)
		if code != tc.code || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("tide %q: %d %q %q; want code %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
}

// TestNamesTheDatabase: every command names the database it talks to,
// without the password, in its output and its errors, and says so when no
// flag or variable named it.
func TestNamesTheDatabase(t *testing.T) {
	_, schema := setup(t)
	u, _ := url.Parse(databaseURL())
	u.User = url.UserPassword(u.User.Username(), "s3cret")
	named := u.User.Username() + "@" + u.Host + u.Path
	code, out, errs := tide(t, "migrate", "--schema", schema, "-d", u.String())
	if code != exitOK || !strings.Contains(out, named) || strings.Contains(out+errs, "s3cret") {
		t.Fatalf("migrate: %d %q %q; want %q named", code, out, errs, named)
	}
	code, out, errs = tide(t, "status", "--schema", schema, "-d", u.String())
	if code != exitOK || !regexp.MustCompile(`(?m)^database +`+regexp.QuoteMeta(named)+`$`).MatchString(out) || strings.Contains(out+errs, "s3cret") {
		t.Fatalf("status: %d %q %q; want %q named", code, out, errs, named)
	}
	// No -d, DATABASE_URL or PG* variable: libpq's defaults, said so.
	code, out, errs = tideEnv(t, nil, "status", "--schema", "nosuch_schema")
	if code != exitFail || out != "" || !strings.Contains(errs, "tide status: ") || !strings.Contains(errs, "libpq's defaults") {
		t.Fatalf("defaults: %d %q %q", code, out, errs)
	}
}
