// A slow tab cannot hurt the others and loses nothing, in Chromium on
// boardapp (client/js/e2e/boardapp) and Postgres, with the torture's harness
// and tide's default configuration on both sides.
//
// Alice's tab is paused in the debugger, so it takes no frame off its
// socket; megabytes of changes are written to the board she and bob follow.
// The server cannot write to her tab: its send queue fills and her
// subscription's live changes are dropped (its desyncs move, as the server
// reports them), to be re-synced from her cursor (or, if the socket stays
// blocked past the write timeout, the connection is cut off and the client
// reconnects). Meanwhile bob's tab, on another socket and another origin,
// holds every row as Postgres has it. Once her page runs again it converges
// too: nothing lost, no row of another board, IndexedDB included.
import { test, afterEach } from "node:test";
import assert from "node:assert/strict";
import { haveChrome, inCI, chromePath, Env, Tab, waitFor, check } from "./torture_lib.mjs";

if (!haveChrome && inCI) throw new Error(`Chromium is not at ${chromePath} (CI=true: this fails instead of skipping)`);
const T = { timeout: 30000 };
let env;
afterEach(async () => {
  await env?.close();
  env = null;
});

const ROWS = 200; // cards of b1, each rewritten per round with a 4 KB title: 800 KB of changes a round
const MAX_ROUNDS = 100; // a bound: 80 MB of changes at most

// alice's subscription to b1, as the server reports it (undefined if none).
const aliceB1 = async () => (await env.stats()).subscriptions.find((x) => x.principal === "alice" && x.scope.includes("b1"));

/** live waits for tab's scope of b1 to be live with n cards. */
const live = (tab, n) =>
  waitFor(async () => {
    const s = (await tab.app("rows")).b1;
    return s.state === "live" && s.rows.length === n;
  }, { ...T, what: `tab ${tab.name}: b1 live with ${n} cards` });

/**
 * world opens alice's tab (b1 and b2, origin A) and bob's (b1, origin B) on
 * ROWS cards of b1, both live, and pauses alice's page in the debugger.
 */
async function world() {
  env = new Env({ label: "slow" });
  await env.start();
  env.exec(`INSERT INTO board_members (user_id, board_id) VALUES ('alice', 'b1'), ('alice', 'b2'), ('bob', 'b1')`);
  env.exec(`INSERT INTO cards (id, board_id, title) SELECT 's-' || g, 'b1', 'card ' || g FROM generate_series(1, ${ROWS}) g`);
  await env.openBrowser();
  await env.setUser("A", "alice");
  await env.setUser("B", "bob");
  const slow = new Tab(env, "slow", "A", ["b1", "b2"], env.context.pages()[0]);
  const steady = new Tab(env, "steady", "B", ["b1"]);
  await slow.open();
  await steady.open();
  await live(slow, ROWS);
  await live(steady, ROWS);
  // Pause alice's page: its next script (the socket's next message) stops there.
  const cdp = await env.context.newCDPSession(slow.page);
  await cdp.send("Debugger.enable");
  const paused = new Promise((ok) => cdp.once("Debugger.paused", ok));
  await cdp.send("Debugger.pause");
  const sub = await aliceB1();
  assert.ok(sub, "the server lists no subscription of alice to b1");
  return { slow, steady, cdp, paused, sub };
}

/** rounds rewrites every card of b1 (800 KB of changes) until done() says so, at most MAX_ROUNDS times; returns how many it wrote. */
async function rounds(done) {
  for (let n = 1; n <= MAX_ROUNDS; n++) {
    env.exec(`UPDATE cards SET title = 'round ${n} ' || id || ' ' || repeat('x', 4096) WHERE board_id = 'b1'`);
    if (await done()) return n;
  }
  return MAX_ROUNDS;
}

/** converge waits for bob's tab to hold every card of b1 as Postgres has it (alice's still paused), then resumes alice's and waits for both to converge. */
async function converge({ slow, steady, cdp }) {
  env.exec(`INSERT INTO cards (id, board_id, title) VALUES ('s-last', 'b1', 'the last card')`);
  const want = new Map(env.sql("SELECT id, title FROM cards WHERE board_id = 'b1'"));
  await waitFor(async () => {
    const s = (await steady.app("rows")).b1;
    return s.state === "live" && s.rows.length === want.size && s.rows.every((r) => want.get(r.id) === r.title);
  }, { ...T, what: "bob's tab to hold every card as Postgres has it while alice's is paused" });
  await cdp.send("Debugger.resume");
  await cdp.send("Debugger.disable");
  await live(slow, want.size);
  const failures = await check(env, [slow, steady], { settleMs: 60000 });
  assert.deepEqual(failures, [], failures.map((f) => `${f.kind}: ${f.message}`).join("\n"));
  return (await slow.app("log")).events.filter((e) => e.type === "close" || e.type === "error").map((e) => `${e.type} ${e.code ?? ""}`.trim());
}

test("a paused tab is desynced, then re-synced from its cursor (or, past the write timeout, cut off and reconnected) while another user's tab stays current; both converge with Postgres", { skip: !haveChrome, timeout: 240000 }, async () => {
  const w = await world();
  const n = await rounds(async () => (await aliceB1())?.desyncs > w.sub.desyncs);
  await w.paused; // it did stop (a message reached it), so it has read nothing since
  const desynced = await aliceB1();
  assert.ok(desynced?.desyncs > w.sub.desyncs, `alice's paused tab was never desynced after ${n} rounds of ${ROWS} cards: ${JSON.stringify(desynced)}`);
  const events = await converge(w);
  console.log(`# alice's tab: desynced after ${n} rounds (${desynced.queue_bytes} bytes queued for it); its events: ${events.join(", ") || "none"}`);
});

test("a paused tab whose socket stays blocked past the write timeout is cut off and, resumed, reconnects and converges; another user's tab stays current", { skip: !haveChrome, timeout: 240000 }, async () => {
  const w = await world();
  const n = await rounds(async () => (await aliceB1())?.desyncs > w.sub.desyncs);
  await w.paused;
  // A desynced subscription queues nothing more; the write the server is
  // blocked in fails after the write timeout (default 10 s) and the
  // connection is closed: alice then has no subscription on this node.
  await waitFor(async () => !(await aliceB1()), { timeout: 60000, what: "the server to cut off alice's blocked connection" });
  const events = await converge(w);
  assert.ok(events.some((e) => e.startsWith("close")), `alice's tab saw no close: ${events}`);
  console.log(`# alice's tab: desynced after ${n} rounds, then cut off; its events: ${events.join(", ")}`);
});
