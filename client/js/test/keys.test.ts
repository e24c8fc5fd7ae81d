// Row keys: key(...parts) is the Go client's Key and the server's key text
// (docs/protocol.md, "Row keys"), and a scope's rows, its store and local
// writes all address a composite-key row by it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { key } from "../src/index";
import { client, until, welcomed } from "./helpers";

test("key: one part is its text; several are the JSON array of their texts, as the Go client writes them", () => {
  const cases: [Array<string | number | bigint | boolean>, string][] = [
    [["t1"], "t1"],
    [[42], "42"],
    [[-7], "-7"],
    [[2n ** 64n - 1n], "18446744073709551615"],
    [[true], "true"],
    [["u1", "b7"], '["u1","b7"]'],
    [["a:b", "c"], '["a:b","c"]'],
    [["a", "b:c"], '["a","b:c"]'],
    [["u1", 7, false], '["u1","7","false"]'],
    [['"\\', "\n\x01ü"], '["\\"\\\\","\\n\\u0001ü"]'],
    [["\b\t\f\r\x1f\x7f", "", "/<>&\u2028"], '["\\b\\t\\f\\r\\u001f\x7f","","/<>&\u2028"]'],
  ];
  for (const [parts, want] of cases) assert.equal(key(...parts), want, String(parts));
  assert.notEqual(key("a:b", "c"), key("a", "b:c"));
});

test("a composite-key scope: rows by key(...), kept in the store, and local writes by key(...)", async () => {
  const { cl, store } = client();
  const s = cl.scope("board_members");
  const ws = await welcomed(0, { type: "welcome", build: "web-1", limits: {}, principal: "alice" });
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  const ka = key("alice", "p7"), kc = key("alice:p7", "x"), kd = key("alice", "p7:x");
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.1", entries: [
    { op: "upsert", key: ka, row: { user_id: "alice", board_id: "p7", role: "owner" } },
    { op: "upsert", key: kc, row: { user_id: "alice:p7", board_id: "x" } },
    { op: "upsert", key: kd, row: { user_id: "alice", board_id: "p7:x" } },
  ] });
  ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.1" });
  await until("live", () => s.getSnapshot().state === "live");
  assert.equal(s.getSnapshot().byKey.get(ka)?.role, "owner");
  assert.equal(s.getSnapshot().byKey.size, 3);
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.2", entries: [{ op: "delete", key: kc }] });
  await until("delete applied", () => !s.getSnapshot().byKey.has(kc));
  assert.ok(s.getSnapshot().byKey.has(kd), "a key a separator would confuse stays");

  const m = cl.mutate("board_members", "promote", { user_id: "alice", board_id: "p7:x" }, {
    local: (tx) => tx.upsert("board_members", key("alice", "p7:x"), { ...tx.get("board_members", key("alice", "p7:x")), role: "admin" }),
  });
  await m.queued;
  await until("the optimistic row", () => s.getSnapshot().byKey.get(kd)?.role === "admin");
  cl.close();

  // The same store, a new page: the rows come back under the same keys.
  const again = client({ store });
  const s2 = again.cl.scope("board_members");
  await welcomed(0, { type: "welcome", build: "web-1", limits: {}, principal: "alice" });
  await until("stored rows", () => s2.getSnapshot().byKey.has(ka) && s2.getSnapshot().byKey.has(kd));
  assert.ok(!s2.getSnapshot().byKey.has(kc));
  assert.equal(s2.getSnapshot().byKey.get(kd)?.role, "admin", "the pending write is restored with the queue");
  again.cl.close();
});
