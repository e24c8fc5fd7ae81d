// The client's session against a fake socket: subscribe, snapshots, cursors,
// reconnects, tokens, close codes, mutations, the offline queue, tabs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, memoryStore, type Store } from "../src/index";
import { FakeWS, client, until, welcome, welcomed } from "./helpers";

test("session: hello with build and a persisted origin, subscribe, snapshot, caught-up, live, one notification per batch", async () => {
  const { cl, store } = client();
  const scope = cl.scope("todos", { project_id: "p7" });
  const notes: unknown[] = [];
  scope.subscribe((s) => notes.push(s));
  const ws = await until("socket", () => FakeWS.all[0]);
  assert.equal(ws.url, "ws://app.test/tide/ws");
  const hello = await until("hello", () => ws.of("hello")[0]);
  assert.equal(hello.build, "web-1");
  assert.match(hello.origin, /^web-[0-9a-f]{32}$/, "128 random bits: the origin is never shown to others and scopes an anonymous device's keys");
  assert.equal(await store.meta("origin", () => "other"), hello.origin, "the origin is stored");
  ws.push(welcome);
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  assert.deepEqual(sub.conditions, { project_id: "p7" });
  assert.equal(sub.cursor, undefined);
  const before = notes.length;
  ws.push({ type: "changes", id: sub.id, cursor: "2s.E.5.1.c2VhbGVk", entries: [{ op: "upsert", key: "t1", row: { id: "t1", project_id: "p7" } }, { op: "upsert", key: "t2", row: { id: "t2", project_id: "p7" } }] });
  await until("rows", () => scope.getSnapshot().rows.length === 2);
  assert.equal(notes.length - before, 1, "one notification for a batch of two rows");
  ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.5" });
  await until("live", () => scope.getSnapshot().state === "live");
  await until("status live", () => cl.status.getSnapshot().state === "live");
  // A duplicate (not newer) frame is dropped; a stale subscription's frame is ignored.
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.5", entries: [{ op: "delete", key: "t1" }] });
  ws.push({ type: "changes", id: "stale", cursor: "1.E.9", entries: [{ op: "delete", key: "t1" }] });
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.6", entries: [{ op: "delete", key: "t2" }] });
  await until("t2 gone", () => !scope.getSnapshot().byKey.has("t2"));
  assert.ok(scope.getSnapshot().byKey.has("t1"), "duplicate and stale frames were not applied");
  const snap = scope.getSnapshot();
  assert.equal(scope.getSnapshot(), snap, "getSnapshot is stable between changes");
  // Reconnect: resubscribe with the stored cursor.
  ws.close(1001);
  const ws2 = await welcomed(1);
  const sub2 = await until("subscribe 2", () => ws2.of("subscribe")[0]);
  assert.equal(sub2.cursor, "1.E.6");
  assert.notEqual(sub2.id, sub.id, "ids are never reused");
  // reset drops the copy; the snapshot that follows starts from empty.
  ws2.push({ type: "reset", id: sub2.id, reason: "epoch_changed" });
  ws2.push({ type: "changes", id: sub2.id, cursor: "2s.F.1.1.c2VhbGVk", entries: [{ op: "upsert", key: "t9", row: { id: "t9", project_id: "p7" } }] });
  await until("after reset", () => scope.getSnapshot().rows.length === 1 && scope.getSnapshot().byKey.has("t9"));
  cl.close();
});

test("rows and cursor persist: with the user option, a new client shows stored rows before its socket opens", async () => {
  const store = memoryStore();
  let { cl } = client({ store, user: "u1" });
  let scope = cl.scope("todos");
  const ws = await welcomed();
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.3", entries: [{ op: "upsert", key: "a", row: { id: "a" } }] });
  await until("row", () => scope.getSnapshot().rows.length === 1);
  cl.close();
  FakeWS.autoOpen = false;
  cl = createClient({ url: "http://app.test/tide", store, user: "u1", WebSocket: FakeWS as unknown as typeof WebSocket });
  scope = cl.scope("todos");
  await until("cached rows", () => scope.getSnapshot().state === "cached" && scope.getSnapshot().byKey.has("a"));
  cl.close();
  FakeWS.autoOpen = true;
});

test("unknown resource in changes fails loudly and drops the connection", async () => {
  const { cl, events } = client();
  const scope = cl.scope("todos");
  const ws = await welcomed();
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.3", entries: [{ op: "upsert", key: "a", resource: "secrets", row: { id: "a" } }] });
  await until("error event", () => events.some((e) => e.type === "error" && /secrets/.test(e.error.message)));
  await until("reconnect", () => FakeWS.all.length === 2);
  assert.equal(scope.getSnapshot().rows.length, 0, "nothing applied");
  cl.close();
});

test("a forbidden subscription is an error state; the rest stays live", async () => {
  const { cl } = client();
  const ok = cl.scope("todos", { project_id: "mine" });
  const no = cl.scope("todos", { project_id: "theirs" });
  const ws = await welcomed();
  const subs = await until("2 subscribes", () => ws.of("subscribe").length === 2 && ws.of("subscribe"));
  const bad = subs.find((f) => f.conditions.project_id === "theirs")!;
  const good = subs.find((f) => f.conditions.project_id === "mine")!;
  ws.push({ type: "error", id: bad.id, code: "forbidden", message: "not yours" });
  ws.push({ type: "caught-up", id: good.id, cursor: "1.E.1" });
  await until("error state", () => no.getSnapshot().state === "error");
  assert.equal(no.getSnapshot().error?.code, "forbidden");
  await until("live", () => ok.getSnapshot().state === "live" && cl.status.getSnapshot().state === "live");
  cl.close();
});

test("token provider: on hello, on refresh-token, and fresh on reconnect; 1008 with the same refused token stops", async () => {
  let n = 0;
  const { cl } = client({ token: () => "tok-" + ++n });
  const ws = await until("socket", () => FakeWS.all[0]);
  assert.equal((await until("hello", () => ws.of("hello")[0])).token, "tok-1");
  ws.push(welcome);
  ws.push({ type: "refresh-token", expires_in: 30 });
  assert.equal((await until("refresh", () => ws.of("refresh")[0])).token, "tok-2");
  ws.push({ type: "error", code: "unauthenticated", message: "the token expired" });
  ws.close(1008);
  const ws2 = await until("reconnect after 1008 past welcome", () => FakeWS.all[1]);
  assert.equal((await until("hello 2", () => ws2.of("hello")[0])).token, "tok-3");
  ws2.close(1008); // refused before welcome: no retry with these credentials
  await until("error state", () => cl.status.getSnapshot().state === "error");
  assert.equal(cl.status.getSnapshot().code, "unauthenticated");
  cl.close();
  assert.equal(FakeWS.all.length, 2, "no reconnect after a refusal");
});

test("close codes: 4000 stops with an error, 4002 and 1013 reconnect, update-available surfaces", async () => {
  const { cl, events } = client();
  let ws = await welcomed();
  ws.push({ type: "update-available", build: "web-2" });
  await until("update", () => cl.status.getSnapshot().updateAvailable === "web-2");
  assert.ok(events.some((e) => e.type === "update-available"));
  ws.close(4002);
  ws = await welcomed(1);
  ws.close(1013);
  ws = await until("1013 reconnects", () => FakeWS.all[2]);
  ws.close(4000);
  await until("4000 error", () => cl.status.getSnapshot().state === "error");
  assert.equal(cl.status.getSnapshot().code, "unsupported_version");
  cl.close();
});

test("mutate: optimistic row, queued, sent after subscribes with key/seq/at, ack settles at the scope's cursor", async () => {
  const { cl, store } = client();
  const scope = cl.scope("todos", { project_id: "p" });
  const ws = await until("socket", () => FakeWS.all[0]);
  await until("hello", () => ws.of("hello")[0]);
  const m = cl.mutate("todos", "put", { id: "t1", title: "x" }, { local: (tx) => tx.upsert("todos", "t1", { id: "t1", project_id: "p", title: "x" }) });
  await m.queued;
  assert.equal(cl.status.getSnapshot().pending, 1);
  assert.equal((await store.loadQueue()).length, 1, "persisted");
  await until("optimistic", () => scope.getSnapshot().byKey.get("t1")?.title === "x");
  ws.push(welcome);
  await until("mutate sent", () => ws.of("mutate").length === 1);
  const kinds = ws.sent.map((f) => f.type);
  assert.ok(kinds.indexOf("subscribe") < kinds.indexOf("mutate"), "subscriptions first: " + kinds);
  const mf = ws.of("mutate")[0]!;
  assert.equal(mf.key, m.key);
  assert.deepEqual(Object.keys(mf).slice(0, 3), ["v", "type", "key"], "key right after type");
  assert.ok(Number.isInteger(mf.seq) && Number.isInteger(mf.at));
  const sub = ws.of("subscribe")[0]!;
  ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.1" });
  ws.push({ type: "ack", key: m.key, cursor: "1.E.2", entries: [{ op: "upsert", key: "t1", row: { id: "t1", project_id: "p", title: "X" } }] });
  assert.equal((await m.result).cursor, "1.E.2");
  assert.equal(scope.getSnapshot().byKey.get("t1")?.title, "X", "the server's row landed");
  assert.equal(cl.status.getSnapshot().pending, 1, "not settled before the scope reaches the ack's cursor");
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.2", entries: [{ op: "upsert", key: "t1", row: { id: "t1", project_id: "p", title: "X" } }] });
  await m.settled;
  assert.equal(cl.status.getSnapshot().pending, 0);
  assert.equal((await store.loadQueue()).length, 0);
  // A reject rolls back.
  const r = cl.mutate("todos", "remove", { id: "t1" }, { local: (tx) => tx.delete("todos", "t1") });
  await until("optimistic delete", () => !scope.getSnapshot().byKey.has("t1"));
  await until("sent", () => ws.of("mutate").length === 2);
  ws.push({ type: "reject", key: r.key, code: "forbidden", message: "no" });
  await assert.rejects(r.result, (e: { code: string }) => e.code === "forbidden");
  assert.ok(scope.getSnapshot().byKey.has("t1"), "rolled back");
  cl.close();
});

test("mutate: a traceparent is sent with the mutation; a bad one is refused before anything is queued", async () => {
  const { cl, store } = client();
  cl.scope("todos", { project_id: "p" });
  const ws = await until("socket", () => FakeWS.all[0]);
  await until("hello", () => ws.of("hello")[0]);
  const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const m = cl.mutate("todos", "put", { id: "t1" }, { traceparent: tp });
  await m.queued;
  assert.equal((await store.loadQueue())[0]?.traceparent, tp, "kept with the queued mutation");
  ws.push(welcome);
  await until("mutate sent", () => ws.of("mutate").length === 1);
  assert.equal(ws.of("mutate")[0]?.traceparent, tp);
  cl.mutate("todos", "put", { id: "t2" });
  await until("second sent", () => ws.of("mutate").length === 2);
  assert.ok(!("traceparent" in ws.of("mutate")[1]!), "no traceparent unless given");
  assert.throws(() => cl.mutate("todos", "put", {}, { traceparent: "x".repeat(129) }), /traceparent/);
  assert.throws(() => cl.mutate("todos", "put", {}, { traceparent: "00-\u0007" }), /traceparent/);
  assert.equal(cl.status.getSnapshot().pending, 2, "refused calls queue nothing");
  cl.close();
});

test("the offline queue survives a new client: restored, shown, resent with its original key under the store's origin", async () => {
  const store = memoryStore();
  let { cl } = client({ store });
  const origin = (await until("hello", () => FakeWS.all[0]?.of("hello")[0])).origin;
  cl.scope("todos");
  const m = cl.mutate("todos", "put", { id: "q" }, { local: (tx) => tx.upsert("todos", "q", { id: "q" }) });
  await m.queued;
  cl.close();
  ({ cl } = client({ store }));
  const scope = cl.scope("todos");
  const ws = await welcomed(); // without the user option, stored data shows once the server said whose session it is
  await until("restored optimistic row", () => scope.getSnapshot().byKey.has("q"));
  const mf = await until("resent", () => ws.of("mutate")[0]);
  assert.equal(mf.key, m.key);
  assert.equal(ws.of("hello")[0]!.origin, origin, "the same origin: the server answers a repeat as replayed");
  cl.close();
  // An explicit origin overrides the stored one.
  ({ cl } = client({ store, origin: "device-7" }));
  assert.equal((await until("hello", () => FakeWS.all[0]?.of("hello")[0])).origin, "device-7");
  cl.close();
});

test("random frames never throw past the error event", async () => {
  const { cl, events } = client();
  cl.scope("todos");
  const ws = await welcomed();
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  let seed = 42;
  const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
  const atoms = ['"', "{", "}", "[", "]", ",", ":", "1", "null", "true", '"v"', '"type"', '"changes"', '"ack"', '"entries"', '"op"', '"upsert"', '"key"', '"row"', '"cursor"', `"${sub.id}"`, '"id"', "-", "e9"];
  const types = ["welcome", "changes", "caught-up", "reset", "error", "update-available", "refresh-token", "ack", "reject", "ping", "x"];
  const vals = [null, 1, -1, "s", "", true, [], {}, [{ op: "upsert", key: "k" }], [{ op: "delete" }], [{ op: "upsert", key: "k", row: { id: 1 } }], "1.E.9", { a: 1 }];
  for (let i = 0; i < 3000; i++) {
    let text: string;
    if (i % 2) text = Array.from({ length: rnd(30) }, () => atoms[rnd(atoms.length)]).join("");
    else {
      const f: { [k: string]: unknown } = { v: rnd(5) ? 1 : vals[rnd(vals.length)], type: types[rnd(types.length)] };
      for (const k of ["id", "cursor", "entries", "key", "code", "message", "detail", "build", "expires_in", "reason", "more", "limits", "principal", "heartbeat_ms"]) if (rnd(2)) f[k] = k === "id" && rnd(2) ? sub.id : vals[rnd(vals.length)];
      text = JSON.stringify(f);
    }
    assert.doesNotThrow(() => ws.push(text), text);
  }
  await until("errors reported", () => events.filter((e) => e.type === "error").length > 100);
  cl.close();
});

test("tabs share the queue: every tab sends every queued mutation, a reloaded tab takes its queue back, a reject rolls back everywhere", async () => {
  const store: Store = memoryStore();
  FakeWS.all = [];
  const mk = () => createClient({ url: "http://app.test/tide", store, dbName: "shared-" + process.pid, WebSocket: FakeWS as unknown as typeof WebSocket, minBackoff: 1, maxBackoff: 5 });
  const a = mk();
  const wa = await welcomed(0);
  const b = mk();
  const wb = await welcomed(1);
  const m = a.mutate("todos", "put", { id: "t1" });
  await m.queued;
  // Both tabs send it (the server answers a repeated key with the recorded answer).
  await until("a sends", () => wa.of("mutate").some((f) => f.key === m.key));
  await until("b sends", () => wb.of("mutate").some((f) => f.key === m.key));
  assert.equal(b.status.getSnapshot().pending, 1);
  const entries = [{ op: "upsert", key: "t1", resource: "todos", row: { id: "t1" } }];
  wa.push({ type: "ack", key: m.key, cursor: "1.E.2", entries });
  wb.push({ type: "ack", key: m.key, cursor: "1.E.2", entries, replayed: true });
  await m.settled;
  await until("b settles", () => b.status.getSnapshot().pending === 0);
  assert.deepEqual(await store.loadQueue(), []);
  // A tab reloads with a mutation queued: the new page sends it, the other tab too.
  const m2 = a.mutate("todos", "put", { id: "t2" });
  await m2.queued;
  await until("b has m2", () => b.pendingKeys.includes(m2.key));
  a.close();
  const a2 = mk();
  const wa2 = await welcomed(2);
  await until("a2 sends m2", () => wa2.of("mutate").some((f) => f.key === m2.key));
  assert.deepEqual(a2.pendingKeys, [m2.key]);
  // A reject in one tab rolls the mutation back in the other.
  wb.push({ type: "reject", key: m2.key, code: "invalid_args", message: "no" });
  await until("a2 drops m2", () => a2.pendingKeys.length === 0 && b.pendingKeys.length === 0);
  assert.deepEqual(await store.loadQueue(), []);
  a2.close();
  b.close();
});

test("a scope of several resources: one subscribe naming them, entries by resource, resumed from the store by a restarted client", async () => {
  const store = memoryStore();
  let { cl } = client({ store });
  const project = cl.scope(["todos", "comments"], { project_id: "p7" });
  let ws = await welcomed();
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  assert.deepEqual(sub.resources, ["comments", "todos"]);
  assert.equal(sub.resource, undefined, "a server without resources must refuse it, not serve one resource");
  ws.push({ type: "changes", id: sub.id, cursor: "1.E.2", entries: [
    { op: "upsert", key: "1", resource: "todos", row: { id: "1", project_id: "p7" } },
    { op: "upsert", key: "1", resource: "comments", row: { id: "1", project_id: "p7", body: "hi" } }] });
  ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.2" });
  await until("live", () => project.getSnapshot().state === "live");
  assert.equal(project.getSnapshot().rows.length, 2, "one key in two resources is two rows");
  assert.deepEqual(project.rowsOf("comments"), [{ id: "1", project_id: "p7", body: "hi" }]);
  cl.close();

  // Restart on the same store, declaring nothing.
  ({ cl } = client({ store }));
  ws = await welcomed();
  const sub2 = await until("resubscribe", () => ws.of("subscribe")[0]);
  assert.deepEqual(sub2.resources, ["comments", "todos"]);
  assert.equal(sub2.cursor, "1.E.2", "resumed from the stored cursor: only missed changes are replayed");
  const [resumed] = await cl.followed();
  assert.deepEqual(resumed!.resources, ["comments", "todos"]);
  ws.push({ type: "changes", id: sub2.id, cursor: "1.E.3", entries: [{ op: "upsert", key: "2", resource: "todos", row: { id: "2", project_id: "p7" } }] });
  await until("missed change", () => resumed!.rowsOf("todos").length === 2);
  assert.equal(resumed!.rowsOf("comments").length, 1, "the stored rows came back with the cursor");
  // An entry without its resource is refused.
  ws.push({ type: "changes", id: sub2.id, cursor: "1.E.4", entries: [{ op: "delete", key: "2" }] });
  await until("dropped", () => ws.readyState === 3);
  await cl.forget(resumed!);
  assert.deepEqual(await store.listScopes!(), [], "forget deletes the stored scope");
  cl.close();
});

test("a snapshot of several resources reaches the copy at its caught-up: never a comment before its todo", async () => {
  const store = memoryStore();
  const { cl } = client({ store });
  const project = cl.scope(["todos", "comments"], { project_id: "p7" });
  const seen: string[] = [];
  project.subscribe(() => seen.push(`${project.rowsOf("comments").length} comments, ${project.rowsOf("todos").length} todos`));
  let ws = await welcomed();
  let sub = await until("subscribe", () => ws.of("subscribe")[0]);
  const page1 = { type: "changes", id: sub.id, cursor: "2s.E.5.1.c2VhbGVk", entries: [
    { op: "upsert", key: "c1", resource: "comments", row: { id: "c1", project_id: "p7" } },
    { op: "upsert", key: "c2", resource: "comments", row: { id: "c2", project_id: "p7" } }] };
  const page2 = { type: "changes", id: sub.id, cursor: "2s.E.5.2.c2VhbGVk", entries: [
    { op: "upsert", key: "t1", resource: "todos", row: { id: "t1", project_id: "p7" } }] };
  ws.push(page1);
  ws.push(page2);
  // The connection drops before the caught-up: the snapshot starts again.
  ws.close(1001);
  ws = await welcomed(1);
  sub = await until("resubscribe", () => ws.of("subscribe")[0]);
  assert.equal(sub.cursor, undefined, "the held pages were not stored: the snapshot starts from no cursor");
  ws.push({ ...page1, id: sub.id });
  ws.push({ ...page2, id: sub.id });
  ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.5" });
  await until("live", () => project.getSnapshot().state === "live");
  assert.equal(project.rowsOf("comments").length, 2);
  assert.equal(project.rowsOf("todos").length, 1);
  for (const s of seen) assert.ok(!/^[1-9]\d* comments, 0 todos$/.test(s), `the copy showed ${s}`);
  assert.equal((await store.listScopes!())[0]?.cursor, "1.E.5");
  cl.close();
});
