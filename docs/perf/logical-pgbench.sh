#!/bin/sh
# What capture outside the app's transaction would cost its writers: logical
# decoding (wal_level = logical, pgoutput, a slot read by pg_recvlogical)
# against tide's capture trigger and a plain table, measured with pgbench
# against identical tables (see docs/performance.md, "Postgres feed: capture
# overhead"). Rounds alternate:
#   plain      no capture, no decoder reading the WAL;
#   plain+dec  no capture, the decoder reading the WAL (it decodes every
#              transaction of the database, published or not);
#   logical    the table published (REPLICA IDENTITY FULL), the decoder
#              reading it: the writer does nothing more than for plain;
#   trigger    tide's capture trigger into an unindexed outbox, no decoder,
#              no sequencer (the outbox just grows).
# A decoded change would then still have to be written into the change
# log: the last lines time that write on its own (multi-row INSERTs of 100
# rows into a table with the change log's indexes), per row.
#
#   sh docs/perf/logical-pgbench.sh [rounds] [clients]
#
# It needs wal_level = logical (ALTER SYSTEM SET wal_level = logical, then a
# restart), and creates and drops the schema logical_bench, the publication
# logical_bench and the slot logical_bench in $DB (default: the test
# database on 127.0.0.1). Loopback only.
set -eu
DB=${DB:-"postgres://postgres@127.0.0.1:5432/test?sslmode=disable"}
ROUNDS=${1:-3}
CLIENTS=${2:-16}
if [ "$(psql -Atq "$DB" -c 'SHOW wal_level')" != logical ]; then
  echo "wal_level is not logical: ALTER SYSTEM SET wal_level = logical, then restart Postgres" >&2
  exit 1
fi
dir=$(mktemp -d)
dec=
cleanup() {
  [ -n "$dec" ] && kill "$dec" 2>/dev/null && wait "$dec" 2>/dev/null || true
  psql -q "$DB" -c "SELECT pg_drop_replication_slot('logical_bench') FROM pg_replication_slots WHERE slot_name = 'logical_bench'" \
    -c "DROP PUBLICATION IF EXISTS logical_bench" -c "DROP SCHEMA IF EXISTS logical_bench CASCADE" >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
psql -q "$DB" <<'SQL'
DROP SCHEMA IF EXISTS logical_bench CASCADE;
CREATE SCHEMA logical_bench;
CREATE TABLE logical_bench.plain (id bigserial PRIMARY KEY, project_id text NOT NULL, title text NOT NULL, done boolean NOT NULL DEFAULT false);
CREATE TABLE logical_bench.logical (LIKE logical_bench.plain INCLUDING ALL);
ALTER TABLE logical_bench.logical REPLICA IDENTITY FULL;
CREATE TABLE logical_bench.s_trigger (LIKE logical_bench.plain INCLUDING ALL);
CREATE TABLE logical_bench.outbox (id bigserial NOT NULL, xid xid8 NOT NULL DEFAULT pg_current_xact_id(), resource text NOT NULL, op smallint NOT NULL, key text NOT NULL, scope text[] NOT NULL, data jsonb, origin text);
CREATE FUNCTION logical_bench.cap() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE o text := nullif(current_setting('tide.origin', true), '');
BEGIN
  INSERT INTO logical_bench.outbox (resource, op, key, scope, data, origin) VALUES ('todos', 1, NEW.id::text, ARRAY[NEW.project_id::text],
    jsonb_build_object('id', NEW.id, 'project_id', NEW.project_id, 'title', NEW.title, 'done', NEW.done), o);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON logical_bench.s_trigger DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION logical_bench.cap();
CREATE TABLE logical_bench.changes (pos bigint PRIMARY KEY, resource text NOT NULL, op smallint NOT NULL, key text NOT NULL, scope text[] NOT NULL,
  data jsonb, origin text, committed_at timestamptz DEFAULT clock_timestamp(), prev jsonb, xid xid8);
CREATE INDEX ON logical_bench.changes (resource, pos);
CREATE INDEX ON logical_bench.changes ((scope[1]), pos) WHERE resource = 'todos';
CREATE SEQUENCE logical_bench.pos_seq;
CREATE PUBLICATION logical_bench FOR TABLE logical_bench.logical;
SELECT 1 FROM pg_create_logical_replication_slot('logical_bench', 'pgoutput');
SQL
for t in plain logical s_trigger; do
  echo "INSERT INTO logical_bench.$t (project_id, title) VALUES ('p' || (random()*10)::int, 'a todo title of some length');" > "$dir/$t.sql"
done
cat > "$dir/log.sql" <<'SQL'
INSERT INTO logical_bench.changes (pos, resource, op, key, scope, data, xid)
SELECT nextval('logical_bench.pos_seq'), 'todos', 1, i::text, ARRAY['p' || (i % 10)],
  jsonb_build_object('id', i, 'project_id', 'p' || (i % 10), 'title', 'a todo title of some length', 'done', false), pg_current_xact_id()
FROM generate_series(1, 100) i;
SQL
start_decoder() {
  pg_recvlogical -d "$DB" --slot logical_bench --start -o proto_version=1 -o publication_names=logical_bench -f /dev/null &
  dec=$!
}
stop_decoder() {
  kill "$dec" && wait "$dec" 2>/dev/null || true
  dec=
}
bench() { # table label
  pgbench -n -c "$CLIENTS" -j 2 -T 5 -f "$dir/$1.sql" "$DB" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r plain: $(bench plain) commits/s"
  start_decoder
  echo "round $r plain+dec: $(bench plain) commits/s"
  echo "round $r logical: $(bench logical) commits/s"
  stop_decoder
  echo "round $r trigger: $(bench s_trigger) commits/s"
  psql -q "$DB" -c "TRUNCATE logical_bench.outbox" >/dev/null
done
# The change log's write on its own: one client, batches of 100 rows.
tps=$(pgbench -n -c 1 -T 5 -f "$dir/log.sql" "$DB" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
echo "change log write, batches of 100 rows: $tps batches/s, $(echo "$tps" | awk '{printf "%.1f", 1e6 / ($1 * 100)}') µs per row (wall, one client)"
