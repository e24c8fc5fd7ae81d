// No poison pills: a mutation that can never be sent is refused at mutate
// (frame_too_large over the server's max_frame_bytes, invalid_args), a
// reject frame_too_large settles, and a mutation the server closed 5
// connections on without answering is settled as undeliverable.
import { test } from "node:test";
import assert from "node:assert/strict";
import { memoryStore, RejectError } from "../src/index";
import { FakeWS, client, until, welcome, welcomed } from "./helpers";

test("mutate refuses a frame over 65536 bytes before any welcome: a typed error at once, nothing queued or applied", async () => {
  const { cl, store } = client();
  const scope = cl.scope("todos", { project_id: "p" });
  const ws = await welcomed();
  const m = cl.mutate("todos", "put", { id: "big", project_id: "p", title: "x".repeat(70000) }, { local: (tx) => tx.upsert("todos", "big", { id: "big", project_id: "p" }) });
  await assert.rejects(m.result, (e: RejectError) => e instanceof RejectError && e.code === "frame_too_large" && e.key === m.key && !/^tide:/.test(e.message));
  await assert.rejects(m.queued, RejectError, "not queued");
  await m.settled;
  assert.equal(cl.status.getSnapshot().pending, 0);
  assert.deepEqual(cl.pendingKeys, []);
  assert.deepEqual(await store.loadQueue(), []);
  assert.ok(!scope.getSnapshot().byKey.has("big"), "the local change was not applied");
  // Just under the limit is sent.
  const ok = cl.mutate("todos", "put", { t: "x".repeat(65000) });
  await ok.queued;
  await until("sent", () => ws.of("mutate").some((f) => f.key === ok.key));
  assert.ok(!ws.of("mutate").some((f) => f.key === m.key), "the refused one was never sent");
  cl.close();
});

test("the limit is the last welcome's max_frame_bytes, remembered in the store for the next client", async () => {
  const store = memoryStore();
  let { cl } = client({ store });
  await welcomed(0, { ...welcome, limits: { max_frame_bytes: 1000 } });
  await until("welcome handled", () => cl.status.getSnapshot().state !== "connecting");
  const m = cl.mutate("todos", "put", { t: "x".repeat(1000) });
  await assert.rejects(m.result, (e: RejectError) => e.code === "frame_too_large");
  cl.close();
  ({ cl } = client({ store }));
  await until("socket (the store is open)", () => FakeWS.all[0]); // never welcomed: the stored limit applies
  const r = cl.mutate("todos", "put", { t: "x".repeat(1000) });
  await assert.rejects(r.result, (e: RejectError) => e.code === "frame_too_large");
  cl.close();
});

test("args that are not a JSON object are refused with invalid_args", async () => {
  const { cl } = client();
  for (const bad of [[1, 2], "x", 5, null, { n: 10n }, (() => 1) as unknown]) {
    const m = cl.mutate("todos", "put", bad);
    await assert.rejects(m.result, (e: RejectError) => e.code === "invalid_args", String(bad));
  }
  assert.equal(cl.status.getSnapshot().pending, 0);
  cl.close();
});

test("a reject frame_too_large (the server read the key from the frame's head) settles the mutation and rolls it back", async () => {
  const { cl } = client();
  const scope = cl.scope("todos");
  const ws = await welcomed();
  const m = cl.mutate("todos", "put", { id: "a" }, { local: (tx) => tx.upsert("todos", "a", { id: "a" }) });
  await until("sent", () => ws.of("mutate")[0]);
  await until("the optimistic row shows", () => scope.getSnapshot().byKey.has("a"));
  ws.push({ type: "reject", key: m.key, code: "frame_too_large", message: "the frame is too large", detail: "70123 > 65536" });
  const e = await m.result.then(() => undefined, (x: RejectError) => x);
  assert.equal(e?.code, "frame_too_large");
  assert.equal(e?.message, "the frame is too large", "the server's message, no prefix");
  assert.equal(e?.detail, "70123 > 65536");
  await m.settled;
  assert.ok(!scope.getSnapshot().byKey.has("a"), "rolled back");
  assert.equal(cl.status.getSnapshot().pending, 0);
  cl.close();
});

test("a mutation sent on 5 connections the server closed without answering is settled as undeliverable, with an event; network losses and drains do not count", async () => {
  const { cl, events, store } = client();
  const m = cl.mutate("todos", "put", { id: "p" });
  await m.queued;
  let n = 0;
  const round = async (code: number) => {
    const ws = await welcomed(n++);
    await until("sent " + n, () => ws.of("mutate").some((f) => f.key === m.key));
    ws.close(code);
  };
  await round(1006); // network loss
  await round(4002); // drain
  for (let i = 0; i < 4; i++) await round(1011);
  assert.equal(cl.pendingKeys.length, 1, "4 server closes: still pending");
  await round(1011);
  const e = await m.result.then(() => undefined, (x: RejectError) => x);
  assert.equal(e?.code, "undeliverable");
  await m.settled;
  assert.ok(events.some((x) => x.type === "undeliverable" && x.error.key === m.key));
  assert.equal(cl.status.getSnapshot().pending, 0);
  assert.deepEqual(await store.loadQueue(), []);
  cl.close();
});

test("a reject rate_limited (too many of this user's mutations wait on the server) keeps the mutation queued and resends it with the same key", async () => {
  const { cl, store } = client();
  const scope = cl.scope("todos");
  const ws = await welcomed();
  const m = cl.mutate("todos", "put", { id: "r" }, { local: (tx) => tx.upsert("todos", "r", { id: "r" }) });
  await until("sent", () => ws.of("mutate")[0]);
  ws.push({ type: "reject", key: m.key, code: "rate_limited", message: "too many mutations wait", detail: "at most 1024" });
  await until("resent with the same key", () => ws.of("mutate").filter((f) => f.key === m.key).length === 2);
  assert.ok(scope.getSnapshot().byKey.has("r"), "not rolled back");
  assert.equal(cl.status.getSnapshot().pending, 1);
  assert.deepEqual((await store.loadQueue()).map((q) => q.key), [m.key]);
  ws.push({ type: "ack", key: m.key, cursor: "1.E.2", entries: [] });
  assert.equal((await m.result).key, m.key);
  cl.close();
});

test("a long offline queue is sent 32 mutations at a time, each answer sending the next: the server would drop frames beyond its burst unanswered", async () => {
  const { cl } = client();
  const ms = Array.from({ length: 100 }, (_, i) => cl.mutate("todos", "put", { id: `q${i}` }));
  await Promise.all(ms.map((m) => m.queued));
  const ws = await welcomed();
  await until("the first 32 sent", () => ws.of("mutate").length === 32);
  for (const [i, m] of ms.entries()) {
    const sent = ws.of("mutate");
    assert.ok(sent.length <= i + 32, `${sent.length} sent with ${i} answered`);
    await until(`mutation ${i} sent`, () => ws.of("mutate").some((f) => f.key === m.key));
    ws.push({ type: "ack", key: m.key, cursor: `1.E.${i + 2}`, entries: [] });
    await m.result;
  }
  assert.deepEqual(ws.of("mutate").map((f) => f.key), ms.map((m) => m.key), "each sent once, in order");
  cl.close();
});
