// Command tide operates tide's Postgres change log from a shell or a deploy
// job:
//
//	tide migrate   install or upgrade tide's own schema (idempotent);
//	               --logical also sets up the logical capture's
//	               publication and replication slot
//	tide slot drop drop the logical capture's replication slot and
//	               publication, releasing the WAL the slot keeps
//	tide status    schema version, head, retention floor, change-log size,
//	               which node holds the sequencer and the replicator roles,
//	               the logical capture's slot lag and retained WAL
//	tide tail      follow the change log as it commits, like tail -f
//	tide prune     drop changes past the retention limits, or through a
//	               position at or below the head (--dry-run: say what
//	               would go, drop nothing)
//	tide inspect   ask the status page of each node (--url, repeated) why a
//	               principal did or did not get a row (docs/inspector.md)
//
// The database is named as psql and pg_dump name it: --database-url (or -d),
// else DATABASE_URL, else the PG* variables (PGHOST, PGPORT, PGUSER,
// PGPASSWORD, PGDATABASE, PGSSLMODE...). --schema (or TIDE_SCHEMA) names
// tide's schema, "tide" by default. --json prints machine-readable output.
// Every command names the database it talks to (without the password) in
// its output and its errors.
//
// Exit codes: 0 success; 1 the operation failed (database unreachable,
// migration or query error); 2 usage error (unknown command or flag).
// See docs/operations.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
