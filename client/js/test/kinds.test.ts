// Rows with every value kind of docs/protocol.md ("Column values") decode
// from a changes frame, land in a scope's rows and come back from the store
// unchanged, typed by the wire-form types.
import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeServerFrame, type Decimal, type PgArray, type Row, type Timestamp, type Base64 } from "../src/protocol";
import { applyBase } from "../src/replica";
import { memoryStore } from "../src/storage";

/** A row type as an app declares it for a table of these column types. */
type Product = {
  id: string;
  price: Decimal; // numeric(12,2)
  maybe: Decimal | null; // numeric
  tags: PgArray<string> | null; // text[]
  counts: PgArray<number> | null; // bigint[]
  times: PgArray<Timestamp>; // timestamptz[]
  amounts: PgArray<Decimal>; // numeric[]
  mood: "happy" | "sad"; // an enum
  uid: string; // uuid
  addr: string; // inet
  span: string; // interval
  at: Timestamp; // timestamptz
  blob: Base64 | null; // bytea
};

const row =
  '{"id":"p1","price":"90071992547409931.30","maybe":null,"tags":["a","",null,"é,{}"],"counts":[9007199254740991,null,-3],' +
  '"times":["2026-12-02T14:30:00.123456Z",null],"amounts":["0.1","0.2","NaN","-Infinity",null],"mood":"sad",' +
  '"uid":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","addr":"2001:db8::1/64","span":"1 day 02:03:04.5",' +
  '"at":"1999-12-31T23:59:59.000001Z","blob":"AAEC/w=="}';

test("a row of every value kind round-trips through a scope's rows and the store", async () => {
  const f = decodeServerFrame(`{"v":1,"type":"changes","id":"s1","cursor":"1.E.7","entries":[{"op":"upsert","key":"p1","row":${row}}]}`);
  assert.equal(f.type, "changes");
  if (f.type !== "changes") return;
  const rows = applyBase(new Map<string, Row>(), true, f.entries);
  const store = memoryStore();
  await store.saveScope({ digest: "d1", resource: "products", cursor: f.cursor, rows: Object.fromEntries(rows) }, true);
  const back = await store.loadScope("d1");
  assert.ok(back);
  const p = back.rows["p1"] as unknown as Product;
  assert.deepEqual(p, JSON.parse(row));
  // A decimal is its text, exact beyond 2^53 and with its scale; no float.
  assert.equal(p.price, "90071992547409931.30");
  assert.deepEqual(p.amounts, ["0.1", "0.2", "NaN", "-Infinity", null]);
  assert.equal(p.maybe, null);
  // Arrays keep NULL elements and empty strings; times their microseconds.
  assert.deepEqual(p.tags, ["a", "", null, "é,{}"]);
  assert.equal(p.times[0], "2026-12-02T14:30:00.123456Z");
  assert.equal(p.at, "1999-12-31T23:59:59.000001Z");
  assert.equal(p.mood, "sad");
});
