// Browser end-to-end tests: the todo demo (examples/todo) on Postgres, a
// fresh schema per run, in real headless Chromium driven by playwright-core.
// The server is a child process, stopped and restarted by its PID.
// Without Chromium the test is skipped, except in CI (CI=true): a failure.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import * as esbuild from "esbuild";

const repo = join(dirname(fileURLToPath(import.meta.url)), "../../..");
const chromePath = process.env.CHROMIUM || "/usr/bin/chromium";
const inCI = ["true", "1"].includes((process.env.CI || "").toLowerCase());
const haveChrome = existsSync(chromePath);
if (!haveChrome && inCI) throw new Error(`Chromium is not at ${chromePath} (CI=true: this fails instead of skipping)`);
const dbURL = process.env.TIDE_TEST_DATABASE_URL || "postgres://postgres@127.0.0.1:5432/test?sslmode=disable";
const goBin = existsSync("/usr/local/go/bin/go") ? "/usr/local/go/bin/go" : "go";
const bin = mkdtempSync(join(tmpdir(), "tide-e2e-"));
const out = process.env.E2E_OUT || join(repo, "client/js/e2e/out");

// Channel tokens live 12 s in these tests: the server asks for a fresh one
// halfway, so a test that runs past 18 s has outlived several tokens.
const tokenTTL = 12;
// The server pings every 2 s: a dead connection is noticed within 4 s.
const heartbeat = 2;
let schema, server, url, browser;
const pg = (...args) => execFileSync(join(bin, "pgtool"), args, { encoding: "utf8" }).trim();
const sql = (q) => pg("query", schema, q).split("\n").filter(Boolean).map((l) => JSON.parse(l));

async function startServer(addr = "127.0.0.1:0") {
  const u = new URL(dbURL);
  u.searchParams.set("search_path", schema);
  const child = spawn(join(bin, "todo"), ["-addr", addr], { env: { ...process.env, DATABASE_URL: u.href, TIDE_FEED_SCHEMA: schema + "_tide", TIDE_DEMO_TOKEN_TTL: tokenTTL + "s", TIDE_DEMO_HEARTBEAT: heartbeat + "s" }, stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  child.stderr.on("data", (d) => (log += d));
  const got = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error("the demo did not start in 30 s:\n" + log)), 30000);
    child.stdout.on("data", (d) => {
      const m = /tide todo demo: (\S+)/.exec(String(d));
      if (m) clearTimeout(timer), ok(m[1]);
    });
    child.on("exit", (code) => fail(new Error(`the demo exited with ${code}:\n${log}`)));
  });
  server = child;
  return got;
}
async function stopServer() {
  const child = server;
  server = null;
  const exited = new Promise((ok) => child.on("exit", ok));
  process.kill(child.pid, "SIGTERM");
  await exited;
}

before(async () => {
  if (!haveChrome) return;
  execFileSync(goBin, ["build", "-o", join(bin, "todo"), "./examples/todo"], { cwd: repo, stdio: "inherit" });
  execFileSync(goBin, ["build", "-o", join(bin, "pgtool"), "./client/js/e2e/pgtool"], { cwd: repo, stdio: "inherit" });
  schema = pg("create");
  url = await startServer();
  browser = await chromium.launch({
    executablePath: chromePath,
    // LocalNetworkAccessChecks: the offline test serves the reloaded page from
    // a copy (page.route), and Chromium gives such a document no address
    // space ("public"), so it would refuse its WebSocket to 127.0.0.1
    // (net::ERR_BLOCKED_BY_LOCAL_NETWORK_ACCESS_CHECKS) for ever.
    args: ["--disable-features=LocalNetworkAccessChecks", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
});
after(async () => {
  await browser?.close();
  if (server) await stopServer();
  if (schema) pg("drop", schema);
});

const T = { timeout: 15000 };
async function user(name) {
  const ctx = await browser.newContext();
  await ctx.addCookies([{ name: "todo_demo_user", value: name, url }]);
  return ctx;
}
async function tab(ctx, project) {
  const p = await ctx.newPage();
  p.on("pageerror", (e) => console.error("page error:", e.message));
  p.on("console", (m) => process.env.E2E_DEBUG && console.error("console:", project, m.text()));
  await p.goto(url + "?project=" + encodeURIComponent(project));
  return p;
}
const live = (p, pending = 0) => p.waitForSelector(`#status[data-state=live][data-pending="${pending}"]`, T);
const titles = (p) => p.$$eval("#list li span", (els) => els.map((e) => e.textContent).sort());
async function add(p, title) {
  await p.fill("#title", title);
  await p.click("#add button");
}
const row = (p, title) => p.locator(`#list li:has-text("${title}")`);

let alice, a1, a2;

test("two users: each tab sees exactly its own rows, live; a forbidden scope is an error state with no rows", { skip: !haveChrome }, async () => {
  alice = await user("alice");
  const bob = await user("bob");
  a1 = await tab(alice, "@alice");
  a2 = await tab(alice, "@alice");
  const b1 = await tab(bob, "@bob");
  await Promise.all([live(a1), live(a2), live(b1)]);
  await add(a1, "alice one");
  await add(b1, "bob one");
  await row(a2, "alice one").waitFor(T); // live in alice's other tab
  await live(a1);
  await live(b1);
  await add(a2, "alice two");
  await row(a1, "alice two").waitFor(T);
  await live(b1);
  assert.deepEqual(await titles(a1), ["alice one", "alice two"]);
  assert.deepEqual(await titles(a2), ["alice one", "alice two"]);
  assert.deepEqual(await titles(b1), ["bob one"]);
  const spy = await tab(alice, "@bob");
  await spy.waitForSelector("#status[data-state=error]", T);
  assert.equal(await spy.textContent("#status"), "error: forbidden");
  assert.deepEqual(await titles(spy), []);
  await spy.close();
  await bob.close();
});

test("reload: the stored rows show before the socket opens, and only the missed changes are replayed", { skip: !haveChrome }, async () => {
  // Every tab of alice's browser closes (they share the stored copy);
  // alice writes from another device meanwhile.
  await a1.close();
  await a2.close();
  const laptop = await user("alice");
  const l1 = await tab(laptop, "@alice");
  await live(l1);
  await add(l1, "missed one");
  await add(l1, "missed two");
  await live(l1);
  await laptop.close();
  a2 = await tab(alice, "@alice");
  await live(a2);
  assert.deepEqual(await titles(a2), ["alice one", "alice two", "missed one", "missed two"]);
  assert.equal(await a2.evaluate(() => window.firstRowsState), "cached", "the first rows came from IndexedDB");
  const replay = await a2.evaluate(() => {
    const f = window.tideFrames;
    const upto = f.findIndex((x) => x.type === "caught-up");
    const sub = f.find((x) => x.type === "changes")?.id;
    return f.slice(0, upto).filter((x) => x.type === "changes" && x.id === sub).flatMap((x) => x.entries.map((e) => e.row?.title));
  });
  assert.deepEqual(replay.sort(), ["missed one", "missed two"], "replayed exactly the two missed rows, no snapshot");
  a1 = await tab(alice, "@alice");
  await live(a1);
});

test("offline: edits made with the server down survive a reload, land exactly once, and both tabs converge", { skip: !haveChrome }, async () => {
  const port = new URL(url).host;
  // The page shell, as a service worker would keep it: served from a copy
  // while the server is down, so the tab can be reloaded offline.
  const shell = {};
  for (const path of ["?project=" + encodeURIComponent("@alice"), (await a1.evaluate(() => document.querySelector("script[type=module]").textContent.match(/from "([^"]+)"/)[1]))]) {
    const r = await alice.request.get(new URL(path, url).href);
    shell[new URL(path, url).href] = { body: await r.body(), contentType: r.headers()["content-type"] };
  }
  await alice.route((u) => shell[u.href] !== undefined, (route) => route.fulfill({ status: 200, ...shell[route.request().url()] }));
  await stopServer();
  await a1.waitForSelector("#status[data-state=offline]", T);
  await add(a1, "offline add");
  await row(a1, "offline add").waitFor(T); // optimistic
  await row(a1, "alice one").locator("input[type=checkbox]").check();
  await row(a1, "missed one").locator("button.del").click();
  await a1.waitForSelector(`#status[data-state=offline][data-pending="3"]`, T);
  // The tabs share the queue: the other tab shows the offline edits too, and will send them as well.
  await a2.waitForSelector(`#status[data-state=offline][data-pending="3"]`, T);
  await row(a2, "offline add").waitFor(T);
  const offlineKeys = (await a1.evaluate(() => window.tide.pendingKeys)).sort();
  await a1.reload();
  // The queue survived the reload: the reloaded tab holds it again, and the other tab kept it.
  await Promise.all([a1, a2].map((p) => p.waitForSelector(`#status[data-state=offline][data-pending="3"]`, T)));
  assert.deepEqual((await a1.evaluate(() => window.tide.pendingKeys)).sort(), offlineKeys);
  assert.deepEqual((await a2.evaluate(() => window.tide.pendingKeys)).sort(), offlineKeys);
  url = await startServer(port);
  await alice.unrouteAll();
  try {
    await Promise.all([live(a1), live(a2)]);
  } catch (e) {
    for (const p of [a1, a2]) console.error("status:", await p.textContent("#status"), JSON.stringify(await p.evaluate(() => ({ pending: window.tide.pendingKeys, frames: window.tideFrames.slice(-20) }))));
    throw e;
  }
  await row(a2, "offline add").waitFor(T);
  await row(a2, "missed one").waitFor({ state: "detached", ...T });
  await a2.waitForSelector(`#list li.done:has-text("alice one")`, T);
  const want = ["alice one", "alice two", "missed two", "offline add"];
  assert.deepEqual(await titles(a1), want);
  assert.deepEqual(await titles(a2), want);
  const db = sql("SELECT title, done FROM todos WHERE project_id = '@alice' ORDER BY title");
  assert.deepEqual(db, [["alice one", true], ["alice two", false], ["missed two", false], ["offline add", false]]);
  // Exactly once: alice made 7 mutations (2+2 online adds, 3 offline edits), each key recorded once,
  // and the change log holds one change per offline edit.
  const keys = sql(`SELECT count(*) FROM ${schema}_tide.mutation_keys WHERE principal = 'alice'`)[0][0];
  assert.equal(keys, 7);
  // Both tabs sent each offline edit; the server recorded and ran each key once.
  const once = sql(`SELECT key, count(*) FROM ${schema}_tide.mutation_keys WHERE principal = 'alice' AND key IN (${offlineKeys.map((k) => `'${k}'`).join(",")}) GROUP BY key ORDER BY key`);
  assert.deepEqual(once, offlineKeys.map((k) => [k, 1]));
  const changes = sql(`SELECT op, data->>'title' FROM ${schema}_tide.log WHERE key IN (SELECT id FROM todos WHERE title IN ('offline add')) ORDER BY pos`);
  assert.equal(changes.length, 1, "the offline add was written once: " + JSON.stringify(changes));
  // One picture of both tabs side by side: each tab's screenshot, composed in a third page.
  const shots = [];
  for (const p of [a1, a2]) {
    await p.bringToFront();
    shots.push((await p.locator("body").screenshot()).toString("base64")); // the page's content column
  }
  const board = await browser.newPage({ viewport: { width: 1330, height: 100 } });
  await board.setContent(
    `<body style="margin:0;display:flex;gap:10px;padding:10px;background:#ccc;font:14px system-ui">` +
      shots.map((b, i) => `<figure style="margin:0;background:#fff"><figcaption style="padding:4px">tab ${i ? "2 (stayed open)" : "1 (edited offline, reloaded)"}</figcaption><img style="display:block;width:650px" src="data:image/png;base64,${b}"></figure>`).join("") +
      `</body>`,
  );
  await board.waitForFunction(() => [...document.images].every((i) => i.complete && i.naturalWidth > 0), null, T);
  const shot = process.env.TIDE_SCREENSHOT || join(out, "tide-offline.png");
  await board.screenshot({ path: shot, fullPage: true });
  await board.close();
  console.log("screenshot:", shot);
});

test("token expiry: the tab refreshes its token before each expires and stays live on one socket", { skip: !haveChrome }, async () => {
  const ctx = await user("carol");
  const sockets = [];
  const p = await ctx.newPage();
  p.on("websocket", (ws) => sockets.push(ws.url()));
  await p.goto(url + "?project=@carol");
  await live(p);
  await p.evaluate(() => (window.tideStates = [document.getElementById("status").dataset.state]));
  const refreshes = () => p.evaluate(() => window.tideFrames.filter((f) => f.type === "refresh-token").length);
  // Three refresh requests: the first token (12 s) has long expired by the third.
  await p.waitForFunction(() => window.tideFrames.filter((f) => f.type === "refresh-token").length >= 3, null, { timeout: 4 * tokenTTL * 1000 });
  // Still live on the same socket: a row added in another tab arrives.
  const other = await tab(ctx, "@carol");
  await live(other);
  await add(other, "after three tokens");
  await row(p, "after three tokens").waitFor(T);
  await live(p);
  assert.ok((await refreshes()) >= 3);
  assert.deepEqual(await p.evaluate(() => window.tideStates), ["live"], "the tab's status left live during the refreshes");
  assert.equal(sockets.length, 1, "the tab opened another socket: " + sockets.join(", "));
  await ctx.close();
});

test("viewers: who else has a project open appears and leaves live (an app channel with presence)", { skip: !haveChrome }, async () => {
  const carol = await user("carol");
  const dan = await user("dan");
  const c1 = await tab(carol, "demo");
  const d1 = await tab(dan, "demo");
  const viewers = (p, text) => p.waitForFunction((t) => document.getElementById("viewers").textContent === t, text, T);
  await viewers(c1, "Viewing now: carol, dan");
  await viewers(d1, "Viewing now: carol, dan");
  await d1.selectOption("#project", "home"); // dan moves to another project
  await viewers(c1, "Viewing now: carol");
  await viewers(d1, "Viewing now: dan");
  await d1.close(); // a closed tab leaves too
  const c2 = await tab(carol, "home");
  await viewers(c2, "Viewing now: carol");
  await carol.close();
  await dan.close();
});

test("a mutation over the frame limit settles at once as rejected (frame_too_large): pending back to 0, no optimistic row, none after a reload", { skip: !haveChrome }, async () => {
  const ctx = await user("erin");
  const p = await tab(ctx, "@erin");
  await live(p);
  const put = (title) =>
    p.evaluate((title) => {
      const t = { id: "big-" + title.length, project_id: "@erin", title, done: false };
      const m = window.tide.mutate("todos", "put", t, { local: (tx) => tx.upsert("todos", t.id, t) });
      return m.result.then(() => null, (e) => ({ name: e.name, code: e.code, message: e.message }));
    }, title);
  const refused = await put("x".repeat(70000));
  assert.equal(refused?.code, "frame_too_large");
  assert.equal(refused?.name, "RejectError");
  assert.doesNotMatch(refused.message, /^tide:/, "a message to show a person");
  await live(p, 0);
  assert.equal(await p.locator("#list li[data-key=big-70000]").count(), 0, "no optimistic row");
  await p.reload();
  await live(p, 0);
  assert.equal(await p.locator("#list li[data-key=big-70000]").count(), 0, "none after a reload");
  // The server refuses what the mutator refuses, in the mutator's own words.
  const invalid = await put(" ");
  assert.equal(invalid?.code, "invalid_args");
  assert.doesNotMatch(invalid.message, /tide:|json:|Go struct|putArgs/);
  await live(p, 0);
  assert.equal(sql("SELECT count(*) FROM todos WHERE project_id = '@erin'")[0][0], 0);
  await ctx.close();
});

test("the network goes (setOffline): the status leaves live at once (within two heartbeats at most) and comes back live", { skip: !haveChrome }, async () => {
  const ctx = await user("fay");
  const p = await tab(ctx, "@fay");
  await live(p);
  await ctx.setOffline(true);
  await p.waitForSelector("#status[data-state=offline]", { timeout: 2 * heartbeat * 1000 });
  assert.equal(await p.evaluate(() => window.tide.status.getSnapshot().state), "offline");
  assert.notEqual(await p.locator("#list").getAttribute("data-state"), "live", "no scope is live while the connection is not");
  await ctx.setOffline(false);
  await live(p);
  await ctx.close();
});

test("a dead connection (the server's frames stop, the socket stays open): closed after two heartbeats without a frame, then live again", { skip: !haveChrome }, async () => {
  const ctx = await user("gus");
  const p = await ctx.newPage();
  let sockets = 0;
  let dead = false;
  await p.routeWebSocket(/\/tide\/ws$/, (ws) => {
    const server = ws.connectToServer();
    const first = ++sockets === 1;
    server.onMessage((m) => !(first && dead) && ws.send(m)); // the first socket goes silent when dead is set
    ws.onMessage((m) => server.send(m));
  });
  await p.goto(url + "?project=@gus");
  await live(p);
  await p.evaluate(() => (window.tideStates = ["live"]));
  dead = true;
  // Offline may last only until the next socket's welcome: watch the states the page went through, not the DOM now.
  await p.waitForFunction(() => window.tideStates.includes("offline"), null, { timeout: 3 * heartbeat * 1000 });
  await live(p);
  assert.equal(sockets, 2, "one reconnect");
  assert.deepEqual((await p.evaluate(() => window.tideStates)).slice(0, 2), ["live", "offline"]);
  await ctx.close();
});

test("React: useScope shows a refused scope with no rows, survives a change of principal, and recovers with retry() on the same Scope", { skip: !haveChrome }, async () => {
  // The page: e2e/react/app.jsx with React from node_modules and the client
  // as an app gets it (the package's exports), served on the demo's origin.
  const js = (await esbuild.build({
    entryPoints: [join(dirname(fileURLToPath(import.meta.url)), "react/app.jsx")],
    bundle: true,
    format: "esm",
    jsx: "automatic",
    define: { "process.env.NODE_ENV": '"production"' },
    write: false,
    logLevel: "warning",
  })).outputFiles[0].text;
  const html = '<!doctype html><meta charset="utf-8"><div id="root"></div><script type="module" src="/react-e2e.js"></script>';
  const bob = await user("bob");
  const made = await bob.request.post(url + "api/todos", { data: { project_id: "@bob", title: "bob in react" } });
  assert.equal(made.status(), 201);
  await bob.close();
  const ctx = await user("alice");
  await ctx.route((u) => u.pathname === "/react-e2e.html" || u.pathname === "/react-e2e.js", (route) =>
    route.fulfill(route.request().url().includes(".js") ? { contentType: "text/javascript", body: js } : { contentType: "text/html", body: html }),
  );
  const p = await ctx.newPage();
  p.on("pageerror", (e) => console.error("page error:", e.message));
  await p.goto(url + "react-e2e.html?project=@bob&title=%20");
  // alice may not see @bob: an error state with the server's reason and no rows.
  await p.waitForSelector("#scope[data-state=error]", T);
  assert.match(await p.textContent("#scope"), /^error: forbidden: /);
  assert.equal(await p.locator("#rows li").count(), 0);
  await p.waitForSelector("#status[data-state=live]", T);
  const list = await p.$("#rows");
  // Another user signs in in this browser profile; the app reconnects. The
  // store was alice's: the client discards it (principal-changed) and keeps
  // the refused scope refused until the app retries.
  await ctx.addCookies([{ name: "todo_demo_user", value: "bob", url }]);
  await p.click("#reconnect");
  await p.waitForFunction(() => window.tide.status.getSnapshot().state === "live", null, T);
  assert.equal(await p.getAttribute("#scope", "data-state"), "error");
  assert.deepEqual(await p.evaluate(() => window.principalChanges), [["alice", "bob"]]);
  await p.click("#retry");
  await p.waitForSelector("#scope[data-state=live]", T);
  await p.locator('#rows li:has-text("bob in react")').waitFor(T);
  assert.equal(await list.evaluate((e) => e.isConnected), true, "the component was never remounted");
  assert.equal(await p.evaluate(() => window.scopes.size), 1, "one Scope object throughout");
  // useMutation: the mutator's refusal, as the person is shown it.
  await p.click("#add");
  await p.waitForSelector("#add-error[data-code=invalid_args]", T);
  assert.doesNotMatch(await p.textContent("#add-error"), /tide:|json:|Go struct/);
  await p.waitForSelector("#status[data-pending='0']", T);
  await ctx.close();
});
