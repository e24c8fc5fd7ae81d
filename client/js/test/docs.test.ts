// Every code sample of docs/client-js.md, of docs/types.md (against the
// todo demo's generated types, as ./tide.gen.js) and of the "### In the
// browser" section of docs/writes.md is type-checked against the package as an app
// sees it ("@tidesync/client" and "@tidesync/client/react", resolved by the
// package's exports to dist/): ts and tsx blocks as they are, an html
// block's module script with the served module's placeholder replaced by
// the package. A block in another language fails the test: no sample
// escapes the check.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const root = process.cwd(); // client/js (test/run.mjs runs the tests there)
const docs = join(root, "../../docs");

function blocks(name: string, text: string): { name: string; lang: string; code: string }[] {
  const out: { name: string; lang: string; code: string }[] = [];
  const re = /^```(\w*)\n([\s\S]*?)^```$/gm;
  for (let m; (m = re.exec(text)); ) out.push({ name: `${name}-${out.length + 1}`, lang: m[1]!, code: m[2]! });
  return out;
}

test("docs: every code block of client-js.md, types.md and writes.md's browser section type-checks against the package", () => {
  const page = readFileSync(join(docs, "client-js.md"), "utf8");
  const writes = readFileSync(join(docs, "writes.md"), "utf8");
  const at = writes.indexOf("\n### In the browser\n");
  assert.ok(at >= 0, 'writes.md has a "### In the browser" section');
  const rest = writes.slice(at + 1);
  const end = rest.slice(1).search(/^#{1,3} /m);
  const section = end < 0 ? rest : rest.slice(0, end + 1);
  const types = blocks("types", readFileSync(join(docs, "types.md"), "utf8")).filter((b) => b.lang !== "go"); // its Go blocks: client/typesdoc_test.go
  assert.ok(types.length >= 2, `types.md: ${types.length} TypeScript blocks`);
  const all = [...blocks("client-js", page), ...blocks("writes-browser", section), ...types];
  assert.ok(all.length >= 6, `${all.length} blocks`);
  const dir = mkdtempSync(join(root, ".docs-"));
  try {
    writeFileSync(join(dir, "tide.gen.ts"), readFileSync(join(root, "../../examples/todo/web/tide.gen.ts")));
    const files: string[] = [];
    for (const b of all) {
      let code = b.code;
      let ext = b.lang;
      if (b.lang === "html") {
        const m = /<script type="module">([\s\S]*?)<\/script>/.exec(code);
        assert.ok(m, `${b.name}: an html block holds a module script`);
        code = m[1]!.replace("{{CLIENT_JS}}", "@tidesync/client");
        ext = "ts";
      }
      assert.ok(ext === "ts" || ext === "tsx", `${b.name}: a \`\`\`${b.lang} block is not checked; write it as ts, tsx or html`);
      const file = `${b.name}.${ext}`;
      writeFileSync(join(dir, file), code + "\nexport {};\n");
      files.push(file);
    }
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { strict: true, noEmit: true, target: "ES2020", module: "ES2020", moduleResolution: "bundler", lib: ["ES2020", "DOM"], jsx: "react-jsx", types: [], skipLibCheck: true, noUnusedLocals: false },
        files,
      }),
    );
    const r = spawnSync(join(root, "node_modules/.bin/tsc"), ["-p", join(dir, "tsconfig.json")], { encoding: "utf8" });
    assert.equal(r.status, 0, `the samples do not type-check:\n${r.stdout}${r.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
