package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres helpers of the modes that run tide on its Postgres feed. Each
// run creates its own schemas (tideload_<random> for the items table and
// tideload_<random>_tide for tide's change log) and drops them when it
// ends, on errors, timeouts and Ctrl-C included.

const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// dsnOr returns flag, TIDE_TEST_DATABASE_URL or the default, after checking
// that it names a loopback (or Unix socket) server.
func dsnOr(flagValue string) (string, error) {
	dsn := flagValue
	if dsn == "" {
		dsn = os.Getenv("TIDE_TEST_DATABASE_URL")
	}
	if dsn == "" {
		dsn = defaultDSN
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("-dsn: %w", err)
	}
	hosts := []string{cfg.Host}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	for _, h := range hosts {
		if strings.HasPrefix(h, "/") || h == "localhost" {
			continue
		}
		if ip := net.ParseIP(h); ip == nil || ip.To4() == nil || ip.To4()[0] != 127 {
			return "", fmt.Errorf("-dsn: host %q: tideload only talks to loopback (127.0.0.0/8) or a Unix socket", h)
		}
	}
	return dsn, nil
}

// pgRun is one run's Postgres side: an admin connection and the schema.
type pgRun struct {
	dsn    string
	conn   *pgx.Conn
	schema string // holds items; tide's own schema is schema+"_tide"
}

// newPGRun connects and creates the run's schema and items table.
func newPGRun(ctx context.Context, dsn string) (*pgRun, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := fmt.Sprintf("tideload_%x", b)
	p := &pgRun{dsn: dsn, conn: conn, schema: schema}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(itemsDDL, schema)); err != nil {
		p.drop()
		return nil, err
	}
	return p, nil
}

// drop removes the run's schemas (with a context of its own: it runs after
// the mode's context ended) and closes the connection.
func (p *pgRun) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p.conn.IsClosed() {
		c, err := pgx.Connect(ctx, p.dsn)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tideload: could not drop schema %s: %v\n", p.schema, err)
			return
		}
		p.conn = c
	}
	for _, s := range []string{p.schema + "_tide", p.schema} {
		if _, err := p.conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "tideload: could not drop schema %s: %v\n", s, err)
		}
	}
	p.conn.Close(ctx)
}

func (p *pgRun) table() string   { return p.schema + ".items" }
func (p *pgRun) changes() string { return p.schema + "_tide.changes" }

// serverArgs are the server child's flags for this run.
func (p *pgRun) serverArgs() []string {
	return []string{"-feed", "pg", "-dsn", p.dsn, "-schema", p.schema}
}

// logScans are Postgres's own counters of reads of the change log.
type logScans struct {
	SeqScans   int64            `json:"seq_scans"`
	IndexScans map[string]int64 `json:"index_scans"` // by index name
	// Statements is the number of replay statements pg_stat_statements
	// counted; -1 when the extension is not installed.
	Statements int64 `json:"replay_statements"`
}

// scans reads the change log's scan counters. Postgres publishes a
// backend's counters when it goes idle (at most once a second, else within
// about 10 s) or exits; callers release the server's pool first.
func (p *pgRun) scans(ctx context.Context) (logScans, error) {
	s := logScans{IndexScans: map[string]int64{}, Statements: -1}
	if _, err := p.conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return s, err
	}
	if err := p.conn.QueryRow(ctx, `SELECT coalesce(seq_scan, 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'changes'`,
		p.schema+"_tide").Scan(&s.SeqScans); err != nil {
		return s, err
	}
	rows, err := p.conn.Query(ctx, `SELECT indexrelname, coalesce(idx_scan, 0) FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = 'changes'`, p.schema+"_tide")
	if err != nil {
		return s, err
	}
	var name string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error { s.IndexScans[name] = n; return nil }); err != nil {
		return s, err
	}
	var has bool
	if err := p.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')`).Scan(&has); err != nil {
		return s, err
	}
	if has {
		// The replay statement is the one reading the change log through
		// a LATERAL join (the tail reads it without one).
		err := p.conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE query LIKE '%' || $1 || '%' AND query LIKE '%LEFT JOIN LATERAL%'`,
			p.changes()).Scan(&s.Statements)
		if err != nil {
			s.Statements = -1
		}
	}
	return s, nil
}

// delta returns b - a.
func (a logScans) delta(b logScans) logScans {
	d := logScans{SeqScans: b.SeqScans - a.SeqScans, IndexScans: map[string]int64{}, Statements: -1}
	for k, v := range b.IndexScans {
		d.IndexScans[k] = v - a.IndexScans[k]
	}
	if a.Statements >= 0 && b.Statements >= 0 {
		d.Statements = b.Statements - a.Statements
	}
	return d
}

// replayIndexScans sums the scans of the indexes replay reads: every
// change-log index but the primary key (which the tail and Head use).
func (a logScans) replayIndexScans() int64 {
	var n int64
	for k, v := range a.IndexScans {
		if !strings.HasSuffix(k, "_pkey") {
			n += v
		}
	}
	return n
}

func (a logScans) String() string {
	keys := make([]string, 0, len(a.IndexScans))
	for k := range a.IndexScans {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, a.IndexScans[k]))
	}
	st := "pg_stat_statements not installed"
	if a.Statements >= 0 {
		st = fmt.Sprintf("replay statements %d", a.Statements)
	}
	return fmt.Sprintf("index scans: %s; seq scans %d; %s", strings.Join(parts, ", "), a.SeqScans, st)
}
