// Builds dist/tide.js (one minified ES module, what the middleware serves)
// and dist/tide.d.ts from src/tide.ts. With --check, builds into a temporary
// directory and fails if the committed dist/ differs; prints the sizes and
// fails above the size budget.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import * as esbuild from "esbuild";

const BUDGET = 10 * 1024; // bytes, minified and gzipped (issue 14; docs/performance.md)
const here = dirname(fileURLToPath(import.meta.url));
const check = process.argv.includes("--check");
const out = check ? mkdtempSync(join(tmpdir(), "tidejs-")) : join(here, "dist");
try {
  execFileSync(join(here, "node_modules/.bin/tsc"), ["-p", join(here, "tsconfig.json"), "--outDir", out], { stdio: "inherit" });
  await esbuild.build({
    entryPoints: [join(here, "src/tide.ts")],
    bundle: true,
    format: "esm",
    target: "es2020",
    minify: true,
    legalComments: "none",
    banner: { js: "// tide browser client (@tidesync/client) — source: client/js/src/tide.ts" },
    outfile: join(out, "tide.js"),
    logLevel: "warning",
  });
  const js = readFileSync(join(out, "tide.js"));
  // The raw size: the same bundle, not minified (not written anywhere).
  const raw = (await esbuild.build({ entryPoints: [join(here, "src/tide.ts")], bundle: true, format: "esm", target: "es2020", write: false, logLevel: "warning" })).outputFiles[0].contents;
  const gz = gzipSync(js, { level: 9 }).length;
  console.log(`tide.js: ${raw.length} bytes raw (unminified), ${js.length} bytes minified, ${gz} bytes minified+gzipped (budget ${BUDGET})`);
  if (gz > BUDGET) {
    console.error(`tide.js is over its size budget: ${gz} > ${BUDGET} bytes minified+gzipped`);
    process.exitCode = 1;
  }
  if (check) {
    for (const f of ["tide.js", "tide.d.ts"]) {
      const fresh = readFileSync(join(out, f), "utf8");
      let committed = "";
      try { committed = readFileSync(join(here, "dist", f), "utf8"); } catch {}
      if (fresh !== committed) {
        console.error(`dist/${f} differs from a fresh build of src/: run "npm run build" in client/js and commit dist/`);
        process.exitCode = 1;
      }
    }
    if (!process.exitCode) console.log("dist/ matches a fresh build");
  }
} finally {
  if (check) rmSync(out, { recursive: true, force: true });
}
