// Local data per principal: the store records whose data it holds; another
// principal's rows are never shown and its queue never sent; clearLocalData
// is the logout call; polling reads Tide-Principal.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, memoryStore, RejectError, type ClientEvent, type Store } from "../src/index";
import { FakeWS, client, until, welcome, welcomed } from "./helpers";

/** A store alice used: a synced scope with a row, and a queued mutation. */
async function alicesStore(): Promise<{ store: Store; queued: string }> {
  const store = memoryStore();
  const { cl } = client({ store });
  const s = cl.scope("todos", { p: "a" });
  const ws = await welcomed(0, { ...welcome, principal: "alice" });
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.1", entries: [{ op: "upsert", key: "secret", row: { id: "secret", p: "a" } }] });
  await until("row", () => s.getSnapshot().rows.length === 1);
  const m = cl.mutate("todos", "put", { id: "q" }, { local: (tx) => tx.upsert("todos", "q", { id: "q", p: "a" }) });
  await m.queued;
  cl.close();
  assert.equal(await store.meta("principal"), "alice");
  return { store, queued: m.key };
}

test("without the user option, stored rows and the queue wait for the welcome; another principal's are discarded, with an event, and never sent", async () => {
  const { store, queued } = await alicesStore();
  const { cl, events } = client({ store });
  const s = cl.scope("todos", { p: "a" });
  const ws = await until("socket", () => FakeWS.all[0]);
  await until("hello", () => ws.of("hello")[0]);
  // Before the welcome: a write made now shows at once, alice's stored rows do not.
  const early = cl.mutate("todos", "put", { id: "b" }, { local: (tx) => tx.upsert("todos", "b", { id: "b", p: "a" }) });
  await until("the page's own optimistic row", () => s.getSnapshot().byKey.has("b"));
  assert.ok(!s.getSnapshot().byKey.has("secret") && !s.getSnapshot().byKey.has("q"), "nothing of alice's before the welcome");
  assert.deepEqual(cl.pendingKeys, [early.key]);
  ws.push({ ...welcome, principal: "bob" });
  await until("principal-changed", () => events.find((e) => e.type === "principal-changed"));
  assert.deepEqual(events.find((e): e is Extract<ClientEvent, { type: "principal-changed" }> => e.type === "principal-changed"), { type: "principal-changed", from: "alice", to: "bob" });
  // A write made before the page knew its principal is the store's (alice's): rejected, never sent as bob.
  await assert.rejects(early.result, (e: RejectError) => e.code === "principal_changed");
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  assert.equal(sub.cursor, undefined, "alice's cursor is gone");
  const later = cl.mutate("todos", "put", { id: "c" });
  await until("bob's write sent", () => ws.of("mutate").some((f) => f.key === later.key));
  assert.ok(!ws.of("mutate").some((f) => f.key === queued || f.key === early.key), "alice's writes are never sent under bob's session");
  assert.ok(!s.getSnapshot().byKey.has("secret") && !s.getSnapshot().byKey.has("b"));
  assert.equal(await store.meta("principal"), "bob");
  assert.deepEqual((await store.loadQueue()).map((it) => it.key), [later.key]);
  assert.deepEqual((await store.listScopes!()).flatMap((r) => Object.keys(r.rows)), []);
  cl.close();
});

test("a new store is claimed by the first welcome, with the writes made before it", async () => {
  const store = memoryStore();
  const { cl, events } = client({ store });
  const m = cl.mutate("todos", "put", { id: "n" });
  await m.queued;
  const ws = await welcomed(0, { ...welcome, principal: "dan" });
  await until("sent", () => ws.of("mutate").some((f) => f.key === m.key));
  assert.equal(await store.meta("principal"), "dan");
  assert.ok(!events.some((e) => e.type === "principal-changed"));
  cl.close();
});

test("the same principal: the stored rows and queue come back once the welcome confirms it", async () => {
  const { store, queued } = await alicesStore();
  const { cl, events } = client({ store });
  const s = cl.scope("todos", { p: "a" });
  const ws = await welcomed(0, { ...welcome, principal: "alice" });
  await until("stored row", () => s.getSnapshot().byKey.has("secret") && s.getSnapshot().byKey.has("q"));
  await until("queue resent", () => ws.of("mutate").some((f) => f.key === queued));
  assert.ok(!events.some((e) => e.type === "principal-changed"));
  cl.close();
});

test("a page whose session changes user mid-way: its pending mutations are rejected with principal_changed", async () => {
  const { cl } = client();
  const s = cl.scope("todos");
  let ws = await welcomed(0, { ...welcome, principal: "alice" });
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.1", entries: [{ op: "upsert", key: "x", row: { id: "x" } }] });
  await until("row", () => s.getSnapshot().rows.length === 1);
  ws.close(1006);
  const m = cl.mutate("todos", "put", { id: "y" });
  ws = await welcomed(1, { ...welcome, principal: "bob" });
  const e = await m.result.then(() => undefined, (x: RejectError) => x);
  assert.equal(e?.code, "principal_changed");
  assert.equal(s.getSnapshot().rows.length, 0);
  await until("resubscribed from no cursor", () => ws.of("subscribe")[0]);
  assert.equal(ws.of("subscribe")[0]!.cursor, undefined);
  assert.equal(ws.of("mutate").length, 0);
  cl.close();
});

test("clearLocalData wipes rows, cursors, queue and meta but the origin, rejects the pending mutations, empties every scope, and the next welcome claims the store", async () => {
  const store = memoryStore();
  const { cl } = client({ store });
  const s = cl.scope("todos");
  const notes: number[] = [];
  s.subscribe((x) => notes.push(x.rows.length));
  const ws = await welcomed(0, { ...welcome, principal: "alice" });
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.1", entries: [{ op: "upsert", key: "x", row: { id: "x" } }] });
  await until("row", () => s.getSnapshot().rows.length === 1);
  const m = cl.mutate("todos", "put", { id: "y" });
  await m.queued;
  const origin = await store.meta("origin");
  await cl.clearLocalData();
  await assert.rejects(m.result, (e: RejectError) => e.code === "cleared");
  assert.deepEqual(s.getSnapshot().rows, [], "the same Scope object, emptied");
  assert.deepEqual(await store.loadQueue(), []);
  assert.deepEqual(await store.listScopes!(), []);
  assert.equal(await store.meta("principal"), undefined);
  assert.notEqual(origin, undefined);
  assert.equal(cl.status.getSnapshot().pending, 0);
  // The next session (another user logs in on this browser) claims the empty store.
  const ws2 = await welcomed(1, { ...welcome, principal: "carol" });
  const sub2 = await until("resubscribed", () => ws2.of("subscribe")[0]);
  assert.equal(sub2.cursor, undefined);
  await until("claimed", async () => (await store.meta("principal")) === "carol");
  cl.close();
  // The device keeps its origin: a tab that started before the clear and
  // one that starts after it send the shared queue under one origin.
  assert.equal(await store.meta("origin"), origin, "the origin survives the clear");
  const later = client({ store }).cl; // a tab started after the clear
  const hello = await until("hello", () => FakeWS.all[0]?.of("hello")[0]);
  later.close();
  assert.equal(hello.origin, origin, "a tab started after the clear says the same origin");
});

test("the user option: a database per user, rows shown before the socket opens", async () => {
  const names: string[] = [];
  const fakeIDB = { open: (n: string) => (names.push(n), { set onupgradeneeded(_: unknown) {}, set onsuccess(_: unknown) {}, set onerror(f: () => void) { queueMicrotask(f); }, error: new Error("no IndexedDB here") }) };
  (globalThis as { indexedDB?: unknown }).indexedDB = fakeIDB;
  try {
    FakeWS.all = [];
    const a = createClient({ url: "http://app.test/tide", user: "alice", WebSocket: FakeWS as unknown as typeof WebSocket, minBackoff: 1, maxBackoff: 5 });
    const b = createClient({ url: "http://app.test/tide", dbName: "app", user: "bob", WebSocket: FakeWS as unknown as typeof WebSocket, minBackoff: 1, maxBackoff: 5 });
    const c = createClient({ url: "http://app.test/tide", WebSocket: FakeWS as unknown as typeof WebSocket, minBackoff: 1, maxBackoff: 5 });
    await until("opened", () => names.length === 3);
    assert.deepEqual(names.sort(), ["app:bob", "tide", "tide:alice"]);
    for (const x of [a, b, c]) x.close();
  } finally {
    delete (globalThis as { indexedDB?: unknown }).indexedDB;
  }
});

test("polling: the Tide-Principal header binds the store before anything is shown or posted", async () => {
  const { store, queued } = await alicesStore();
  const posted: { path: string; body: { [k: string]: unknown }; origin?: string }[] = [];
  const fetch = async (url: string | URL | Request, init?: RequestInit) => {
    const path = new URL(String(url)).pathname.replace("/tide", "");
    const body = JSON.parse(String(init?.body)) as { [k: string]: unknown };
    posted.push({ path, body, origin: (init?.headers as { [k: string]: string } | undefined)?.["Tide-Origin"] });
    const frame = path === "/mutate" ? { v: 1, type: "ack", key: body.key, cursor: "1.F.1", entries: [] } : body.resource ? { v: 1, type: "changes", cursor: "1.F.1", entries: [] } : { v: 1, type: "error", code: "bad_frame", message: "no resource" };
    return new Response(JSON.stringify(frame), { status: 200, headers: { "Tide-Principal": "bob" } });
  };
  const events: ClientEvent[] = [];
  const cl = createClient({ url: "http://app.test/tide", store, transport: "poll", fetch: fetch as typeof globalThis.fetch, pollInterval: 60000, onEvent: (e) => events.push(e) });
  const s = cl.scope("todos", { p: "a" });
  await until("principal-changed", () => events.some((e) => e.type === "principal-changed"));
  await until("polled", () => posted.some((p) => p.path === "/changes" && p.body.resource === "todos"));
  const poll = posted.find((p) => p.body.resource === "todos")!;
  assert.equal(poll.body.cursor, "", "alice's cursor was not used");
  assert.ok(!posted.some((p) => p.path === "/mutate" && p.body.key === queued), "alice's queue was not posted");
  assert.ok(!s.getSnapshot().byKey.has("secret"));
  assert.equal(await store.meta("principal"), "bob");
  // Every request names the device: its own writes' entries come with their origin, and an anonymous session's mutations are scoped by it.
  const origin = await store.meta("origin");
  assert.ok(origin);
  for (const p of posted) assert.equal(p.origin, origin, `${p.path} names the device's origin`);
  cl.close();
});

test("polling: invalid_cursor drops the stored cursor and polls the snapshot again from none", async () => {
  const { store } = await alicesStore(); // alice's copy of todos {p: "a"}, at cursor 1.E.1
  const polls: { [k: string]: unknown }[] = [];
  const fetch = async (url: string | URL | Request, init?: RequestInit) => {
    const path = new URL(String(url)).pathname.replace("/tide", "");
    const body = JSON.parse(String(init?.body)) as { [k: string]: unknown };
    if (path === "/changes" && body.resource) polls.push(body);
    const frame =
      path === "/mutate" ? { v: 1, type: "ack", key: body.key, cursor: "1.E.2", entries: [] }
      : !body.resource ? { v: 1, type: "error", code: "bad_frame", message: "no resource" }
      : body.cursor ? { v: 1, type: "error", code: "invalid_cursor", message: "the cursor is not one this server issued for this subscription" }
      : { v: 1, type: "changes", cursor: "1.E.9", entries: [{ op: "upsert", key: "fresh", row: { id: "fresh", p: "a" } }] };
    return new Response(JSON.stringify(frame), { status: frame.type === "error" ? 400 : 200, headers: { "Tide-Principal": "alice" } });
  };
  const cl = createClient({ url: "http://app.test/tide", store, transport: "poll", fetch: fetch as typeof globalThis.fetch, pollInterval: 60000, minBackoff: 60000, maxBackoff: 60000 });
  const s = cl.scope("todos", { p: "a" });
  await until("the snapshot polled from no cursor", () => polls.length >= 2);
  assert.equal(polls[0]!.cursor, "1.E.1", "the stored cursor is tried first");
  assert.equal(polls[1]!.cursor, "", "then dropped");
  await until("the fresh snapshot replaces the copy", () => s.getSnapshot().byKey.has("fresh") && !s.getSnapshot().byKey.has("secret"));
  await until("stored", async () => (await store.listScopes!())[0]?.cursor === "1.E.9");
  cl.close();
});
