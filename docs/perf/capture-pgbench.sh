#!/bin/sh
# Writer-side cost of capture triggers, measured with pgbench against
# identical tables (see docs/performance.md, "Postgres feed: capture
# overhead"): plain; a trigger like tide's capture (a deferred constraint
# trigger inserting the row as jsonb into an unindexed outbox); the same
# trigger into an outbox indexed by transaction, as a change log read by
# transaction must be; the same change as a transactional WAL message
# (pg_logical_emit_message); an empty deferred trigger. Rounds alternate; with -d, a second pgbench deletes the
# outbox's rows meanwhile, as a sequencer would.
#
#   sh docs/perf/capture-pgbench.sh [rounds] [clients] [-d]
#
# It creates and drops the schema capture_bench in $DB (default: the test
# database on 127.0.0.1). Loopback only.
set -eu
DB=${DB:-"postgres://postgres@127.0.0.1:5432/test?sslmode=disable"}
ROUNDS=${1:-3}
CLIENTS=${2:-16}
DELETER=${3:-}
dir=$(mktemp -d)
trap 'psql -q "$DB" -c "DROP SCHEMA IF EXISTS capture_bench CASCADE" >/dev/null 2>&1; rm -rf "$dir"' EXIT
psql -q "$DB" <<'SQL'
DROP SCHEMA IF EXISTS capture_bench CASCADE;
CREATE SCHEMA capture_bench;
CREATE TABLE capture_bench.plain (id bigserial PRIMARY KEY, project_id text NOT NULL, title text NOT NULL, done boolean NOT NULL DEFAULT false);
CREATE TABLE capture_bench.s_outbox (LIKE capture_bench.plain INCLUDING ALL);
CREATE TABLE capture_bench.s_indexed (LIKE capture_bench.plain INCLUDING ALL);
CREATE TABLE capture_bench.s_msg (LIKE capture_bench.plain INCLUDING ALL);
CREATE TABLE capture_bench.s_empty (LIKE capture_bench.plain INCLUDING ALL);
CREATE TABLE capture_bench.outbox (id bigserial NOT NULL, xid xid8 NOT NULL DEFAULT pg_current_xact_id(), resource text NOT NULL, op smallint NOT NULL, key text NOT NULL, scope text[] NOT NULL, data jsonb, origin text);
CREATE FUNCTION capture_bench.cap_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE o text := nullif(current_setting('tide.origin', true), '');
BEGIN
  INSERT INTO capture_bench.outbox (resource, op, key, scope, data, origin) VALUES ('todos', 1, NEW.id::text, ARRAY[NEW.project_id::text],
    jsonb_build_object('id', NEW.id, 'project_id', NEW.project_id, 'title', NEW.title, 'done', NEW.done), o);
  RETURN NULL;
END $$;
CREATE TABLE capture_bench.indexed_outbox (LIKE capture_bench.outbox INCLUDING ALL);
CREATE INDEX ON capture_bench.indexed_outbox (xid);
-- cap_outbox writing into the indexed outbox instead.
DO $$ BEGIN
  EXECUTE replace(replace(pg_get_functiondef('capture_bench.cap_outbox'::regproc),
    'capture_bench.cap_outbox()', 'capture_bench.cap_indexed()'), 'capture_bench.outbox ', 'capture_bench.indexed_outbox ');
END $$;
CREATE FUNCTION capture_bench.cap_msg() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE o text := nullif(current_setting('tide.origin', true), '');
BEGIN
  PERFORM pg_logical_emit_message(true, 'tide', jsonb_build_object('r', 'todos', 'op', 1, 'k', NEW.id::text, 's', ARRAY[NEW.project_id::text],
    'd', jsonb_build_object('id', NEW.id, 'project_id', NEW.project_id, 'title', NEW.title, 'done', NEW.done), 'o', o)::text);
  RETURN NULL;
END $$;
CREATE FUNCTION capture_bench.cap_empty() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON capture_bench.s_outbox DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION capture_bench.cap_outbox();
CREATE CONSTRAINT TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON capture_bench.s_indexed DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION capture_bench.cap_indexed();
CREATE CONSTRAINT TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON capture_bench.s_msg DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION capture_bench.cap_msg();
CREATE CONSTRAINT TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON capture_bench.s_empty DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION capture_bench.cap_empty();
SQL
for t in plain s_outbox s_indexed s_msg s_empty; do
  echo "INSERT INTO capture_bench.$t (project_id, title) VALUES ('p' || (random()*10)::int, 'a todo title of some length');" > "$dir/$t.sql"
done
echo "DELETE FROM capture_bench.outbox;" > "$dir/del.sql"
for r in $(seq 1 "$ROUNDS"); do
  for t in plain s_outbox s_indexed s_msg s_empty; do
    pid=
    if [ "$DELETER" = "-d" ] && [ "$t" = s_outbox ]; then
      pgbench -n -c 1 -T 5 -R 800 -f "$dir/del.sql" "$DB" >/dev/null 2>&1 &
      pid=$!
    fi
    tps=$(pgbench -n -c "$CLIENTS" -j 2 -T 5 -f "$dir/$t.sql" "$DB" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    [ -n "$pid" ] && wait "$pid"
    echo "round $r $t: $tps commits/s"
  done
  psql -q "$DB" -c "TRUNCATE capture_bench.outbox, capture_bench.indexed_outbox" -c "VACUUM capture_bench.outbox, capture_bench.indexed_outbox" >/dev/null
done
