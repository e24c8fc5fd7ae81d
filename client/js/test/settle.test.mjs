// Settling: a landed mutation leaves the log once every scope of its
// resource has reached its ack's cursor, except a scope the server
// refused, which brings nothing until it is allowed again (as the Go
// client's TestRefusedScopeDoesNotHoldMutationsBack).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Replica } from "../dist/tide.js";

const cur = (pos) => `1.e1.${pos}`;
const scope = (digest, project, cursor) => ({ digest, resource: "todos", conditions: { project_id: project }, base: new Map(), cursor, view: new Map() });

test("a refused scope does not hold a landed mutation back", () => {
  const r = new Replica();
  const served = scope("a", "p1", cur(1));
  const refused = scope("b", "p2", "");
  r.scopes.set("a", served);
  r.scopes.set("b", refused);
  r.log.push({ key: "k1", seq: 1, resource: "todos", name: "m", args: {}, at: 0, strategy: "server-wins", ops: [], acked: true, cursor: cur(2), run: "server-wins" });
  served.cursor = cur(2);
  assert.deepEqual(r.settle().map((it) => it.key), [], "the scope not yet served holds it back");
  refused.refused = true;
  assert.deepEqual(r.settle().map((it) => it.key), ["k1"]);
});
