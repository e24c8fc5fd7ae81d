// Local data follows access: a scope the server refuses drops its rows and
// cursor from memory and from the store at once, says why, and comes back
// on the same object with retry().
import { test } from "node:test";
import assert from "node:assert/strict";
import { memoryStore, type ScopeSnapshot } from "../src/index";
import { FakeWS, client, until, welcomed } from "./helpers";

const rows = (n: number) => Array.from({ length: n }, (_, i) => ({ op: "upsert", key: "r" + i, row: { id: "r" + i, board: "b1" } }));

test("a forbidden scope drops its rows and cursor from memory and the store, keeps its record, and retry() brings it back on the same object", async () => {
  const store = memoryStore();
  const { cl } = client({ store });
  const board = cl.scope("cards", { board: "b1" });
  const seen: ScopeSnapshot[] = [];
  board.subscribe((s) => seen.push(s));
  const ws = await welcomed();
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.18", entries: rows(18) });
  ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.18" });
  await until("live with 18 rows", () => board.getSnapshot().state === "live" && board.getSnapshot().rows.length === 18);
  assert.equal((await store.listScopes!())[0]?.cursor, "1.E.18");
  // Access ends (the server's re-check after a membership change).
  ws.push({ type: "error", id: sub.id, code: "forbidden", message: "you are not a member of this board", detail: "policy cards: board b1" });
  await until("error", () => board.getSnapshot().state === "error");
  const snap = board.getSnapshot();
  assert.deepEqual(snap.rows, []);
  assert.equal(snap.byKey.size, 0);
  assert.deepEqual(snap.error, { code: "forbidden", message: "you are not a member of this board", detail: "policy cards: board b1" });
  const stored = await store.listScopes!();
  assert.equal(stored.length, 1, "the record stays: the scope is still followed");
  assert.deepEqual(stored[0]!.rows, {}, "no rows in the store");
  assert.equal(stored[0]!.cursor, "", "no cursor in the store");
  assert.equal(cl.status.getSnapshot().state, "live", "a refused scope does not hold the status back");
  // A reload shows nothing of it either.
  const { cl: again } = client({ store });
  const b2 = again.scope("cards", { board: "b1" });
  const ws2 = await welcomed(0);
  await until("second client subscribes from no cursor", () => ws2.of("subscribe")[0]);
  assert.equal(ws2.of("subscribe")[0]!.cursor, undefined);
  assert.equal(b2.getSnapshot().rows.length, 0);
  again.close();
  // Access returns: retry() on the same Scope, from no cursor.
  board.retry();
  const resub = await until("resubscribed", () => ws.of("subscribe")[1]);
  assert.equal(resub.cursor, undefined, "from no cursor");
  assert.notEqual(board.getSnapshot().state, "error");
  ws.push({ type: "changes", id: resub.id, cursor: "1.E.20", entries: rows(3) });
  ws.push({ type: "caught-up", id: resub.id, cursor: "1.E.20" });
  await until("live again", () => board.getSnapshot().state === "live" && board.getSnapshot().rows.length === 3);
  assert.equal(board.getSnapshot().error, undefined);
  assert.ok(seen.length > 3, "the same listener saw it all");
  cl.close();
});

test("a connection refused for good (close 1008, no token to renew) empties every scope with the server's reason", async () => {
  const store = memoryStore();
  const { cl } = client({ store });
  const a = cl.scope("todos", { p: "1" });
  const ws = await welcomed();
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.2", entries: [{ op: "upsert", key: "t", row: { id: "t", p: "1" } }] });
  await until("row", () => a.getSnapshot().rows.length === 1);
  ws.push({ type: "error", code: "unauthenticated", message: "your session ended", detail: "session expired" });
  ws.close(1008);
  await until("status error", () => cl.status.getSnapshot().state === "error");
  assert.equal(cl.status.getSnapshot().code, "unauthenticated");
  assert.equal(cl.status.getSnapshot().message, "your session ended");
  await until("scope error", () => a.getSnapshot().state === "error");
  assert.deepEqual(a.getSnapshot().rows, []);
  assert.equal(a.getSnapshot().error?.message, "your session ended");
  await until("store emptied", async () => (await store.listScopes!())[0]?.cursor === "");
  assert.deepEqual((await store.listScopes!())[0]!.rows, {});
  // New credentials: reconnect() resubscribes it (a connection-level refusal is not the scope's own).
  cl.reconnect();
  const ws2 = await welcomed(1);
  const s2 = await until("resubscribed", () => ws2.of("subscribe")[0]);
  assert.equal(s2.cursor, undefined);
  cl.close();
  void FakeWS;
});
