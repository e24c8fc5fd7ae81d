// Settling: a landed mutation leaves the log once every scope of its
// resource has reached its ack's cursor, except a scope the server
// refused, which brings nothing until it is allowed again (as the Go
// client's TestRefusedScopeDoesNotHoldMutationsBack).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Replica, type ScopeCopy } from "../src/replica";

const cur = (pos: number) => `1.e1.${pos}`;
const scope = (digest: string, project: string, cursor: string): ScopeCopy => ({ digest, resource: "todos", conditions: { project_id: project }, base_: new Map(), cursor, view_: new Map() });

test("a refused scope does not hold a landed mutation back", () => {
  const r = new Replica();
  const served = scope("a", "p1", cur(1));
  const refused = scope("b", "p2", "");
  r.scopes_.set("a", served);
  r.scopes_.set("b", refused);
  r.log_.push({ key: "k1", seq: 1, resource: "todos", name: "m", args: {}, at: 0, strategy: "server-wins", ops: [], acked: true, cursor: cur(2), run_: "server-wins" });
  served.cursor = cur(2);
  assert.deepEqual(r.settle_().map((it) => it.key), [], "the scope not yet served holds it back");
  refused.refused_ = true;
  assert.deepEqual(r.settle_().map((it) => it.key), ["k1"]);
});
