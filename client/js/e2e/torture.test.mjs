// The browser torture: a seeded, randomized run of one Chromium
// profile with four tabs on two origins and two users (alice, bob) against
// boardapp on Postgres: optimistic writes (valid and invalid), offline and
// online, reloads, server crashes and restarts, membership removals and
// re-grants, and logouts/logins of the other user in the same profile (with
// clearLocalData and without). Then quiesce and check: no mutation applied
// twice (the ledger), no acknowledged mutation missing, nothing pending, no
// row of a board the user may not see (tabs and IndexedDB; and no write of
// one user applied as another), every tab equal to Postgres. During the run,
// when the network or the server goes away and the driver waits for the tabs
// to notice, a tab still saying live 15 s later fails too (honest). Pages
// note what they see themselves (a refused scope that still shows rows is a
// leak). See torture_lib.mjs.
//
// Environment:
//
//	TIDE_TORTURE_SEED=N        replay a run's schedule (the seed is printed)
//	TIDE_TORTURE_SECONDS=S     the action phase's time bound (default 60;
//	                           the steps are bounded too: 20 a second)
//	TIDE_TORTURE_SABOTAGE=X    dup|lost|pending|leak|diverge: break one thing
//	                           after the run; the test then passes only if the
//	                           checker reports that failure
//	TIDE_TORTURE_SKIP_SABOTAGES=1  skip the short sabotage runs
//	E2E_DEBUG=1                the pages' console and the server's log
//
// A longer run: TIDE_TORTURE_SECONDS=900 node --test --test-timeout=0 e2e/torture.test.mjs
// Each run writes its report to e2e/out/torture-SEED[-SABOTAGE].json.
import { test } from "node:test";
import assert from "node:assert/strict";
import { haveChrome, inCI, chromePath, runTorture, seedFrom, SABOTAGES } from "./torture_lib.mjs";

if (!haveChrome && inCI) throw new Error(`Chromium is not at ${chromePath} (CI=true: this fails instead of skipping)`);
const seed = seedFrom();
const seconds = Number(process.env.TIDE_TORTURE_SECONDS || 60);
const sabotage = process.env.TIDE_TORTURE_SABOTAGE || "";

function show(report) {
  const lines = report.failures.map((f) => `  ${f.kind}: ${f.message}`);
  if (lines.length > 40) lines.splice(40, lines.length - 40, `  … ${report.failures.length - 40} more (see e2e/out/torture-${report.seed}*.json)`);
  for (const n of report.notes.slice(0, 15)) lines.push(`  note: ${n}`);
  return lines.join("\n");
}

test(`browser torture (seed ${seed}, ${seconds} s${sabotage ? ", sabotage " + sabotage : ""})`, { skip: !haveChrome, timeout: (seconds + 240) * 1000 }, async () => {
  console.log(`torture: seed ${seed} (replay: TIDE_TORTURE_SEED=${seed} TIDE_TORTURE_SECONDS=${seconds})`);
  const report = await runTorture({ seed, seconds, sabotage });
  console.log(show(report) || "  no failures");
  if (sabotage) {
    assert.ok(report.failures.some((f) => f.kind === sabotage && f.message.includes(report.mark)), `sabotage ${sabotage}: the checker did not report it (a ${sabotage} failure naming ${report.mark}):\n${show(report)}`);
  } else {
    assert.deepEqual(report.failures.map((f) => `${f.kind}: ${f.message}`), [], `seed ${seed}: the torture failed:\n${show(report)}`);
  }
});

// Each check can fail: a short run per sabotage, whose checker must report it.
for (const mode of SABOTAGES) {
  test(`sabotage ${mode}: the checker reports it`, { skip: !haveChrome || !!sabotage || !!process.env.TIDE_TORTURE_SKIP_SABOTAGES, timeout: 180000 }, async () => {
    const report = await runTorture({ seed: seed + 1 + SABOTAGES.indexOf(mode), seconds: 4, steps: 30, sabotage: mode, quiesceMs: mode === "pending" ? 8000 : 30000, settleMs: 6000 });
    // The sabotage's own failure: its kind, naming what was broken (not a
    // failure of that kind the run had anyway).
    const got = report.failures.filter((f) => f.kind === mode && f.message.includes(report.mark));
    const other = report.failures.filter((f) => !got.includes(f));
    if (other.length) console.log(`sabotage ${mode}: besides, the checker reported:\n${show({ ...report, failures: other })}`);
    assert.ok(got.length > 0, `sabotage ${mode}: the checker did not report a ${mode} failure naming ${report.mark}:\n${show(report)}`);
    console.log(`sabotage ${mode}: reported: ${got[0].message}`);
  });
}
