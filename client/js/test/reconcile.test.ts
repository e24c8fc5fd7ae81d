// The shared reconcile vectors (client/testdata/reconcile/vectors.json),
// run against the browser client's Replica exactly as the Go client's
// TestReconcileVectors runs them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Replica, type ScopeCopy, type Strategy } from "../src/replica";
import type { Row } from "../src/protocol";

type Any = any; // the vectors' JSON
const { vectors } = JSON.parse(readFileSync(join(process.cwd(), "../testdata/reconcile/vectors.json"), "utf8")) as { vectors: Any[] };
const nullable = (x: unknown) => (x === undefined || x === null ? null : x);

test("there are shared vectors", () => assert.ok(vectors.length >= 10, `${vectors.length} vectors`));

for (const v of vectors) {
  test(v.name, () => {
    const r = new Replica();
    const sc: ScopeCopy = { digest: "d", resource: v.scope.resource, conditions: v.scope.conditions, base_: new Map(Object.entries(v.server_rows)), cursor: v.cursor, view_: new Map() };
    r.scopes_.set("d", sc);
    const calls: unknown[][] = [];
    let run: Strategy;
    switch (v.strategy.kind) {
      case "server-wins": run = "server-wins"; break;
      case "last-write-wins": run = { lastWriteWins: v.strategy.field ?? "" }; break;
      case "merge":
        run = { merge: (local, base, server) => {
          calls.push([local, base, server]);
          if (v.strategy.conflict) throw new Error("they disagree");
          return nullable(v.strategy.returns) as Row | null;
        } };
        break;
      default: throw new Error("strategy " + v.strategy.kind);
    }
    for (const p of v.pending) {
      const ops = p.ops.map((o: Any) => ({ resource: o.resource || sc.resource, key: o.key, row: o.op === "delete" ? null : o.row }));
      r.log_.push({ key: p.key, seq: p.seq, resource: sc.resource, name: "m", args: {}, at: 0, strategy: "custom", ops, acked: false, cursor: "", run_: run });
    }
    r.refresh_();
    let conflicted = false;
    for (const a of v.answers) {
      if (a.type === "ack") conflicted = r.ack_(a.key, a.cursor, a.entries).conflicts.length > 0 || conflicted;
      else if (a.type === "reject") r.reject_(a.key);
      else throw new Error("answer " + a.type);
      r.settle_();
      r.refresh_();
    }
    if (v.then) {
      sc.base_ = new Map(Object.entries(v.then.server_rows));
      sc.cursor = v.then.cursor;
      r.settle_();
      r.refresh_();
    }
    assert.deepEqual(Object.fromEntries(sc.view_), v.expect.rows);
    assert.deepEqual(r.log_.map((it) => it.key), v.expect.pending);
    assert.equal(conflicted, v.expect.conflict, "conflict reported");
    if (v.strategy.expect_args) {
      assert.equal(calls.length, 1, "merge called once");
      const ea = v.strategy.expect_args;
      assert.deepEqual(calls[0], [nullable(ea.local ?? ea.Local), nullable(ea.base ?? ea.Base), nullable(ea.server ?? ea.Server)]);
    }
  });
}
