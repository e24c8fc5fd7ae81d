// npm test: type-checks the sources and the tests (tsconfig.test.json) and
// the typed example app (examples/todo/web),
// bundles each test/*.test.ts with esbuild into a temporary directory and
// runs them with node's test runner. Arguments are passed to node --test
// (e.g. --test-name-pattern=heartbeat).
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = spawnSync(join(root, "node_modules/.bin/tsc"), ["-p", join(root, "tsconfig.test.json")], { stdio: "inherit" });
if (tsc.status !== 0) {
  console.error("npm test: the sources or tests do not type-check");
  process.exit(1);
}
// The typed example app: its generated types (examples/todo/web/tide.gen.ts) against this client.
const example = spawnSync(join(root, "node_modules/.bin/tsc"), ["-p", join(root, "../../examples/todo/web/tsconfig.json")], { stdio: "inherit" });
if (example.status !== 0) {
  console.error("npm test: examples/todo/web does not type-check (regenerate its types with go generate ./examples/todo)");
  process.exit(1);
}
const out = mkdtempSync(join(tmpdir(), "tidejs-test-"));
try {
  const tests = readdirSync(join(root, "test")).filter((f) => f.endsWith(".test.ts"));
  await esbuild.build({
    entryPoints: tests.map((f) => join(root, "test", f)),
    outdir: out,
    outExtension: { ".js": ".mjs" },
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    sourcemap: "inline",
    logLevel: "warning",
  });
  const files = readdirSync(out).filter((f) => f.endsWith(".test.mjs")).map((f) => join(out, f));
  const r = spawnSync(process.execPath, ["--enable-source-maps", "--test", ...process.argv.slice(2), ...files], { cwd: root, stdio: "inherit" });
  process.exitCode = r.status ?? 1;
} finally {
  rmSync(out, { recursive: true, force: true });
}
