// What a live changes frame costs the browser client, by the size of the
// scope it lands in, in headless Chromium: the client's own steps for one
// frame that changes one row (the new rows map, the stored record, the store
// write it awaits before the next frame), on IndexedDB and on the memory
// store, and the same steps without a store as the same run's baseline.
//
//   cd client/js && npm ci && CHROMIUM=$(command -v chromium) node bench/store.mjs [rows ...]
//
// Bounded: 40 frames a size up to 1,000 rows, 10 above. Prints one line a
// size; the figures and what they mean are in docs/performance.md.
import { createServer } from "node:http";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const sizes = process.argv.slice(2).map(Number).filter((n) => n > 0);
if (!sizes.length) sizes.push(100, 1000, 10000, 50000);

// The page's module: the client's internals the frame path runs, bundled from src/.
const entry = `
import { applyBase } from "../src/replica.ts";
import { record } from "../src/scope.ts";
import { indexedDBStore, memoryStore } from "../src/storage.ts";
window.bench = async (n, frames) => {
  const rows = new Map();
  for (let i = 0; i < n; i++) rows.set("k" + i, { id: "k" + i, project_id: "p7", title: "a title of about forty characters, " + i, done: false, updated_at: "2026-12-03T06:00:00.000000Z" });
  const copy = { digest: "d" + n, resource: "todos", conditions: { project_id: "p7" } };
  const out = {};
  for (const [name, store] of [["none", null], ["memory", memoryStore()], ["indexeddb", await indexedDBStore("bench" + n)]]) {
    let base = rows;
    if (store) await store.saveScope(record(copy, "1.E.1", base), true);
    const t0 = performance.now();
    for (let f = 0; f < frames; f++) {
      const k = "k" + ((f * 7919) % n);
      const entry = { op: "upsert", key: k, row: { ...base.get(k), title: "changed " + f } };
      const next = applyBase(base, false, [entry]);
      if (store) await store.saveScope(record(copy, "1.E." + (f + 2), next), false);
      base = next;
    }
    out[name] = (performance.now() - t0) / frames;
  }
  return out;
};
window.ready = true;
`;
const js = (await esbuild.build({ stdin: { contents: entry, resolveDir: here, loader: "js" }, bundle: true, format: "esm", target: "es2020", write: false })).outputFiles[0].text;
const html = `<!doctype html><script type="module" src="/bench.js"></script>`;
const srv = createServer((q, s) => {
  s.setHeader("content-type", q.url === "/bench.js" ? "text/javascript" : "text/html");
  s.end(q.url === "/bench.js" ? js : html);
});
await new Promise((ok) => srv.listen(0, "127.0.0.1", ok));
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
});
try {
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${srv.address().port}/`);
  await page.waitForFunction(() => window.ready, null, { timeout: 30000 });
  console.log("rows\tms a frame: no store\tmemory\tIndexedDB");
  for (const n of sizes) {
    const r = await page.evaluate(([n, f]) => window.bench(n, f), [n, n > 1000 ? 10 : 40]);
    console.log(`${n}\t${r.none.toFixed(2)}\t${r.memory.toFixed(2)}\t${r.indexeddb.toFixed(2)}`);
  }
} finally {
  await browser.close();
  srv.close();
}
