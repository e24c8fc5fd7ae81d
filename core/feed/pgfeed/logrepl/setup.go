package logrepl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the setup functions need of a connection: *pgx.Conn,
// *pgxpool.Pool and pgx.Tx all have it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SlotName returns the replication slot name for a tide schema:
// schema + "_logrepl". Slot names are shared by all the databases of a
// server, so two databases with the same tide schema need their own names.
func SlotName(schema string) string { return schema + "_logrepl" }

// PublicationName returns the publication name for a tide schema:
// schema + "_logrepl".
func PublicationName(schema string) string { return schema + "_logrepl" }

// checkName accepts what Postgres accepts as a replication slot name (1 to
// 63 lower-case letters, digits and underscores), for publications too, so
// names never need quoting in replication commands.
func checkName(kind, name string) error {
	ok := len(name) > 0 && len(name) <= 63
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			ok = false
		}
	}
	if !ok {
		return &Error{Code: CodeBadName, Msg: fmt.Sprintf("%s name %q: use 1 to 63 lower-case letters, digits and underscores", kind, name)}
	}
	return nil
}

// CheckWALLevel returns nil when the server's wal_level is logical, and
// otherwise an error matching ErrWALLevel whose message names the setting
// and the fix:
//
//	logrepl: wal_level is "replica"; logical replication needs wal_level = logical: run ALTER SYSTEM SET wal_level = logical; and restart Postgres
func CheckWALLevel(ctx context.Context, db DB) error {
	var level string
	if err := db.QueryRow(ctx, "SELECT pg_catalog.current_setting('wal_level')").Scan(&level); err != nil {
		return fmt.Errorf("logrepl: read wal_level: %w", err)
	}
	if level != "logical" {
		return walLevelError(level)
	}
	return nil
}

// table is a resolved table name.
type table struct{ schema, name string }

func (t table) String() string   { return t.schema + "." + t.name }
func (t table) sanitize() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

// resolve finds the table a name means, as Postgres reads it in SQL: it
// may be schema-qualified and quoted; unqualified, it follows the
// search_path.
func resolve(ctx context.Context, db DB, name string) (table, error) {
	var t table
	err := db.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = pg_catalog.to_regclass($1) AND c.relkind IN ('r', 'p')`, name).Scan(&t.schema, &t.name)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, &Error{Code: CodeNoTable, Msg: fmt.Sprintf("no table %q", name)}
	}
	if err != nil {
		return t, fmt.Errorf("logrepl: find table %q: %w", name, err)
	}
	return t, nil
}

// EnsurePublication makes the publication name publish exactly tables
// (inserts, updates, deletes and truncates): it creates it (CREATE
// PUBLICATION name FOR TABLE a, b) when it does not exist, and otherwise
// adds and removes tables (ALTER PUBLICATION ... ADD TABLE / DROP TABLE)
// until its set is tables, and makes it publish every kind of change if
// it was made to publish fewer. It does nothing when all is already right,
// so it can run on every boot; concurrent calls for one name take turns
// (an advisory lock). Table names are read as in SQL: "todos",
// "app.todos", `"Mixed Case"`.
//
// It needs the CREATE privilege on the database and ownership of the
// tables.
func EnsurePublication(ctx context.Context, db DB, name string, tables []string) error {
	if err := checkName("publication", name); err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('tide logrepl publication ' || $1))", name); err != nil {
		return fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	want := map[string]table{}
	for _, n := range tables {
		t, err := resolve(ctx, tx, n)
		if err != nil {
			return err
		}
		want[t.String()] = t
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_publication WHERE pubname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	if !exists {
		sql := "CREATE PUBLICATION " + ident
		if len(want) > 0 {
			sql += " FOR TABLE " + tableList(want)
		}
		if _, err := tx.Exec(ctx, sql+" WITH (publish = 'insert, update, delete, truncate')"); err != nil {
			return fmt.Errorf("logrepl: create publication %s: %w", name, err)
		}
		return commit(ctx, tx, name)
	}
	// A publication made by hand may publish less than every kind of
	// change, which would lose changes silently: set it right.
	var all, ins, upd, del, trunc bool
	if err := tx.QueryRow(ctx, "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_catalog.pg_publication WHERE pubname = $1", name).Scan(&all, &ins, &upd, &del, &trunc); err != nil {
		return fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	if all {
		return fmt.Errorf("logrepl: publication %s is FOR ALL TABLES: drop it, or name another", name)
	}
	if !ins || !upd || !del || !trunc {
		if _, err := tx.Exec(ctx, "ALTER PUBLICATION "+ident+" SET (publish = 'insert, update, delete, truncate')"); err != nil {
			return fmt.Errorf("logrepl: publication %s: %w", name, err)
		}
	}
	rows, err := tx.Query(ctx, "SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables WHERE pubname = $1", name)
	if err != nil {
		return fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	have := map[string]table{}
	for rows.Next() {
		var t table
		if err := rows.Scan(&t.schema, &t.name); err != nil {
			return fmt.Errorf("logrepl: publication %s: %w", name, err)
		}
		have[t.String()] = t
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	add, drop := map[string]table{}, map[string]table{}
	for k, t := range want {
		if _, ok := have[k]; !ok {
			add[k] = t
		}
	}
	for k, t := range have {
		if _, ok := want[k]; !ok {
			drop[k] = t
		}
	}
	if len(add) > 0 {
		if _, err := tx.Exec(ctx, "ALTER PUBLICATION "+ident+" ADD TABLE "+tableList(add)); err != nil {
			return fmt.Errorf("logrepl: publication %s: add tables: %w", name, err)
		}
	}
	if len(drop) > 0 {
		if _, err := tx.Exec(ctx, "ALTER PUBLICATION "+ident+" DROP TABLE "+tableList(drop)); err != nil {
			return fmt.Errorf("logrepl: publication %s: drop tables: %w", name, err)
		}
	}
	return commit(ctx, tx, name)
}

func commit(ctx context.Context, tx pgx.Tx, name string) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	return nil
}

// tableList writes tables sorted, quoted and comma-separated.
func tableList(tables map[string]table) string {
	keys := make([]string, 0, len(tables))
	for k := range tables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tables[k].sanitize())
	}
	return b.String()
}

// PublicationTables returns the tables the publication publishes, as
// "schema.table", sorted; nil when it does not exist.
func PublicationTables(ctx context.Context, db DB, name string) ([]string, error) {
	rows, err := db.Query(ctx, "SELECT schemaname || '.' || tablename FROM pg_catalog.pg_publication_tables WHERE pubname = $1 ORDER BY 1", name)
	if err != nil {
		return nil, fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("logrepl: publication %s: %w", name, err)
	}
	return tables, nil
}

// DropPublication drops the publication; nothing when it does not exist.
func DropPublication(ctx context.Context, db DB, name string) error {
	if err := checkName("publication", name); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("logrepl: drop publication %s: %w", name, err)
	}
	return nil
}

// EnsureSlot creates the logical replication slot name with the pgoutput
// plugin in the connected database, unless it exists; created says whether
// it did. The slot's stream starts with the transactions that commit
// after its creation.
//
// It returns an error matching ErrWALLevel when wal_level is not logical,
// ErrSlotMismatch when a slot of that name exists for another plugin or
// database, and ErrSlotLost when the slot exists but the server
// invalidated it. Creating a slot waits for the transactions running at that
// moment to end.
//
// A slot keeps the server's WAL from the position its consumer confirmed
// on: while no consumer confirms (none runs, or one is stuck), WAL
// accumulates on the server's disk without bound. Drop the slot of a
// consumer that will not come back (DropSlot), and watch
// Figures.Slot.RetainedBytes; max_slot_wal_keep_size caps it on the server
// (a slot past the cap is invalidated and must be made anew).
func EnsureSlot(ctx context.Context, db DB, name string) (created bool, err error) {
	if err := checkName("slot", name); err != nil {
		return false, err
	}
	if err := CheckWALLevel(ctx, db); err != nil {
		return false, err
	}
	for range 2 {
		var plugin, slotType, walStatus string
		var sameDB bool
		err := db.QueryRow(ctx, `SELECT coalesce(plugin, ''), slot_type, coalesce(database = pg_catalog.current_database(), false), coalesce(wal_status, '')
FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, name).Scan(&plugin, &slotType, &sameDB, &walStatus)
		if err == nil {
			if plugin != "pgoutput" || slotType != "logical" || !sameDB {
				return false, &Error{Code: CodeSlotMismatch, Msg: fmt.Sprintf("slot %s exists as a %s slot (plugin %q) of another database or plugin", name, slotType, plugin)}
			}
			if walStatus == "lost" {
				return false, slotLostError(name, nil)
			}
			return false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, fmt.Errorf("logrepl: slot %s: %w", name, err)
		}
		_, err = db.Exec(ctx, "SELECT pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')", name)
		if err == nil {
			return true, nil
		}
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42710" {
			continue // made concurrently: look again
		}
		return false, fmt.Errorf("logrepl: create slot %s: %w", name, err)
	}
	return false, fmt.Errorf("logrepl: create slot %s: it exists and does not", name)
}

// DropSlot drops the replication slot, releasing the WAL it keeps; nothing
// when it does not exist. It returns an error matching ErrSlotInUse while a
// consumer streams from it.
func DropSlot(ctx context.Context, db DB, name string) error {
	if err := checkName("slot", name); err != nil {
		return err
	}
	_, err := db.Exec(ctx, "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", name)
	if err != nil {
		return slotError(name, err)
	}
	return nil
}

// slotError maps the server's errors about a slot to this package's.
func slotError(name string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "55006": // object_in_use
			return &Error{Code: CodeSlotInUse, Msg: "slot " + name, Err: err}
		case "42704": // undefined_object
			return &Error{Code: CodeNoSlot, Msg: "slot " + name, Err: err}
		}
		if pgErr.Code == "55000" && strings.Contains(pgErr.Message, "wal_level") {
			return &Error{Code: CodeWALLevel, Msg: "slot " + name, Err: err}
		}
		if pgErr.Code == "55000" && strings.Contains(pgErr.Detail, "invalidated") {
			return slotLostError(name, err)
		}
	}
	return fmt.Errorf("logrepl: slot %s: %w", name, err)
}

// SetReplicaIdentityFull makes Postgres log the whole old row of every
// update and delete of the table (ALTER TABLE ... REPLICA IDENTITY FULL),
// unless the table has it already. The consumer needs old rows to tell
// which scope a deleted row was in, and that an update moved a row out of
// a scope; with the default identity it gets only the primary key of a
// deleted row, and nothing old for an update that keeps the key.
//
// The cost is WAL: each update and delete of the table then writes the
// whole old row into the WAL besides the change, TOASTed values included
// (fetched and written out in full), so an update of a wide row writes
// about twice the WAL it did, more when large TOASTed columns are
// untouched by it, and a delete writes about the row's size instead of its
// key's. The server's write volume, its replication traffic and the WAL a
// lagging slot retains grow by as much. Inserts cost nothing more. The
// ALTER TABLE itself takes a brief ACCESS EXCLUSIVE lock, which is why
// it runs only when the setting differs.
func SetReplicaIdentityFull(ctx context.Context, db DB, tableName string) error {
	t, err := resolve(ctx, db, tableName)
	if err != nil {
		return err
	}
	var ident string
	if err := db.QueryRow(ctx, "SELECT relreplident::text FROM pg_catalog.pg_class WHERE oid = pg_catalog.to_regclass($1)", t.sanitize()).Scan(&ident); err != nil {
		return fmt.Errorf("logrepl: replica identity of %s: %w", t, err)
	}
	if ident == "f" {
		return nil
	}
	if _, err := db.Exec(ctx, "ALTER TABLE "+t.sanitize()+" REPLICA IDENTITY FULL"); err != nil {
		return fmt.Errorf("logrepl: replica identity of %s: %w", t, err)
	}
	return nil
}
