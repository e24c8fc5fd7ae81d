// Two-tab check of the todo demo in a real browser: an edit in one tab must
// appear in the other. Not part of `go test` (it needs Chromium and
// playwright-core); run it by hand against a running demo:
//
//   go run ./examples/todo -addr 127.0.0.1:8080 &
//   npm install playwright-core@1 && node examples/todo/browsertest/twotabs.mjs http://127.0.0.1:8080/
//
// CHROMIUM overrides the browser path (default /usr/bin/chromium).
import { chromium } from "playwright-core";

const url = process.argv[2] || "http://127.0.0.1:8080/";
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
const fail = async (msg) => { console.error("FAIL: " + msg); await browser.close(); process.exit(1); };
try {
  const ctx = await browser.newContext(); // one session cookie, two tabs
  const a = await ctx.newPage();
  const b = await ctx.newPage();
  for (const p of [a, b]) {
    await p.goto(url);
    await p.waitForSelector("#status.live", { timeout: 10000 });
  }
  const title = "added in tab A " + Date.now();
  await a.fill("#title", title);
  await a.click("#add button");
  await b.waitForSelector(`li:has-text("${title}")`, { timeout: 10000 }).catch(() => fail("tab B never showed the todo added in tab A"));
  // Tick it off in B; A sees it done.
  await b.locator(`li:has-text("${title}") input[type=checkbox]`).check();
  await a.waitForSelector(`li.done:has-text("${title}")`, { timeout: 10000 }).catch(() => fail("tab A never showed the todo ticked in tab B"));
  // Delete it in A; it disappears from B.
  await a.locator(`li:has-text("${title}") button:has-text("✕")`).click();
  await b.waitForSelector(`li:has-text("${title}")`, { state: "detached", timeout: 10000 }).catch(() => fail("tab B still shows the todo deleted in tab A"));
  console.log("ok: add, tick and delete in one tab showed up live in the other");
} finally {
  await browser.close();
}
