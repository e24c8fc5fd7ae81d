package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const usage = `usage: tide <command> [flags]

commands:
  migrate   install or upgrade tide's schema (idempotent); --logical: and
            the logical capture's publication and replication slot
  slot drop drop the logical capture's replication slot and publication
  status    schema version, head, floor, change-log size, who holds each role
  tail      follow the change log as it commits
  prune     drop changes past the retention limits (--dry-run to see first)
  inspect   ask nodes' status pages why a principal did or did not get a row
            (--url, repeated per node; --principal, --resource, --key)

common flags:
  -d, --database-url URL   the database (else DATABASE_URL, else PG* variables)
  --schema NAME            tide's schema (else TIDE_SCHEMA, else "tide")
  --json                   machine-readable output

Run "tide <command> -h" for a command's own flags.
Exit codes: 0 success, 1 the operation failed, 2 usage error.
`

// env is a command's context: flags parsed, output streams.
type env struct {
	ctx      context.Context
	out, err io.Writer
	getenv   func(string) string
	url      string
	schema   string
	json     bool
	db       string // the database, named without its password, once connect parsed it
}

type command struct {
	flags func(fs *flag.FlagSet) func(*env) error
}

var commands = map[string]command{
	"migrate":   {migrateFlags},
	"slot drop": {slotDropFlags},
	"status":    {statusFlags},
	"tail":      {tailFlags},
	"prune":     {pruneFlags},
	"inspect":   {inspectFlags},
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	name := args[0]
	if name == "slot" && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		name, args = "slot "+args[1], args[1:]
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "tide: unknown command %q\n\n%s", name, usage)
		return exitUsage
	}
	e := &env{ctx: ctx, out: stdout, err: stderr, getenv: getenv}
	fs := flag.NewFlagSet("tide "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&e.url, "database-url", "", "Postgres URL or key=value string (else DATABASE_URL, else PG* variables)")
	fs.StringVar(&e.url, "d", "", "shorthand for --database-url")
	fs.StringVar(&e.schema, "schema", "", `tide's schema (else TIDE_SCHEMA, else "tide")`)
	fs.BoolVar(&e.json, "json", false, "machine-readable output")
	do := cmd.flags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tide %s: unexpected argument %q\n", name, fs.Arg(0))
		return exitUsage
	}
	if e.url == "" {
		e.url = getenv("DATABASE_URL")
	}
	if e.schema == "" {
		e.schema = getenv("TIDE_SCHEMA")
	}
	if e.schema == "" {
		e.schema = pgfeed.DefaultSchema
	}
	if err := do(e); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "tide %s: %v\n", name, err)
			return exitUsage
		}
		if e.db != "" && !strings.Contains(err.Error(), e.db) {
			fmt.Fprintf(stderr, "tide %s: %v (database %s)\n", name, err, e.db)
		} else {
			fmt.Fprintf(stderr, "tide %s: %v\n", name, err)
		}
		return exitFail
	}
	return exitOK
}

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// connect opens a pool and the feed of e's schema. An empty URL leaves the
// connection to libpq's PG* variables, which pgx reads as psql does.
func (e *env) connect(opts pgfeed.Options) (*pgxpool.Pool, *pgfeed.Feed, error) {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid database URL: %w", err)
	}
	cfg.MaxConns = 4
	e.db = e.where(cfg)
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "tide"
	}
	ctx, cancel := context.WithTimeout(e.ctx, 15*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", e.db, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("connect to %s: %w", e.db, err)
	}
	opts.Schema = e.schema
	f, err := pgfeed.New(pool, opts)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, f, nil
}

// where names the database of cfg without its password, as
// user@host:port/database, and says where the settings came from when no
// flag or variable named it (libpq's defaults).
func (e *env) where(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	db := c.Database
	if db == "" {
		db = c.User // the server's default, as psql's
	}
	s := fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, db)
	if e.url == "" && !e.pgVars() {
		s += ", from libpq's defaults: no -d, DATABASE_URL or PG* variable named one"
	}
	return s
}

// pgVars reports whether a PG* variable names part of the connection.
func (e *env) pgVars() bool {
	for _, v := range []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE"} {
		if e.getenv(v) != "" {
			return true
		}
	}
	return false
}

// quoted returns the schema as an SQL identifier.
func (e *env) quoted(table string) string { return pgx.Identifier{e.schema, table}.Sanitize() }

func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.out)
	return enc.Encode(v)
}

// --- migrate

func migrateFlags(fs *flag.FlagSet) func(*env) error {
	logical := fs.Bool("logical", false, "also set up the logical capture (pgfeed.CaptureLogical): check wal_level, publish the synced tables with REPLICA IDENTITY FULL, create the replication slot")
	slot := fs.String("slot", "", "the logical capture's replication slot (default <schema>_logrepl)")
	return func(e *env) error {
		opts := pgfeed.Options{Slot: *slot}
		if *logical {
			opts.Capture = pgfeed.CaptureLogical
		}
		pool, f, err := e.connect(opts)
		if err != nil {
			return err
		}
		defer pool.Close()
		defer f.Close()
		before, _ := e.schemaVersion(pool)
		if err := f.Migrate(e.ctx); err != nil {
			return fmt.Errorf("migrating schema %q: %w", e.schema, err)
		}
		after, err := e.schemaVersion(pool)
		if err != nil {
			return err
		}
		if e.json {
			out := map[string]any{"database": e.db, "schema": e.schema, "version": after, "previous_version": before, "changed": before != after}
			if *logical {
				out["slot"] = f.SlotName()
			}
			return e.printJSON(out)
		}
		if before == after {
			fmt.Fprintf(e.out, "schema %s in %s is up to date (version %d)\n", e.schema, e.db, after)
		} else {
			fmt.Fprintf(e.out, "schema %s in %s migrated from version %d to %d\n", e.schema, e.db, before, after)
		}
		if *logical {
			fmt.Fprintf(e.out, "replication slot %s is ready: it keeps WAL until a node's consumer confirms it; drop it with tide slot drop when the logical capture stops for good\n", f.SlotName())
		}
		return nil
	}
}

// --- slot drop

func slotDropFlags(fs *flag.FlagSet) func(*env) error {
	slot := fs.String("slot", "", "the replication slot (default <schema>_logrepl)")
	return func(e *env) error {
		pool, f, err := e.connect(pgfeed.Options{Capture: pgfeed.CaptureLogical, Slot: *slot})
		if err != nil {
			return err
		}
		defer pool.Close()
		defer f.Close()
		if err := f.DropSlot(e.ctx); err != nil {
			return err
		}
		if e.json {
			return e.printJSON(map[string]any{"database": e.db, "schema": e.schema, "slot": f.SlotName(), "dropped": true})
		}
		fmt.Fprintf(e.out, "replication slot %s and its publication in %s are gone (nothing if they did not exist); the server no longer keeps WAL for them\n", f.SlotName(), e.db)
		return nil
	}
}

// schemaVersion returns the applied version of tide's schema, 0 if none.
func (e *env) schemaVersion(pool *pgxpool.Pool) (int, error) {
	var v int
	err := pool.QueryRow(e.ctx, "SELECT coalesce(max(version), 0) FROM "+e.quoted("schema_migrations")).Scan(&v)
	if err != nil {
		if strings.Contains(err.Error(), "42P01") { // undefined_table: not migrated
			return 0, nil
		}
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	return v, nil
}

// --- prune

// pruneResult is what tide prune reports.
type pruneResult struct {
	Database      string `json:"database"`
	Schema        string `json:"schema"`
	DryRun        bool   `json:"dry_run"`
	Head          int64  `json:"head"`
	PreviousFloor int64  `json:"previous_floor"`
	Floor         int64  `json:"floor"`   // after pruning (a dry run: the floor it would set)
	Removed       int64  `json:"removed"` // changes dropped (a dry run: that it would drop)
}

func pruneFlags(fs *flag.FlagSet) func(*env) error {
	maxAge := fs.Duration("max-age", 0, "drop changes older than this (default 168h; negative: never for age)")
	maxChanges := fs.Int64("max-changes", 0, "keep at most this many changes (default 10000000; negative: no limit)")
	through := fs.Int64("through", -1, "drop every change at or below this position instead (at most the head)")
	dryRun := fs.Bool("dry-run", false, "say what would be dropped, and drop nothing")
	return func(e *env) error {
		if *through < -1 {
			return usageError{fmt.Sprintf("--through %d: a position is 0 or more", *through)}
		}
		if *through >= 0 && (*maxAge != 0 || *maxChanges != 0) {
			return usageError{"--through drops through one position; it does not combine with --max-age or --max-changes"}
		}
		pool, f, err := e.connect(pgfeed.Options{MaxAge: *maxAge, MaxChanges: *maxChanges})
		if err != nil {
			return err
		}
		defer pool.Close()
		defer f.Close()
		if err := e.installed(pool); err != nil {
			return err
		}
		head, err := f.Head(e.ctx)
		if err != nil {
			return err
		}
		before, err := f.Floor(e.ctx)
		if err != nil {
			return err
		}
		res := pruneResult{Database: e.db, Schema: e.schema, DryRun: *dryRun, Head: int64(head), PreviousFloor: int64(before)}
		var target feed.Position
		if *through >= 0 {
			// A floor above the head would hide every change committed
			// later: their positions come below it.
			if feed.Position(*through) > head {
				return fmt.Errorf("--through %d is beyond the head %d: changes committed later would get positions at or below the floor and never be delivered; nothing was pruned", *through, head)
			}
			target = feed.Position(*through)
		} else if target, err = f.PruneTarget(e.ctx); err != nil {
			return err
		}
		target = max(target, before)
		count := func(lo, hi feed.Position) (int64, error) {
			var n int64
			err := pool.QueryRow(e.ctx, "SELECT count(*) FROM "+e.quoted("log")+" WHERE pos > $1 AND pos <= $2", int64(lo), int64(hi)).Scan(&n)
			return n, err
		}
		if *dryRun {
			res.Floor = int64(target)
			if res.Removed, err = count(before, target); err != nil {
				return fmt.Errorf("counting changes: %w", err)
			}
		} else {
			// Changes at or below the head keep their positions whatever
			// commits meanwhile: what left that range is what was removed
			// (by this command, or a pruner running at the same time).
			was, err := count(before, head)
			if err != nil {
				return fmt.Errorf("counting changes: %w", err)
			}
			var floor feed.Position
			if *through >= 0 {
				floor, err = f.PruneThrough(e.ctx, target)
			} else {
				floor, err = f.Prune(e.ctx)
			}
			if err != nil {
				return err
			}
			res.Floor = int64(floor)
			left, err := count(before, head)
			if err != nil {
				return fmt.Errorf("counting changes: %w", err)
			}
			res.Removed = was - left
		}
		if e.json {
			return e.printJSON(res)
		}
		verb, was := "removed", "was"
		if res.DryRun {
			verb, was = "would remove", "now"
		}
		fmt.Fprintf(e.out, "database %s, schema %s, head %d\n", e.db, e.schema, res.Head)
		fmt.Fprintf(e.out, "%s %d changes at or below position %d: floor %d (%s %d)\n", verb, res.Removed, res.Floor, res.Floor, was, res.PreviousFloor)
		return nil
	}
}

// installed returns an error naming the database if tide's schema is not
// installed there.
func (e *env) installed(pool *pgxpool.Pool) error {
	v, err := e.schemaVersion(pool)
	if err != nil {
		return err
	}
	if v == 0 {
		return fmt.Errorf("schema %q is not installed: run tide migrate -d <this database>", e.schema)
	}
	return nil
}
