// Presentable errors: every rejection and scope error has a stable code, the
// server's short message as the Error's message (no prefix, shown to a
// person) and a detail for developers. And own writes converge: a live
// entry of the client's own origin is applied unless the client holds
// exactly that row from its own ack.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ConflictError, RejectError, TideError, type ScopeSnapshot } from "../src/index";
import { client, until, welcomed } from "./helpers";

test("a reject's RejectError: code, the mutator's own message as the Error's message, detail", async () => {
  const { cl, events } = client();
  const ws = await welcomed();
  const m = cl.mutate("cards", "add", { title: "" });
  await until("sent", () => ws.of("mutate")[0]);
  ws.push({ type: "reject", key: m.key, code: "invalid_args", message: "title must be 1-200 characters (got 0)", detail: "cards.add: invalid arguments" });
  const e = await m.result.then(() => undefined, (x: unknown) => x);
  assert.ok(e instanceof RejectError && e instanceof TideError && e instanceof Error);
  assert.equal(e.name, "RejectError");
  assert.equal(e.code, "invalid_args");
  assert.equal(e.message, "title must be 1-200 characters (got 0)");
  assert.equal(e.detail, "cards.add: invalid arguments");
  assert.equal(e.key, m.key);
  // A connection-level error frame is reported as a TideError with the same parts.
  ws.push({ type: "error", code: "rate_limited", message: "slow down", detail: "50 frames/s" });
  const ev = await until("error event", () => events.find((x) => x.type === "error" && (x.error as TideError).code === "rate_limited"));
  assert.equal((ev as { error: TideError }).error.message, "slow down");
  assert.equal((ev as { error: TideError }).error.detail, "50 frames/s");
  cl.close();
});

test("a ConflictError: code conflict, the merge's own words as the message", async () => {
  const { cl } = client();
  cl.scope("todos");
  const ws = await welcomed();
  const m = cl.mutate("todos", "put", { id: "t" }, {
    local: (tx) => tx.upsert("todos", "t", { id: "t", n: 1 }),
    strategy: { merge: () => { throw new Error("both of you renamed it"); } },
  });
  await until("sent", () => ws.of("mutate")[0]);
  ws.push({ type: "ack", key: m.key, cursor: "1.E.2", entries: [{ op: "upsert", key: "t", resource: "todos", row: { id: "t", n: 2 } }] });
  const e = await m.result.then(() => undefined, (x: unknown) => x);
  assert.ok(e instanceof ConflictError);
  assert.equal(e.code, "conflict");
  assert.equal(e.message, "both of you renamed it");
  assert.match(e.detail, /conflict on todos "t"/);
  cl.close();
});

test("own writes: a live entry of this client's origin is applied unless it is exactly the row the ack landed", async () => {
  const { cl } = client();
  const scope = cl.scope("todos");
  const notes: ScopeSnapshot[] = [];
  scope.subscribe((s) => notes.push(s));
  const ws = await welcomed();
  const origin = (await until("hello", () => ws.of("hello")[0])).origin as string;
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.1" });
  await until("live", () => scope.getSnapshot().state === "live");
  const m = cl.mutate("todos", "put", { id: "a", title: "x" }, { local: (tx) => tx.upsert("todos", "a", { id: "a", title: "x" }) });
  await until("sent", () => ws.of("mutate")[0]);
  const acked = { id: "a", title: "x", rev: 1 };
  ws.push({ type: "ack", key: m.key, cursor: "1.E.2", entries: [{ op: "upsert", key: "a", resource: "todos", row: acked, origin }] });
  await m.result;
  await until("ack landed", () => scope.getSnapshot().byKey.get("a")?.rev === 1);
  // The same row, live: nothing changes, no notification.
  const before = notes.length;
  const snap = scope.getSnapshot();
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.2", entries: [{ op: "upsert", key: "a", row: acked, origin }] });
  await m.settled;
  assert.equal(scope.getSnapshot(), snap, "the row it holds from its own ack: skipped");
  assert.equal(notes.length, before);
  // Rows written on its behalf that the ack did not carry (a plain-SQL mutator, a trigger): applied.
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.3", entries: [
    { op: "upsert", key: "a", row: { id: "a", title: "x", rev: 2 }, origin },
    { op: "upsert", key: "b", row: { id: "b", title: "written by the mutator's SQL" }, origin },
  ] });
  await until("applied", () => scope.getSnapshot().byKey.get("a")?.rev === 2 && scope.getSnapshot().byKey.has("b"));
  cl.close();
});
