// Cursor rules, the decoding of every server frame of docs/protocol.md, and
// scope conditions.
import { test } from "node:test";
import assert from "node:assert/strict";
import { newer } from "../src/cursor";
import { decodeServerFrame, ProtocolError, type ServerFrame } from "../src/protocol";
import { canonicalConditions, matchesScope } from "../src/conditions";

const c = (pos: number | bigint) => `1.EpochA.${pos}`;
const s = (pos: number, seq: number | bigint) => `2s.EpochA.${pos}.${seq}.opaque-sealed-place`;

test("cursor rules (the Go client's TestNewer table)", () => {
  const cases: [string, string, boolean][] = [
    ["", "", false], ["", c(1), false], [c(0), "", true], [s(0, 1), "", true],
    [c(5), c(5), false], [c(6), c(5), true], [c(4), c(5), false], [c(10), c(9), true], [c(9), c(10), false],
    [c(2n ** 62n), c(2n ** 62n - 1n), true], [c(5), s(5, 3), true], [s(5, 3), c(5), false],
    [s(5, 2), s(5, 1), true], [s(5, 1), s(5, 2), false], [s(5, 10), s(5, 9), true], [s(5, 1), s(5, 1), false],
    [s(5, 1), "2s.EpochA.5.1.another", false], // the same number, sealed anew
    [s(5, 1), "1s.EpochA.5.a2V5", true], // a stored snapshot cursor of protocol 1: the server's word wins
    [s(6, 1), c(5), true], [c(4), s(5, 9), false], [s(6, 1), s(5, 9), true],
    ["1.EpochB.1", c(5), true], ["1.EpochB.0", c(5), true], [c(1), "garbage", true], ["2.EpochA.x", c(5), true],
    [s(5, 2n ** 63n), s(5, 2n ** 63n - 1n), true], // numbers compare as numbers, not as text or doubles
  ];
  for (const [a, b, want] of cases) assert.equal(newer(a, b), want, `newer(${a}, ${b})`);
});

test("every server frame of docs/protocol.md decodes", () => {
  const frames = {
    welcome: '{"v":1,"type":"welcome","build":"srv-41","limits":{"max_frame_bytes":65536,"max_subscriptions":256,"frame_rate":50,"frame_burst":272}}',
    changes: '{"v":1,"type":"changes","id":"s1","cursor":"1.Xq3v9.1043","entries":[{"op":"upsert","key":"t9","row":{"id":"t9","project_id":"p7","title":"ship it","done":false},"origin":"dev-77"},{"op":"delete","key":"t3"}]}',
    poll: '{"v":1,"type":"changes","cursor":"1.Xq3v9.1043","entries":[],"more":true}',
    "caught-up": '{"v":1,"type":"caught-up","id":"s1","cursor":"1.Xq3v9.40"}',
    reset: '{"v":1,"type":"reset","id":"s1","reason":"cursor_expired"}',
    error: '{"v":1,"type":"error","id":"s1","code":"forbidden","message":"no"}',
    "update-available": '{"v":1,"type":"update-available","build":"srv-42"}',
    "refresh-token": '{"v":1,"type":"refresh-token","expires_in":120}',
    ack: '{"v":1,"type":"ack","key":"k1","cursor":"1.E.11","entries":[{"op":"upsert","key":"t1","resource":"todos","row":{"id":"t1"}}],"replayed":true}',
    reject: '{"v":1,"type":"reject","key":"k1","code":"conflict","message":"taken"}',
  };
  const d = Object.fromEntries(Object.entries(frames).map(([k, v]) => [k, decodeServerFrame(v)])) as { [k: string]: any };
  assert.equal(d.welcome.limits.frame_rate, 50);
  assert.deepEqual(d.changes.entries[1], { op: "delete", key: "t3" });
  assert.equal(d.changes.entries[0].origin, "dev-77");
  assert.equal(d.poll.more, true);
  assert.equal(d.poll.id, undefined);
  assert.equal(d["caught-up"].cursor, "1.Xq3v9.40");
  assert.equal(d.reset.reason, "cursor_expired");
  assert.equal(d.error.code, "forbidden");
  assert.equal(d["update-available"].build, "srv-42");
  assert.equal(d["refresh-token"].expires_in, 120);
  assert.equal(d.ack.replayed, true);
  assert.equal(d.ack.entries[0].resource, "todos");
  assert.equal(d.reject.code, "conflict");
  const extra = decodeServerFrame('{"v":1,"type":"caught-up","id":"s","cursor":"c","extra":{"x":1}}') as ServerFrame & { id: string };
  assert.equal(extra.id, "s", "unknown fields are ignored");
  for (const bad of ["", "[]", "null", '{"v":2,"type":"welcome"}', '{"v":1,"type":"nope"}', '{"v":1,"type":"changes","id":"s"}',
    '{"v":1,"type":"changes","cursor":"c","entries":[{"op":"upsert","key":"k"}]}', '{"v":1,"type":"changes","cursor":"c","entries":[{"op":"move","key":"k"}]}',
    '{"v":1,"type":"refresh-token"}', '{"v":1,"type":"ack","cursor":"c"}', '{"v":1,"type":"error","id":"s"}']) {
    assert.throws(() => decodeServerFrame(bad), ProtocolError, bad);
  }
});

test("conditions: canonical JSON as the Go client's digest input, and row matching", () => {
  assert.equal(canonicalConditions({ b: true, a: { in: ["y", "x", "x"] } }), '{"a":{"in":["x","y"]},"b":true}');
  assert.equal(canonicalConditions({ a: { in: [3] } }), '{"a":3}');
  assert.equal(canonicalConditions({}), "");
  assert.throws(() => canonicalConditions({ a: 1.5 }));
  assert.ok(matchesScope({ p: "p7" }, { p: "p7" }));
  assert.ok(!matchesScope({ p: "p7" }, { p: "p8" }));
  assert.ok(matchesScope({ n: 5 }, { n: "5" }), "an integer as a string equals the number");
  assert.ok(matchesScope({ p: { in: ["a", "b"] } }, { p: "b" }));
  assert.ok(!matchesScope({ p: "x" }, {}));
});
