// The browser torture's harness (used by torture.test.mjs and
// access.test.mjs): the boardapp server (client/js/e2e/boardapp) on
// Postgres with a fresh schema per run, one persistent Chromium profile with
// tabs on two origins, a seeded schedule of actions, the quiesce, and the
// checker that reads Postgres, every tab and IndexedDB.
//
// Two origins of one profile: http://127.0.0.1:PORT ("A") and
// http://localhost:PORT ("B"), both loopback. Cookies are per host, so each
// origin has its own session (a user), and its tabs share one IndexedDB.
// Origin A's page opens the store without the client's user option (the
// store is bound to a principal by welcome), origin B's with it (one
// database per user).
//
// No sleeps: every wait is for a condition, with a deadline.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { chromium } from "playwright-core";

export const repo = join(dirname(fileURLToPath(import.meta.url)), "../../..");
export const chromePath = process.env.CHROMIUM || "/usr/bin/chromium";
export const inCI = ["true", "1"].includes((process.env.CI || "").toLowerCase());
export const haveChrome = existsSync(chromePath);
const dbURL = process.env.TIDE_TEST_DATABASE_URL || "postgres://postgres@127.0.0.1:5432/test?sslmode=disable";
const goBin = existsSync("/usr/local/go/bin/go") ? "/usr/local/go/bin/go" : "go";
export const outDir = process.env.E2E_OUT || join(repo, "client/js/e2e/out");
const debug = !!process.env.E2E_DEBUG;

// ---------------------------------------------------------------- building

let bin;
/** build compiles boardapp and pgtool once per process; returns their folder. */
export function build() {
  if (bin) return bin;
  const dir = mkdtempSync(join(tmpdir(), "tide-torture-"));
  execFileSync(goBin, ["build", "-o", join(dir, "boardapp"), "./client/js/e2e/boardapp"], { cwd: repo, stdio: "inherit" });
  execFileSync(goBin, ["build", "-o", join(dir, "pgtool"), "./client/js/e2e/pgtool"], { cwd: repo, stdio: "inherit" });
  bin = dir;
  return bin;
}

// ---------------------------------------------------------------- waiting

/** waitFor polls cond (async) until it returns a truthy value or the deadline passes; then it throws what last() says. */
export async function waitFor(cond, { timeout = 15000, what = "a condition", last } = {}) {
  const end = Date.now() + timeout;
  let v, err;
  for (;;) {
    try {
      v = await cond();
      err = undefined;
      if (v) return v;
    } catch (e) {
      err = e;
    }
    if (Date.now() > end) {
      const detail = last ? await Promise.resolve(last()).catch((e) => String(e)) : err ? String(err) : "";
      throw new Error(`timed out after ${timeout} ms waiting for ${what}${detail ? ": " + (typeof detail === "string" ? detail : JSON.stringify(detail)) : ""}`);
    }
    await tick();
  }
}
// One turn of the event loop with a little I/O: a poll step, not a timed wait.
const tick = () => new Promise((ok) => setImmediate(ok)).then(() => new Promise((ok) => setTimeout(ok, 25)));

// ---------------------------------------------------------------- PRNG

/** prng returns a seeded generator (sfc32): r() in [0,1), r.int(n), r.pick(xs), r.chance(p). */
export function prng(seed) {
  let a = 0x9e3779b9,
    b = 0x243f6a88,
    c = 0xb7e15162,
    d = seed >>> 0;
  const next = () => {
    a >>>= 0; b >>>= 0; c >>>= 0; d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
  for (let i = 0; i < 16; i++) next();
  const r = () => next();
  r.int = (n) => Math.floor(next() * n);
  r.pick = (xs) => xs[Math.floor(next() * xs.length)];
  r.chance = (p) => next() < p;
  return r;
}

// ---------------------------------------------------------------- Postgres

/** Env is one run's world: a schema, the boardapp server, a Chromium profile. */
export class Env {
  constructor({ heartbeat = "1s", label = "torture" } = {}) {
    this.bin = build();
    this.heartbeat = heartbeat;
    this.label = label;
    this.schema = this.pg("create");
    this.server = null;
    this.port = 0;
    this.log = "";
  }
  pg(...args) {
    return execFileSync(join(this.bin, "pgtool"), args, { encoding: "utf8" }).trim();
  }
  /** sql runs a query in the run's schema and returns its rows as arrays. */
  sql(q) {
    return this.pg("query", this.schema, q).split("\n").filter(Boolean).map((l) => JSON.parse(l));
  }
  /** exec runs statements in one session (may be several, e.g. SET session_replication_role). */
  exec(q) {
    this.pg("exec", this.schema, q);
  }

  /** start starts boardapp (on the same port as before, if it ran) and waits for its address. */
  async start() {
    if (this.server) throw new Error("the server runs already");
    const u = new URL(dbURL);
    u.searchParams.set("search_path", this.schema);
    const addr = "127.0.0.1:" + (this.port || 0);
    const child = spawn(join(this.bin, "boardapp"), ["-addr", addr, "-heartbeat", this.heartbeat], {
      env: { ...process.env, DATABASE_URL: u.href, TIDE_FEED_SCHEMA: this.schema + "_tide" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stderr.on("data", (d) => {
      this.log += d;
      if (this.log.length > 200000) this.log = this.log.slice(-100000);
      if (debug) process.stderr.write("boardapp: " + d);
    });
    const exited = new Promise((ok) => child.on("exit", (code, sig) => ok({ code, sig })));
    child.exited = exited;
    const url = await new Promise((ok, fail) => {
      let out = "";
      const timer = setTimeout(() => fail(new Error("boardapp did not start in 30 s:\n" + this.log.slice(-3000))), 30000);
      child.stdout.on("data", (d) => {
        out += d;
        const m = /boardapp: (\S+)/.exec(out);
        if (m) clearTimeout(timer), ok(m[1]);
      });
      exited.then(({ code, sig }) => (clearTimeout(timer), fail(new Error(`boardapp exited (${code ?? sig}) while starting:\n${this.log.slice(-3000)}`))));
    });
    this.server = child;
    this.port = Number(new URL(url).port);
    return url;
  }
  /** stop ends the server by its PID: SIGKILL (a crash) or SIGTERM (a drain), and waits for its exit. */
  async stop(signal = "SIGTERM") {
    const child = this.server;
    if (!child) return;
    this.server = null;
    process.kill(child.pid, signal);
    await child.exited;
  }
  /** stats reads the server's engine counters and its subscriptions: {engine: core.Stats, subscriptions: [core.SubscriptionLag]}. */
  async stats() {
    return (await fetch(this.origin("A") + "/stats")).json();
  }
  get up() {
    return !!this.server;
  }
  origin(which) {
    return `http://${which === "B" ? "localhost" : "127.0.0.1"}:${this.port}`;
  }

  /** openBrowser launches one persistent Chromium profile (a fresh user-data-dir). */
  async openBrowser() {
    this.profile = mkdtempSync(join(tmpdir(), "tide-torture-profile-"));
    this.context = await chromium.launchPersistentContext(this.profile, {
      executablePath: chromePath,
      headless: true,
      // LocalNetworkAccessChecks: a page served from the shell copy (route)
      // has no address space, and Chromium would refuse its WebSocket to
      // loopback for ever (see demo.test.mjs).
      args: ["--disable-features=LocalNetworkAccessChecks", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-background-timer-throttling", "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows"],
    });
    // The page shell (the page and the client module), kept like a service
    // worker would: a tab reloads while offline or while the server is down.
    this.shell = {};
    await this.context.route(
      (u) => (u.pathname === "/" || u.pathname === "/tide/client.js") && (u.hostname === "127.0.0.1" || u.hostname === "localhost"),
      async (route) => {
        const u = new URL(route.request().url());
        const k = u.pathname + (u.pathname === "/" ? "" : u.search);
        let got = this.shell[k];
        if (!got) {
          try {
            const r = await route.fetch();
            got = { status: r.status(), body: await r.body(), contentType: r.headers()["content-type"] };
            if (r.status() === 200) this.shell[k] = got;
          } catch (e) {
            return route.abort("internetdisconnected");
          }
        }
        await route.fulfill({ status: got.status, body: got.body, contentType: got.contentType });
      },
    );
    return this.context;
  }
  /** login sets origin which's session cookie to user (or removes it: null), as /login and /logout do. */
  async setUser(which, user) {
    const url = this.origin(which);
    if (user) await this.context.addCookies([{ name: "board_user", value: user, url, sameSite: "Lax" }]);
    else await this.context.clearCookies({ name: "board_user", domain: new URL(url).hostname });
  }
  async close() {
    try {
      await this.context?.close();
    } catch {}
    if (this.server) await this.stop("SIGKILL");
    // A killed server's backends may still hold locks for a moment: DROP
    // … CASCADE can then lose a deadlock; it is tried again.
    for (let i = 0; ; i++) {
      try {
        this.pg("drop", this.schema);
        break;
      } catch (e) {
        if (i < 5 && /deadlock|lock/.test(String(e.stderr ?? e.message))) continue;
        console.error("torture: drop schema:", e.message);
        break;
      }
    }
    if (this.profile) rmSync(this.profile, { recursive: true, force: true });
  }
}

/** Tab is one page of the profile: its origin, boards, and window.app. */
export class Tab {
  constructor(env, name, origin, boards, page) {
    Object.assign(this, { env, name, origin, boards });
    this.page = page;
    this.errors = [];
  }
  get url() {
    return `${this.env.origin(this.origin)}/?tab=${this.name}&boards=${this.boards.join(",")}${this.origin === "B" ? "&peruser=1" : ""}`;
  }
  async open() {
    if (!this.page) this.page = await this.env.context.newPage();
    if (!this.page.listening) {
      this.page.listening = true;
      this.page.on("pageerror", (e) => this.errors.push(e.message) && debug && console.error(`tab ${this.name} page error:`, e.message));
      this.page.on("console", (m) => debug && console.error(`tab ${this.name}:`, m.text()));
    }
    await this.page.goto(this.url);
    await this.ready();
  }
  ready() {
    return this.page.waitForFunction(() => window.appReady === true, null, { timeout: 20000 });
  }
  async reload() {
    await this.page.reload();
    await this.ready();
  }
  /** app calls window.app[fn](...args) in the page. */
  app(fn, ...args) {
    return this.page.evaluate(([fn, args]) => window.app[fn](...args), [fn, args]);
  }
}

// ---------------------------------------------------------------- checker

const USERS = ["alice", "bob"];
const BOARDS = ["b1", "b2", "b3", "b4"];

/** membership reads board_members as {user: Set(boards)}. */
export function membership(env) {
  const m = Object.fromEntries(USERS.map((u) => [u, new Set()]));
  for (const [u, b] of env.sql("SELECT user_id, board_id FROM board_members")) (m[u] ??= new Set()).add(b);
  return m;
}

// A timestamp as an exact comparable string (UTC seconds and nanoseconds),
// whatever its text form (Go's RFC 3339 with any fraction, or JS's toISOString).
export function normTime(s) {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)$/.exec(String(s));
  if (!m) return String(s);
  const secs = Date.parse(m[1] + m[3]) / 1000;
  return secs + "." + (m[2] || "").padEnd(9, "0");
}
const normCard = (r) => ({ id: String(r.id), board_id: String(r.board_id), title: String(r.title), updated_at: normTime(r.updated_at) });
const cardKey = (r) => JSON.stringify([r.id, r.board_id, r.title, r.updated_at]);

/** pgCards reads cards as normalized rows by board. */
function pgCards(env) {
  const out = Object.fromEntries(BOARDS.map((b) => [b, []]));
  for (const [id, board_id, title, updated_at] of env.sql("SELECT id, board_id, title, updated_at FROM cards ORDER BY id")) (out[board_id] ??= []).push(normCard({ id, board_id, title, updated_at }));
  return out;
}

/** cardShaped finds the card rows kept in a stored record: every "rows" field (object or array) of card-like objects. */
function storedRows(value, out = [], depth = 0) {
  if (!value || typeof value !== "object" || depth > 6) return out;
  if (value.rows && typeof value.rows === "object") {
    const rows = Array.isArray(value.rows) ? value.rows : value.rows instanceof Map ? [...value.rows.values()] : Object.values(value.rows);
    for (const r of rows) if (r && typeof r === "object" && "board_id" in r) out.push(r);
  }
  for (const [k, v] of Object.entries(value)) if (k !== "rows" && v && typeof v === "object") storedRows(v, out, depth + 1);
  return out;
}

/**
 * check reads Postgres, every tab and IndexedDB after quiesce and returns the
 * failures: {kind: dup|lost|pending|leak|diverge, message}. pendingFailures
 * are those the quiesce found. notes collects what is told but not judged.
 */
export async function check(env, tabs, { pendingFailures = [], notes = [], settleMs = 15000 } = {}) {
  const failures = [...pendingFailures];
  const fail = (kind, message) => failures.push({ kind, message });

  // dup: a mutation (its mid, which is its key) applied twice.
  for (const [key, n, who] of env.sql("SELECT key, count(*), string_agg(principal, ',' ORDER BY seq) FROM applied GROUP BY key HAVING count(*) > 1 ORDER BY key")) {
    // Under which idempotency scopes (principal, origin) the server recorded it.
    const scopes = env.sql(`SELECT principal, origin FROM ${env.schema}_tide.mutation_keys WHERE key = '${key}' ORDER BY made_at`).map(([p, o]) => `${p}/${o}`);
    fail("dup", `mutation ${key} was applied ${n} times (as ${who}; keys recorded under ${scopes.join(", ") || "none"})`);
  }

  // What every tab saw: acks and rejects by key (sessionStorage survives reloads).
  const acked = new Map();
  const issued = new Map();
  for (const t of tabs) {
    const log = await t.app("log");
    for (const [k, a] of Object.entries(log.acks)) acked.set(k, { ...a, tab: t.name });
    for (const [k, i] of Object.entries(log.issued)) issued.set(k, { ...i, tab: t.name });
    for (const v of log.violations) fail(v.kind, `tab ${t.name}: ${v.message}`);
    for (const n of log.notes) notes.push(`tab ${t.name}: ${n.kind}: ${n.message}`);
    if (t.errors.length) notes.push(`tab ${t.name}: page errors: ${t.errors.slice(0, 3).join(" | ")}`);
  }

  // lost: an acknowledged mutation the ledger does not have, or Postgres's
  // cards not what the ledger's effective writes leave (in commit order).
  const ledger = env.sql("SELECT key, principal, name, card_id, title, effective FROM applied ORDER BY seq");
  const inLedger = new Set(ledger.map((r) => r[0]));
  for (const [k, a] of acked) if (!inLedger.has(k)) fail("lost", `mutation ${k} (${issued.get(k)?.name ?? "?"} from tab ${a.tab}) was acknowledged but is not in the ledger`);
  // A write queued by one user is never run under another's session.
  for (const [key, principal] of ledger) {
    const i = issued.get(key);
    if (i && i.user && i.user !== principal) fail("leak", `mutation ${key} (${i.name} ${i.args?.id}) was issued by ${i.user} in tab ${i.tab} (page load ${i.load}, status ${i.state}, connected as ${JSON.stringify(i.principal)}) and applied as ${principal}`);
  }
  // Told, not judged: mutations that left no trace (no ack, no reject, not
  // applied): the queue of a user who logged out, discarded by design.
  const rejected = new Set();
  for (const t of tabs) for (const k of Object.keys((await t.app("log")).rejects)) rejected.add(k);
  const vanished = [...issued.keys()].filter((k) => !acked.has(k) && !rejected.has(k) && !inLedger.has(k));
  if (vanished.length) notes.push(`${vanished.length} of ${issued.size} mutations have no ack, no reject and no ledger row (e.g. ${vanished.slice(0, 3)})`);
  const expect = new Map();
  for (const [key, , name, card, title, effective] of ledger) {
    if (!effective) continue;
    expect.set(card, name === "delete" ? { gone: true, key } : { title, key });
  }
  const db = new Map(env.sql("SELECT id, title FROM cards").map(([id, title]) => [id, title]));
  for (const [card, e] of expect) {
    if (e.gone && db.has(card)) fail("lost", `card ${card} was deleted by mutation ${e.key} but is in Postgres`);
    if (!e.gone && !db.has(card)) fail("lost", `card ${card} is missing from Postgres; mutation ${e.key} left it with title ${JSON.stringify(e.title)}`);
    if (!e.gone && db.has(card) && db.get(card) !== e.title) fail("lost", `card ${card} has title ${JSON.stringify(db.get(card))} in Postgres; mutation ${e.key} set ${JSON.stringify(e.title)}`);
  }

  // leak and diverge: wait (bounded) for the tabs to agree with Postgres,
  // then judge what they hold.
  const judge = async () => {
    const out = [];
    const members = membership(env);
    const pg = pgCards(env);
    const idbByOrigin = {};
    for (const t of tabs) {
      const st = await t.app("status");
      const user = st.principal || st.user;
      const mine = members[user] ?? new Set();
      const rows = await t.app("rows");
      for (const [board, sc] of Object.entries(rows)) {
        const foreign = sc.rows.filter((r) => !mine.has(String(r.board_id)));
        if (foreign.length) out.push({ kind: "leak", message: `tab ${t.name} (${user}) holds ${foreign.length} cards of boards ${[...new Set(foreign.map((r) => r.board_id))]} in memory (scope ${board}: ${sc.state}${sc.error ? " " + sc.error.code : ""}): ${foreign.slice(0, 3).map((r) => r.id)}` });
        if (!mine.has(board)) continue;
        const have = new Map(sc.rows.map((r) => [String(r.id), normCard(r)]));
        const want = new Map(pg[board].map((r) => [r.id, r]));
        const diffs = [];
        for (const [id] of want) if (!have.has(id)) diffs.push([id, `missing ${id}`]);
        for (const [id] of have) if (!want.has(id)) diffs.push([id, `extra ${id}`]);
        for (const [id, r] of have) if (want.has(id) && cardKey(r) !== cardKey(want.get(id))) diffs.push([id, `${id}: tab ${JSON.stringify([r.title, r.updated_at])} ≠ db ${JSON.stringify([want.get(id).title, want.get(id).updated_at])}`]);
        if (diffs.length)
          out.push({ kind: "diverge", message: `tab ${t.name} (${user}) board ${board} (${sc.state}, ${have.size} rows, db ${want.size}): ${diffs.slice(0, 4).map((d) => d[1]).join("; ")}${diffs.length > 4 ? `; … ${diffs.length} differing cards: ${diffs.slice(0, 40).map((d) => d[0])}` : ""}` });
      }
      // IndexedDB: the databases this tab's store may be: "board" (origin A)
      // or "board:<user>" (origin B); another user's database is theirs.
      idbByOrigin[t.origin] ??= await t.app("idb");
      const dbs = idbByOrigin[t.origin];
      let scopeRecords = 0;
      for (const [name, stores] of Object.entries(dbs)) {
        if (name !== "board" && name !== "board:" + user) continue;
        for (const [store, recs] of Object.entries(stores))
          for (const { key, value } of recs) {
            const rows = storedRows(value);
            if (value && typeof value === "object" && "rows" in value) scopeRecords++;
            const foreign = rows.filter((r) => !mine.has(String(r.board_id)));
            if (foreign.length) out.push({ kind: "leak", message: `IndexedDB ${name}/${store} of origin ${t.origin} (user ${user}) holds ${foreign.length} cards of boards ${[...new Set(foreign.map((r) => r.board_id))]} in record ${JSON.stringify(key).slice(0, 24)}: ${foreign.slice(0, 30).map((r) => r.id)}` });
          }
      }
      if (!scopeRecords && t.boards.some((b) => mine.has(b) && pg[b].length)) notes.push(`tab ${t.name}: no scope records found in IndexedDB ${Object.keys(dbs).join(",")} (layout unknown?)`);
    }
    // One message per distinct failure (two tabs of an origin read the same database).
    const seen = new Set();
    return out.filter((f) => !seen.has(f.message) && seen.add(f.message));
  };
  // A divergence may heal while the tabs settle; a leak may not: a foreign
  // row seen in any pass fails the run, even if a later write of the tab
  // overwrote it before the last pass.
  let last = [];
  const leaks = new Map();
  try {
    await waitFor(
      async () => {
        last = await judge();
        for (const f of last) if (f.kind === "leak") leaks.set(f.message, f);
        return last.length === 0;
      },
      { timeout: settleMs, what: "the tabs to agree with Postgres" },
    );
  } catch {
    /* reported below */
  }
  const lastMessages = new Set(last.map((f) => f.message));
  failures.push(...last, ...[...leaks.values()].filter((f) => !lastMessages.has(f.message)));
  return failures;
}

// ---------------------------------------------------------------- the run

export const SABOTAGES = ["dup", "lost", "pending", "leak", "diverge"];

/**
 * runTorture runs one seeded torture and returns {seed, steps, failures,
 * notes, stats, ms}. opts: seed (32-bit), seconds (time bound of the action
 * phase), steps (count bound; default 20 a second), sabotage (one of
 * SABOTAGES), quiesceMs (how long the quiesce may take; default 60 s),
 * settleMs (how long the tabs may take to agree with Postgres after it;
 * default 15 s).
 */
export async function runTorture(opts = {}) {
  const seed = opts.seed >>> 0;
  const seconds = opts.seconds ?? 60;
  const maxSteps = opts.steps ?? Math.max(12, Math.round(seconds * 20));
  const sabotage = opts.sabotage || "";
  const quiesceMs = opts.quiesceMs ?? 60000;
  if (sabotage && !SABOTAGES.includes(sabotage)) throw new Error(`unknown sabotage ${sabotage}: one of ${SABOTAGES.join(", ")}`);
  const t0 = Date.now();
  const r = prng(seed);
  const say = (...a) => console.log(`torture[${seed}${sabotage ? " " + sabotage : ""}]`, ...a);
  const env = new Env({ heartbeat: opts.heartbeat ?? "1s" });
  const stats = {};
  const trace = []; // what the driver did, step by step (in the report)
  let step = 0;
  const count = (k) => ((stats[k] = (stats[k] ?? 0) + 1), trace.push([step, Date.now() - t0, k]));
  const notes = [];
  try {
    // Boards b1..b4 (the server makes them); alice and bob share two.
    await env.start();
    env.exec(`INSERT INTO board_members (user_id, board_id) VALUES ('alice','b1'),('alice','b2'),('alice','b3'),('bob','b2'),('bob','b3'),('bob','b4')`);
    await env.openBrowser();
    // Origin A: alice (no user option); origin B: bob (user option).
    const originUser = { A: "alice", B: "bob" };
    await env.setUser("A", "alice");
    await env.setUser("B", "bob");
    const first = env.context.pages()[0];
    const tabs = [
      new Tab(env, "a0", "A", BOARDS, first),
      new Tab(env, "a1", "A", BOARDS, null),
      new Tab(env, "b0", "B", BOARDS, null),
      new Tab(env, "b1", "B", BOARDS, null),
    ];
    for (const t of tabs) await t.open();
    let offline = false;
    let onlineAt = -1; // step at which the profile goes back online
    let serverAt = -1; // step at which a stopped server starts again
    const setOffline = async (v) => {
      offline = v;
      await env.context.setOffline(v);
    };
    const startServer = async () => {
      if (!env.up) await env.start();
      serverAt = -1;
    };
    const members = () => membership(env);
    // noticed waits until no tab says live (the connection is gone: the
    // client must find out by itself, by its heartbeat); a tab that still
    // says live after a generous deadline is an honest-state failure.
    const honest = [];
    const noticed = async (why) => {
      let still = [];
      try {
        await waitFor(async () => {
          still = [];
          for (const t of tabs) if ((await t.app("status")).state === "live") still.push(t.name);
          return still.length === 0;
        }, { timeout: 15000, what: why });
      } catch {
        honest.push({ kind: "honest", message: `${why}: tabs ${still} still said live 15 s later` });
      }
    };
    const usersOf = (which) => tabs.filter((t) => t.origin === which);

    // switchUser logs origin which out and the other user in: the app's
    // logout (clearLocalData when clear) in one tab, /logout, /login, then
    // its other tab reloads (the app tells its tabs).
    const switchUser = async (which, clear) => {
      if (offline) await setOffline(false), (onlineAt = -1);
      await startServer();
      const [t, other] = usersOf(which);
      const next = originUser[which] === "alice" ? "bob" : "alice";
      say(`step ${step}: origin ${which} logs ${originUser[which]} out${clear ? " (clearLocalData)" : " (no clearLocalData)"} and ${next} in`);
      await t.app("logout", clear);
      await t.page.goto(`${env.origin(which)}/login?user=${next}&next=${encodeURIComponent(new URL(t.url).pathname + new URL(t.url).search)}`);
      await t.ready();
      await other.reload();
      originUser[which] = next;
      count(clear ? "switch+clear" : "switch-noclear");
      trace.at(-1).push(which, next);
    };

    const forced = [
      [Math.floor(maxSteps / 3), "A", true],
      [Math.floor((2 * maxSteps) / 3), "A", false],
    ];
    const deadline = Date.now() + seconds * 1000; // the action phase's bound, after the setup
    const words = ["plan", "ship", "fix", "test", "doc", "review", "deploy", "tidy"];
    for (; step < maxSteps && Date.now() < deadline; step++) {
      if (step === onlineAt) await setOffline(false), (onlineAt = -1), count("online");
      if (step === serverAt) await startServer(), count("server-start");
      const f = forced.find(([at]) => at === step);
      if (f) {
        await switchUser(f[1], f[2]);
        f[0] = -1;
        continue;
      }
      const tab = r.pick(tabs);
      const x = r();
      const began = Date.now();
      const k0 = JSON.stringify(stats);
      try {
        if (x < 0.34) {
          // add, valid or not
          const y = r();
          const board = r.pick(tab.boards);
          const word = r.pick(words);
          const id = `c${String(step).padStart(5, "0")}-${tab.name}`; // ids from the schedule, so a replay picks the same cards
          const title = y < 0.85 ? `${word} ${step}` : y < 0.92 ? "" : "x".repeat(201);
          const { key } = await tab.app("add", board, title, id);
          count(title.length && title.length <= 200 ? "add" : "add-invalid");
          trace.at(-1).push(tab.name, key, id);
        } else if (x < 0.56) {
          // rename a card the tab shows (which cards it shows depends on timing)
          const board = r.pick(tab.boards);
          const rows = (await tab.app("rows"))[board]?.rows ?? [];
          const k = r.int(1000);
          const title = r.chance(0.9) ? `${r.pick(words)} ${step}'` : "  ";
          if (rows.length) {
            const id = rows.map((c) => c.id).sort()[k % rows.length];
            const { key } = await tab.app("rename", board, id, title);
            count(title.trim() ? "rename" : "rename-invalid");
            trace.at(-1).push(tab.name, key, id);
          }
        } else if (x < 0.68) {
          const board = r.pick(tab.boards);
          const rows = (await tab.app("rows"))[board]?.rows ?? [];
          const k = r.int(1000);
          if (rows.length) {
            const id = rows.map((c) => c.id).sort()[k % rows.length];
            const { key } = await tab.app("delete", board, id);
            count("delete");
            trace.at(-1).push(tab.name, key, id);
          }
        } else if (x < 0.74) {
          // offline for a while; sometimes until every tab has noticed
          const k = 5 + r.int(40);
          const notice = r.chance(0.4);
          if (!offline) {
            await setOffline(true), (onlineAt = step + k), count("offline");
            if (notice) await noticed("the network went away"), count("offline-noticed");
          }
        } else if (x < 0.81) {
          await tab.reload();
          count("reload");
          trace.at(-1).push(tab.name);
        } else if (x < 0.85) {
          const sig = r.chance(0.7) ? "SIGKILL" : "SIGTERM";
          const k = 3 + r.int(30);
          const notice = r.chance(0.3);
          if (env.up) {
            await env.stop(sig);
            count("server-" + sig);
            serverAt = step + k;
            if (notice) await noticed("the server went away"), count("server-noticed");
          }
        } else if (x < 0.905) {
          // remove a member
          const pairs = USERS.flatMap((u) => [...(members()[u] ?? [])].map((b) => [u, b]));
          const [u, b] = pairs.length ? r.pick(pairs) : [];
          if (u) env.exec(`DELETE FROM board_members WHERE user_id = '${u}' AND board_id = '${b}'`), count("revoke");
        } else if (x < 0.96) {
          // re-grant, and the tabs of that user retry at once (or not)
          const m = members();
          const pairs = USERS.flatMap((u) => BOARDS.filter((b) => !m[u].has(b)).map((b) => [u, b]));
          const [u, b] = pairs.length ? r.pick(pairs) : [];
          const retry = r.chance(0.6);
          if (u) {
            env.exec(`INSERT INTO board_members (user_id, board_id) VALUES ('${u}', '${b}') ON CONFLICT DO NOTHING`);
            count("grant");
            if (retry) for (const t of tabs) if (originUser[t.origin] === u) await t.app("retry", b).catch((e) => notes.push(`retry: ${e.message.split("\n")[0]}`));
          }
        } else if (x < 0.99) {
          // the app's retry of every refused scope of a board the user may see now
          const m = members()[originUser[tab.origin]];
          const rows = await tab.app("rows");
          for (const [b, sc] of Object.entries(rows)) if (sc.state === "error" && m.has(b)) await tab.app("retry", b), count("retry");
        } else {
          await switchUser(r.pick(["A", "B"]), r.chance(0.5));
        }
      } catch (e) {
        // A tab mid-reload, a page that failed: counted, told, and the run goes on.
        count("action-error");
        if (notes.length < 40) notes.push(`step ${step}: ${e.message.split("\n")[0]}`);
      }
      // Where the time goes: ms per kind of action (the kinds counted in this step).
      const k1 = JSON.parse(k0);
      for (const k of Object.keys(stats)) if (k !== "ms" && stats[k] !== k1[k]) (stats.ms ??= {})[k] = (stats.ms[k] ?? 0) + Date.now() - began;
    }
    stats.steps = step;
    for (const f of forced) if (f[0] >= 0) await switchUser(f[1], f[2]);

    // ---- quiesce: online, server up, membership final.
    say(`quiesce after ${step} steps in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    if (offline) await setOffline(false);
    await startServer();
    let target, targetKey; // a card a sabotage can break: added now, so it settles with the rest
    let mark = ""; // what a failure of the sabotage's kind must name
    if (sabotage && sabotage !== "pending") {
      const t = tabs[0];
      const board = [...members()[originUser[t.origin]]][0];
      if (!board) env.exec(`INSERT INTO board_members (user_id, board_id) VALUES ('${originUser[t.origin]}', 'b1')`);
      ({ id: target, key: targetKey } = await t.app("add", board ?? "b1", "sabotage target"));
    }
    const pendingFailures = [];
    let held; // the pending sabotage's tab, left offline
    if (sabotage === "pending") {
      held = tabs[3];
      const cdp = await env.context.newCDPSession(held.page);
      await cdp.send("Network.enable");
      await cdp.send("Network.emulateNetworkConditions", { offline: true, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
      const board = [...(members()[originUser[held.origin]] ?? [])][0] ?? "b1";
      await held.app("add", board, "held offline");
      say(`sabotage pending: tab ${held.name} is left offline with a write`);
      mark = `tab ${held.name}:`;
    }
    const final = members();
    const quiet = async () => {
      const bad = [];
      for (const t of tabs) {
        const st = await t.app("status");
        const user = originUser[t.origin];
        const rows = await t.app("rows");
        const waiting = [];
        for (const [b, sc] of Object.entries(rows)) {
          if (final[user].has(b) && sc.state === "error") await t.app("retry", b).catch(() => {});
          if (final[user].has(b) ? sc.state !== "live" : sc.state !== "error") waiting.push(`${b}:${sc.state}`);
        }
        // The welcome's principal, when the client tells it, is the cookie's user.
        const bound = !st.principal || st.principal === user;
        if (st.state !== "live" || st.pending || !bound || waiting.length)
          bad.push(`tab ${t.name}: status ${st.state}, ${st.pending} pending${st.pending ? " " + JSON.stringify(await t.app("pending")) : ""}, principal ${JSON.stringify(st.principal)} (cookie ${user})${waiting.length ? ", scopes " + waiting.join(" ") : ""}`);
      }
      return bad;
    };
    let bad = [];
    try {
      await waitFor(async () => (bad = await quiet()).length === 0, { timeout: quiesceMs, what: "quiesce" });
    } catch {
      for (const b of bad) pendingFailures.push({ kind: "pending", message: `pending after quiesce (${quiesceMs / 1000} s): ${b}` });
    }

    // ---- sabotage after quiesce: break one thing each check must see.
    if (sabotage === "dup") {
      env.exec(`INSERT INTO applied (key, principal, name, card_id, title, effective) SELECT key, principal, name, card_id, title, effective FROM applied WHERE card_id = '${target}'`);
      say(`sabotage dup: the ledger row of card ${target}'s add doubled`);
      mark = targetKey;
    } else if (sabotage === "lost") {
      env.exec(`DELETE FROM cards WHERE id = '${target}'`);
      say(`sabotage lost: card ${target} deleted behind tide's mutators (captured: the tabs follow)`);
      mark = target;
    } else if (sabotage === "leak") {
      const t = tabs[0];
      const user = originUser[t.origin];
      // A board the user is not a member of; when the run ended with the
      // user in every board, one that does not exist (nobody's).
      const foreign = BOARDS.find((b) => !final[user].has(b)) ?? "b0";
      const dbs = await t.app("idb");
      const name = dbs.board ? "board" : Object.keys(dbs).find((n) => n === "board:" + user);
      const [store, recs] = Object.entries(dbs[name] ?? {}).find(([, recs]) => recs.some((x) => x.value && typeof x.value === "object" && "rows" in x.value)) ?? [];
      if (!store) throw new Error(`sabotage leak: no scope record in IndexedDB of origin ${t.origin} (${Object.keys(dbs)})`);
      const rec = recs.find((x) => x.value && "rows" in x.value);
      const row = { id: "leaked-card", board_id: foreign, title: "a card of " + foreign, updated_at: new Date().toISOString() };
      const value = structuredClone(rec.value);
      if (Array.isArray(value.rows)) value.rows.push(row);
      else value.rows[row.id] = row;
      await t.app("idbPut", name, store, value, rec.key);
      say(`sabotage leak: a card of ${foreign} written into ${name}/${store} of origin ${t.origin} (${user})`);
      mark = row.id;
    } else if (sabotage === "diverge") {
      env.exec(`SET session_replication_role = replica; UPDATE cards SET updated_at = updated_at + interval '1 hour' WHERE id = '${target}'`);
      say(`sabotage diverge: card ${target} changed in Postgres with capture off`);
      mark = target;
    }

    const failures = await check(env, tabs, { pendingFailures: [...pendingFailures, ...honest], notes, settleMs: opts.settleMs });
    const ms = Date.now() - t0;
    const report = { seed, sabotage, mark, seconds, maxSteps, steps: step, stats, ms, failures, notes, trace };
    try {
      mkdirSync(outDir, { recursive: true });
      writeFileSync(join(outDir, `torture-${seed}${sabotage ? "-" + sabotage : ""}.json`), JSON.stringify(report, null, 1));
    } catch {}
    say(`${step} steps, ${(ms / 1000).toFixed(1)} s: ${JSON.stringify(stats)}`);
    if (process.env.E2E_DEBUG && failures.length) console.error(env.log.slice(-5000));
    return report;
  } finally {
    await env.close();
  }
}

/** seedFrom returns TIDE_TORTURE_SEED (decimal or 0x hex) or a fresh random seed. */
export function seedFrom(env = process.env) {
  const s = env.TIDE_TORTURE_SEED;
  if (s) return Number(s) >>> 0;
  return randomBytes(4).readUInt32BE(0);
}
