// The browser client's app channel API (topics and presence) against a
// fake WebSocket driven by the test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, decodeServerFrame, memoryStore, ProtocolError } from "../dist/tide.js";

class FakeWS {
  static all = [];
  constructor(url) { this.url = url; this.sent = []; this.readyState = 0; FakeWS.all.push(this); queueMicrotask(() => { this.readyState = 1; this.onopen?.(); }); }
  send(t) { this.sent.push(JSON.parse(t)); }
  close(code = 1000, reason = "") { if (this.readyState === 3) return; this.readyState = 3; queueMicrotask(() => this.onclose?.({ code, reason })); }
  push(f) { this.onmessage?.({ data: JSON.stringify({ v: 1, ...f }) }); }
}
const until = async (what, fn, ms = 5000) => {
  const end = Date.now() + ms;
  for (;;) { const v = fn(); if (v) return v; if (Date.now() > end) throw new Error("no " + what); await new Promise((r) => setTimeout(r, 2)); }
};
const sentOf = (ws, type) => ws.sent.filter((f) => f.type === type);
const welcome = { type: "welcome", build: "", limits: { max_message_bytes: 4096 } };

test("channel frames decode, and malformed ones throw", () => {
  assert.deepEqual(decodeServerFrame('{"v":1,"type":"message","topic":"board:b1","data":{"x":1},"from":"al"}'), { type: "message", topic: "board:b1", data: { x: 1 }, from: "al" });
  assert.deepEqual(decodeServerFrame('{"v":1,"type":"presence-diff","topic":"t","joins":[{"id":"n.1","principal":"a","state":1}]}'), { type: "presence-diff", topic: "t", joins: [{ id: "n.1", principal: "a", state: 1 }], leaves: [] });
  assert.equal(decodeServerFrame('{"v":1,"type":"error","topic":"t","code":"forbidden","message":"no"}').topic, "t");
  for (const bad of ['{"v":1,"type":"message","topic":"t"}', '{"v":1,"type":"presence","topic":"t","members":{}}', '{"v":1,"type":"presence","topic":"t","members":[{"principal":"a"}]}', '{"v":1,"type":"topic-subscribed"}']) {
    assert.throws(() => decodeServerFrame(bad), ProtocolError, bad);
  }
});

test("topics: join on welcome with state, presence list and diffs, messages, refusals, rejoin, leave", async () => {
  FakeWS.all = [];
  const cl = createClient({ url: "http://app.test/tide", store: memoryStore(), WebSocket: FakeWS, minBackoff: 1, maxBackoff: 5 });
  const t = cl.topic("board:b1", { state: { x: 1 } });
  assert.equal(cl.topic("board:b1"), t, "one Topic per name");
  assert.equal(t.publish({ hi: 1 }), false, "offline: nothing is queued");
  const got = [];
  t.onMessage((data, from) => got.push([data, from]));
  const notes = [];
  t.subscribe((s) => notes.push(s));
  const ws = await until("socket", () => FakeWS.all[0]);
  await until("hello", () => sentOf(ws, "hello")[0]);
  ws.push(welcome);
  const sub = await until("topic-subscribe", () => sentOf(ws, "topic-subscribe")[0]);
  assert.deepEqual(sub, { v: 1, type: "topic-subscribe", topic: "board:b1", state: { x: 1 } });
  ws.push({ type: "topic-subscribed", topic: "board:b1", presence: true });
  ws.push({ type: "presence", topic: "board:b1", members: [{ id: "n.1", principal: "me", state: { x: 1 } }, { id: "n.2", principal: "bob" }] });
  await until("presence", () => t.getSnapshot().members.length === 2);
  const snap = t.getSnapshot();
  assert.equal(t.getSnapshot(), snap, "getSnapshot is stable between changes");
  ws.push({ type: "presence-diff", topic: "board:b1", joins: [{ id: "n.3", principal: "cy", state: "typing" }], leaves: [{ id: "n.2", principal: "bob" }] });
  await until("diff", () => t.getSnapshot().members.some((m) => m.id === "n.3"));
  assert.deepEqual(t.getSnapshot().members.map((m) => m.principal).sort(), ["cy", "me"]);
  ws.push({ type: "message", topic: "board:b1", data: { x: 5 }, from: "cy" });
  ws.push({ type: "message", topic: "board:b9", data: 1 });
  await until("message", () => got.length === 1);
  assert.deepEqual(got[0], [{ x: 5 }, "cy"]);
  assert.equal(t.publish({ x: 2 }), true);
  assert.deepEqual(sentOf(ws, "publish")[0], { v: 1, type: "publish", topic: "board:b1", data: { x: 2 } });
  ws.push({ type: "error", topic: "board:b1", code: "forbidden", message: "read only" });
  await until("error", () => t.getSnapshot().error?.code === "forbidden");
  t.setState({ x: 3 });
  assert.deepEqual(sentOf(ws, "presence-update")[0], { v: 1, type: "presence-update", topic: "board:b1", state: { x: 3 } });
  // Reconnect: the topic is joined again with the latest state.
  ws.close(1001);
  const ws2 = await until("second socket", () => FakeWS.all[1]);
  await until("hello 2", () => sentOf(ws2, "hello")[0]);
  ws2.push(welcome);
  const sub2 = await until("rejoin", () => sentOf(ws2, "topic-subscribe")[0]);
  assert.deepEqual(sub2.state, { x: 3 });
  t.leave();
  assert.deepEqual(sentOf(ws2, "topic-unsubscribe")[0], { v: 1, type: "topic-unsubscribe", topic: "board:b1" });
  assert.equal(t.publish(1), false, "a left topic publishes nothing");
  assert.ok(notes.length >= 3);
  cl.close?.();
});
