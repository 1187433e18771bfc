// The page at `/`, driven in headless Chromium as a person would use it,
// against a real stack: run under clients/with-stack, which exports
// RUNBOX_URL and RUNBOX_TOKEN. Chromium is Debian's (/usr/bin/chromium, or
// CHROMIUM); playwright-core only drives it. The screenshot goes to
// target/browser/page.png, or to RUNBOX_PAGE_SCREENSHOT (relative to the
// repository's root) when set: docs/page.png is refreshed that way, so an
// ordinary run leaves the work tree as it was.
//
//   clients/with-stack sh -c "cd tests/browser && npm ci && node --test"
//   RUNBOX_PAGE_SCREENSHOT=docs/page.png clients/with-stack sh -c "cd tests/browser && node --test"

import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const url = process.env.RUNBOX_URL;
const token = process.env.RUNBOX_TOKEN;
assert.ok(url && token, "RUNBOX_URL and RUNBOX_TOKEN are unset: run this under clients/with-stack");
const origin = new URL(url).origin;
const root = new URL("../../", import.meta.url);
const screenshot = new URL(process.env.RUNBOX_PAGE_SCREENSHOT || "target/browser/page.png", root);
const WAIT = { timeout: 60_000 };

let browser;
let page;
/** Every URL the page asked for. */
const requested = [];
/** Script errors and Content-Security-Policy refusals. */
const problems = [];

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    // The closed network makes Chromium misbehave without these.
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: "light" });
  page = await context.newPage();
  page.on("request", (request) => requested.push(request.url()));
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (/Content Security Policy|Refused to/i.test(message.text())) problems.push(message.text());
  });
});

after(async () => {
  await browser?.close();
});

const text = (selector) => page.locator(selector).textContent();
const field = (name) => page.locator(`#result dd[data-field="${name}"]`);

/** Fills the editor, then runs it by the Run button (or by `keys`). */
async function run(language, code, keys) {
  await page.selectOption("#language", language);
  await page.fill("#code", code);
  if (keys) {
    await page.focus("#code");
    await page.keyboard.press(keys);
  } else {
    await page.click("#run");
  }
}

test("the page loads without a token and states the security boundary", async () => {
  const response = await page.goto(`${url}/`);
  assert.equal(response.status(), 200);
  assert.match(response.headers()["content-type"], /^text\/html/);
  assert.match(response.headers()["content-security-policy"], /connect-src 'self'/);
  assert.equal(await page.title(), "runbox");
  assert.equal(await page.locator("h1").textContent(), "runbox");
  assert.match(
    await text("#boundary"),
    /process-level isolation for careless code, not a kernel boundary for hostile strangers/,
  );
  // The script ran: it put the sample program in the editor.
  assert.match(await page.inputValue("#code"), /print\(/);
  assert.match(await text("#service-state"), /Set a token/);
});

test("without a token, running shows the API's auth error", async () => {
  await run("python", 'print("never")\n');
  await page.locator("#error").waitFor({ state: "visible", ...WAIT });
  const error = await text("#error");
  assert.match(error, /^unauthorized \(HTTP 401\): /);
  assert.equal(await page.locator("#jobs li").count(), 0);
  assert.equal(await page.locator("#stdout").textContent(), "");
});

test("with the token, an invalid job gets the API's code and message", async () => {
  await page.fill("#token", token);
  await run("python", "   ");
  await page.locator("#error", { hasText: "invalid_field" }).waitFor(WAIT);
  assert.match(await text("#error"), /^invalid_field \(HTTP 400\): .*code/);
  assert.equal(await page.locator("#jobs li").count(), 0, "a refused job is not listed");
});

test("Tab in the editor inserts spaces", async () => {
  await page.fill("#code", "x");
  await page.focus("#code");
  await page.keyboard.press("End");
  await page.keyboard.press("Tab");
  assert.equal(await page.inputValue("#code"), "x    ");
  assert.equal(await page.evaluate(() => document.activeElement.id), "code");
});

test("a Python job's output streams in, then its result", async () => {
  const code = 'import time\nfor i in range(3):\n    print("tick", i, flush=True)\n    time.sleep(0.7)\nprint("done")\n';
  await run("python", code);
  // The first line is shown while the job still runs.
  await page.waitForFunction(
    () =>
      document.getElementById("stdout").textContent.startsWith("tick 0\n") &&
      !/completed/.test(document.getElementById("state").textContent),
    null,
    WAIT,
  );
  await page.locator("#state", { hasText: "completed" }).waitFor(WAIT);
  assert.equal(await text("#stdout"), "tick 0\ntick 1\ntick 2\ndone\n");
  assert.equal(await text("#stderr"), "");
  assert.equal(await field("status").textContent(), "completed");
  assert.equal(await field("exit_code").textContent(), "0");
  assert.match(await field("duration").textContent(), /^\d+ ms$/);
  assert.match(await field("cpu").textContent(), /^\d+ ms$/);
  assert.match(await field("peak_memory").textContent(), /^\d+\.\d MiB$/);
  assert.equal(await page.locator("#error").isVisible(), false);
});

test("a JavaScript job runs by Ctrl+Enter, and stderr and the verdict are shown", async () => {
  await page.click("summary");
  await page.fill("#expected", "from js 42\n");
  await run("javascript", 'console.log("from js", 6 * 7);\nconsole.error("to stderr");\n', "Control+Enter");
  await page.locator("#state", { hasText: "completed" }).waitFor(WAIT);
  assert.equal(await text("#stdout"), "from js 42\n");
  assert.equal(await text("#stderr"), "to stderr\n");
  assert.equal(await field("status").textContent(), "completed");
  assert.equal(await field("verdict").textContent(), "accepted");
});

test("recent jobs list both, and choosing one reads it again", async () => {
  const jobs = page.locator("#jobs li button");
  assert.equal(await jobs.count(), 2);
  assert.match(await jobs.nth(0).textContent(), /javascript +completed/);
  assert.match(await jobs.nth(1).textContent(), /python +completed/);
  for (const [index, stdout] of [[1, "tick 0\ntick 1\ntick 2\ndone\n"], [0, "from js 42\n"]]) {
    const id = await jobs.nth(index).getAttribute("data-id");
    const read = page.waitForRequest((request) => request.url() === `${origin}/v1/jobs/${id}`);
    await jobs.nth(index).click();
    await read;
    await page.locator("#state", { hasText: `Job ${id}: completed` }).waitFor(WAIT);
    assert.equal(await text("#stdout"), stdout);
  }
});

test("the queue and workers panel shows the live worker", async () => {
  await page.locator("#workers li").first().waitFor(WAIT);
  assert.match(await page.locator("#workers li h3").first().textContent(), /\S/);
  const workers = Number(await page.locator('dd[data-metric="runbox_api_workers"]').textContent());
  assert.ok(workers >= 1, `runbox_api_workers is ${workers}`);
  // Read again while the page is open, after the jobs above are done.
  const earlier = await text("#service-state");
  assert.match(earlier, /^Updated /);
  await page.waitForFunction((seen) => document.getElementById("service-state").textContent !== seen, earlier, WAIT);
  assert.equal(await text('dd[data-metric="runbox_api_queue_depth"]'), "0");
  await mkdir(new URL(".", screenshot), { recursive: true });
  await page.screenshot({ path: fileURLToPath(screenshot), fullPage: true });
});

test("the token stays in memory, and nothing left for another origin", async () => {
  const stored = await page.evaluate(() => [localStorage.length, sessionStorage.length, document.cookie]);
  assert.deepEqual(stored, [0, 0, ""]);
  assert.ok(requested.length > 5, `${requested.length} requests`);
  for (const address of requested) {
    assert.ok(address.startsWith("data:") || new URL(address).origin === origin, `the page asked ${address}`);
    assert.ok(!address.includes(token), `the token is in ${address}`);
  }
  assert.deepEqual(problems, []);
});
