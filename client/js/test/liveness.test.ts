// An honest connection state: ping is answered with pong; no frame for two
// heartbeats (or no open+welcome within 10 s) means the connection is dead;
// the browser's offline/online events are heeded; no scope says live while
// the connection is down. Timers are node's mock timers: no waiting on the
// clock, no timed assertions.
import { test, mock } from "node:test";
import assert from "node:assert/strict";
import { FakeWS, client, until, welcome, welcomed } from "./helpers";
import { memoryStore, type Store } from "../src/index";

async function live(cl: { status: { getSnapshot(): { state: string } } }) {
  await until("live", () => cl.status.getSnapshot().state === "live");
}

test("ping is answered with pong", async () => {
  const { cl } = client();
  const ws = await welcomed(0, { ...welcome, heartbeat_ms: 10000 });
  ws.push({ type: "ping" });
  await until("pong", () => ws.of("pong")[0]);
  assert.deepEqual(ws.of("pong")[0], { v: 1, type: "pong" });
  cl.close();
});

test("no frame for two heartbeats: the socket is closed as dead, the status is offline, and the client reconnects", async () => {
  mock.timers.enable({ apis: ["setTimeout"] });
  try {
    const { cl, events } = client();
    const scope = cl.scope("todos");
    const ws = await welcomed(0, { ...welcome, heartbeat_ms: 1000 });
    const sub = await until("subscribe", () => ws.of("subscribe")[0]);
    ws.push({ type: "changes", id: sub.id, cursor: "1.E.1", entries: [{ op: "upsert", key: "a", row: { id: "a" } }] });
    ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.1" });
    await live(cl);
    mock.timers.tick(1500);
    ws.push({ type: "ping" }); // any frame shows the connection is alive: the deadline moves
    await until("pong", () => ws.of("pong")[0]);
    mock.timers.tick(1999);
    assert.equal(ws.readyState, 1, "within two heartbeats of the last frame: still open");
    assert.equal(cl.status.getSnapshot().state, "live");
    mock.timers.tick(1);
    assert.equal(ws.readyState, 3, "closed as dead");
    assert.equal(cl.status.getSnapshot().state, "offline");
    assert.equal(scope.getSnapshot().state, "cached", "no scope is live while the connection is not");
    assert.deepEqual(scope.getSnapshot().rows.map((r) => r.id), ["a"], "its rows stay shown");
    assert.ok(events.some((e) => e.type === "error" && (e.error as { code?: string }).code === "connection_lost"));
    mock.timers.tick(10); // the backoff (at most maxBackoff = 5 ms here)
    const ws2 = await welcomed(1, { ...welcome, heartbeat_ms: 1000 });
    const sub2 = await until("resubscribed", () => ws2.of("subscribe")[0]);
    assert.equal(sub2.cursor, "1.E.1");
    ws2.push({ type: "caught-up", id: sub2.id, cursor: "1.E.1" });
    await live(cl);
    assert.equal(scope.getSnapshot().state, "live");
    cl.close();
  } finally {
    mock.timers.reset();
  }
});

test("a server without heartbeat_ms: no deadline after the welcome", async () => {
  mock.timers.enable({ apis: ["setTimeout"] });
  try {
    const { cl } = client();
    const ws = await welcomed(0);
    await live(cl);
    mock.timers.tick(60000);
    assert.equal(ws.readyState, 1);
    assert.equal(cl.status.getSnapshot().state, "live");
    cl.close();
  } finally {
    mock.timers.reset();
  }
});

test("a socket that does not open and get its welcome within 10 s is abandoned and retried", async () => {
  mock.timers.enable({ apis: ["setTimeout"] });
  try {
    const { cl } = client();
    FakeWS.autoOpen = false; // a connect that hangs
    const ws = await until("socket", () => FakeWS.all[0]);
    mock.timers.tick(9999);
    assert.equal(FakeWS.all.length, 1);
    assert.equal(ws.readyState, 0);
    mock.timers.tick(1);
    assert.equal(ws.readyState, 3, "abandoned");
    assert.equal(cl.status.getSnapshot().state, "offline");
    FakeWS.autoOpen = true;
    mock.timers.tick(10);
    const ws2 = await until("second socket", () => FakeWS.all[1]);
    await until("hello", () => ws2.of("hello")[0]); // opened but never welcomed: the same 10 s
    mock.timers.tick(10000);
    assert.equal(ws2.readyState, 3);
    cl.close();
  } finally {
    mock.timers.reset();
    FakeWS.autoOpen = true;
  }
});

test("the browser's offline event closes the socket at once (offline, scopes cached); online reconnects at once", async () => {
  const win = new EventTarget();
  const g = globalThis as unknown as { addEventListener?: unknown; removeEventListener?: unknown };
  g.addEventListener = win.addEventListener.bind(win);
  g.removeEventListener = win.removeEventListener.bind(win);
  mock.timers.enable({ apis: ["setTimeout"] });
  try {
    const { cl } = client({ minBackoff: 60000, maxBackoff: 60000 }); // a reconnect would wait (mock) minutes
    const scope = cl.scope("todos");
    const ws = await welcomed();
    const sub = await until("subscribe", () => ws.of("subscribe")[0]);
    ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.1" });
    await live(cl);
    win.dispatchEvent(new Event("offline"));
    assert.equal(cl.status.getSnapshot().state, "offline");
    assert.equal(ws.readyState, 3);
    assert.equal(scope.getSnapshot().state, "cached");
    win.dispatchEvent(new Event("online"));
    const ws2 = await welcomed(1); // no timer ticked: at once
    const sub2 = await until("resubscribed", () => ws2.of("subscribe")[0]);
    ws2.push({ type: "caught-up", id: sub2.id, cursor: "1.E.1" });
    await live(cl);
    cl.close();
  } finally {
    mock.timers.reset();
    delete g.addEventListener;
    delete g.removeEventListener;
  }
});

test("a dropped connection turns live and catching-up scopes cached until they are caught up again", async () => {
  const { cl } = client();
  const a = cl.scope("todos", { p: "1" });
  const b = cl.scope("todos", { p: "2" });
  const ws = await welcomed();
  const subs = await until("subscribes", () => ws.of("subscribe").length === 2 && ws.of("subscribe"));
  ws.push({ type: "changes", id: subs[0]!.id, cursor: "1.E.1", entries: [] });
  ws.push({ type: "caught-up", id: subs[0]!.id, cursor: "1.E.1" });
  ws.push({ type: "changes", id: subs[1]!.id, cursor: "1.E.1", entries: [], more: true });
  await until("a live, b catching up", () => a.getSnapshot().state === "live" && b.getSnapshot().state === "catching-up");
  ws.close(1006);
  await until("offline", () => cl.status.getSnapshot().state === "offline");
  assert.equal(a.getSnapshot().state, "cached");
  assert.equal(b.getSnapshot().state, "cached");
  const ws2 = await welcomed(1);
  const s2 = await until("resubscribed", () => ws2.of("subscribe").length === 2 && ws2.of("subscribe"));
  assert.equal(a.getSnapshot().state, "cached", "still cached while catching up");
  for (const s of s2) ws2.push({ type: "caught-up", id: s.id, cursor: "1.E.2" });
  await until("live again", () => a.getSnapshot().state === "live" && b.getSnapshot().state === "live" && cl.status.getSnapshot().state === "live");
  cl.close();
});

test("no status listener ever sees a scope live while the connection is not open: reconnect() and a dropped socket", async () => {
  const { cl } = client();
  const a = cl.scope("todos", { p: "1" });
  const seen: string[] = [];
  cl.status.subscribe((st) => {
    if ((st.state === "offline" || st.state === "connecting") && a.getSnapshot().state === "live") seen.push(st.state);
  });
  const live = async (n: number) => {
    const ws = await welcomed(n);
    const sub = await until("subscribe", () => ws.of("subscribe")[0]);
    ws.push({ type: "caught-up", id: sub.id, cursor: "1.E." + (n + 1) });
    await until("live", () => cl.status.getSnapshot().state === "live" && a.getSnapshot().state === "live");
    return ws;
  };
  await live(0);
  cl.reconnect(); // connecting, from live
  await live(1);
  FakeWS.all[1]!.close(1006); // offline, from live
  await live(2);
  assert.deepEqual(seen, [], "the status said offline or connecting while a scope said live");
});

test("a caught-up whose store write ends after its connection dropped leaves the scope cached, not live", async () => {
  const base = memoryStore();
  let hold = false;
  let release: () => void = () => {};
  const store: Store = {
    ...base,
    async saveScope(rec, reset) {
      if (hold) await new Promise<void>((ok) => (release = ok));
      return base.saveScope(rec, reset);
    },
  };
  const { cl } = client({ store });
  const a = cl.scope("todos", { p: "1" });
  const ws = await welcomed();
  const sub = await until("subscribe", () => ws.of("subscribe")[0]);
  hold = true;
  ws.push({ type: "caught-up", id: sub.id, cursor: "1.E.1" }); // its cursor is written first
  ws.close(1006);
  await until("offline", () => cl.status.getSnapshot().state === "offline");
  hold = false;
  release();
  await until("the write landed", async () => (await base.listScopes!()).some((r) => r.cursor === "1.E.1"));
  assert.notEqual(a.getSnapshot().state, "live", "a scope said live on a connection that is gone");
  assert.equal(cl.status.getSnapshot().state === "offline" || cl.status.getSnapshot().state === "connecting", true);
});
