// Builds dist/ from src/: dist/tide.js (one minified ES module of
// src/index.ts and the modules it imports, what the middleware serves),
// dist/react.js (the React hooks of src/react.ts, the package's
// "@tidesync/client/react"; React is a peer dependency, never bundled), and
// dist/tide.d.ts and dist/react.d.ts over the modules' declarations in
// dist/types/.
// Properties whose names end in "_" are internal and mangled (esbuild
// mangleProps; the public API never ends a name so). With --check, builds
// into a temporary directory and fails if the committed dist/ differs;
// prints the sizes and fails above the size budget.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, rmSync, readdirSync, statSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import * as esbuild from "esbuild";

const BUDGET = 10 * 1024 + 16; // bytes of dist/tide.js, minified and gzipped (docs/performance.md)
const here = dirname(fileURLToPath(import.meta.url));
const check = process.argv.includes("--check");
const out = check ? mkdtempSync(join(tmpdir(), "tidejs-")) : join(here, "dist");

const files = (dir) => readdirSync(dir).flatMap((f) => (statSync(join(dir, f)).isDirectory() ? files(join(dir, f)).map((g) => join(f, g)) : [f]));
const common = { bundle: true, format: "esm", target: "es2020", logLevel: "warning", mangleProps: /[^_]_$/ };

try {
  if (!check) rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  execFileSync(join(here, "node_modules/.bin/tsc"), ["-p", join(here, "tsconfig.json"), "--outDir", join(out, "types")], { stdio: "inherit" });
  writeFileSync(join(out, "tide.d.ts"), '// The types of dist/tide.js (@tidesync/client): see types/index.d.ts.\nexport * from "./types/index.js";\n');
  writeFileSync(join(out, "react.d.ts"), '// The types of dist/react.js (@tidesync/client/react): see types/react.d.ts.\nexport * from "./types/react.js";\n');
  const react = await esbuild.build({
    ...common,
    entryPoints: [join(here, "src/react.ts")],
    external: ["react"],
    minify: true,
    legalComments: "none",
    metafile: true,
    banner: { js: "// @tidesync/client/react, React hooks for tide's browser client: see client/js/src/react.ts" },
    outfile: join(out, "react.js"),
  });
  // The hooks use the client through its public API only: nothing of it is bundled twice.
  const inputs = Object.keys(Object.values(react.metafile.outputs)[0].inputs);
  if (inputs.join() !== "src/react.ts") {
    console.error(`react.js bundles more than src/react.ts: ${inputs.join(", ")}`);
    process.exitCode = 1;
  }
  await esbuild.build({
    ...common,
    entryPoints: [join(here, "src/index.ts")],
    minify: true,
    legalComments: "none",
    banner: { js: "// @tidesync/client, tide's browser client: see client/js/src/" },
    outfile: join(out, "tide.js"),
  });
  const js = readFileSync(join(out, "tide.js"));
  // The raw size: the same bundle, not minified nor mangled (not written anywhere).
  const raw = (await esbuild.build({ ...common, mangleProps: undefined, entryPoints: [join(here, "src/index.ts")], write: false })).outputFiles[0].contents;
  const gz = gzipSync(js, { level: 9 }).length;
  console.log(`tide.js: ${raw.length} bytes raw (unminified), ${js.length} bytes minified, ${gz} bytes minified+gzipped (budget ${BUDGET})`);
  if (gz > BUDGET) {
    console.error(`tide.js is over its size budget: ${gz} > ${BUDGET} bytes minified+gzipped`);
    process.exitCode = 1;
  }
  if (check) {
    const fresh = files(out).sort();
    const committed = files(join(here, "dist")).sort();
    for (const f of new Set([...fresh, ...committed])) {
      let a = "", b = "";
      try { a = readFileSync(join(out, f), "utf8"); } catch {}
      try { b = readFileSync(join(here, "dist", f), "utf8"); } catch {}
      if (a !== b) {
        console.error(`dist/${f} differs from a fresh build of src/: run "npm run build" in client/js and commit dist/`);
        process.exitCode = 1;
      }
    }
    if (!process.exitCode) console.log(`dist/ matches a fresh build (${fresh.length} files)`);
  }
} finally {
  if (check) rmSync(out, { recursive: true, force: true });
}
