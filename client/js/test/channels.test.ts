// The browser client's app channel API (topics and presence) against a
// fake WebSocket driven by the test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeServerFrame, ProtocolError } from "../src/protocol";
import type { TopicSnapshot } from "../src/index";
import { client, until, welcomed } from "./helpers";

test("channel frames decode, and malformed ones throw", () => {
  assert.deepEqual(decodeServerFrame('{"v":1,"type":"message","topic":"board:b1","data":{"x":1},"from":"al"}'), { type: "message", topic: "board:b1", data: { x: 1 }, from: "al" });
  assert.deepEqual(decodeServerFrame('{"v":1,"type":"presence-diff","topic":"t","joins":[{"id":"n.1","principal":"a","state":1}]}'), { type: "presence-diff", topic: "t", joins: [{ id: "n.1", principal: "a", state: 1 }], leaves: [] });
  assert.equal((decodeServerFrame('{"v":1,"type":"error","topic":"t","code":"forbidden","message":"no"}') as { topic?: string }).topic, "t");
  for (const bad of ['{"v":1,"type":"message","topic":"t"}', '{"v":1,"type":"presence","topic":"t","members":{}}', '{"v":1,"type":"presence","topic":"t","members":[{"principal":"a"}]}', '{"v":1,"type":"topic-subscribed"}']) {
    assert.throws(() => decodeServerFrame(bad), ProtocolError, bad);
  }
});

test("topics: join on welcome with state, presence list and diffs, messages, refusals, rejoin, leave", async () => {
  const { cl } = client();
  const t = cl.topic("board:b1", { state: { x: 1 } });
  assert.equal(cl.topic("board:b1"), t, "one Topic per name");
  assert.equal(t.publish({ hi: 1 }), false, "offline: nothing is queued");
  const got: unknown[][] = [];
  t.onMessage((data, from) => got.push([data, from]));
  const notes: TopicSnapshot[] = [];
  t.subscribe((s) => notes.push(s));
  const ws = await welcomed(0, { type: "welcome", build: "", limits: { max_message_bytes: 4096 } });
  const sub = await until("topic-subscribe", () => ws.of("topic-subscribe")[0]);
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
  assert.deepEqual(ws.of("publish")[0], { v: 1, type: "publish", topic: "board:b1", data: { x: 2 } });
  ws.push({ type: "error", topic: "board:b1", code: "forbidden", message: "read only" });
  await until("error", () => t.getSnapshot().error?.code === "forbidden");
  t.setState({ x: 3 });
  assert.deepEqual(ws.of("presence-update")[0], { v: 1, type: "presence-update", topic: "board:b1", state: { x: 3 } });
  // Reconnect: the topic is joined again with the latest state.
  ws.close(1001);
  const ws2 = await welcomed(1);
  const sub2 = await until("rejoin", () => ws2.of("topic-subscribe")[0]);
  assert.deepEqual(sub2.state, { x: 3 });
  t.leave();
  assert.deepEqual(ws2.of("topic-unsubscribe")[0], { v: 1, type: "topic-unsubscribe", topic: "board:b1" });
  assert.equal(t.publish(1), false, "a left topic publishes nothing");
  assert.ok(notes.length >= 3);
  cl.close();
});
