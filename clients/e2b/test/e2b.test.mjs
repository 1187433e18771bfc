// E2B's JS SDK (@e2b/code-interpreter 2.8.0 on e2b 2.51.0, pinned in
// package-lock.json), unchanged, under Node against runbox's /e2b on a real
// stack (run under clients/with-stack). The ground of the Python suites, more
// briefly. Each test creates its own sandbox and kills it when it ends.
import assert from "node:assert/strict";
import { test } from "node:test";

const base = process.env.RUNBOX_URL;
const token = process.env.RUNBOX_TOKEN;
const otherToken = process.env.RUNBOX_OTHER_TOKEN;
const e2bUrl = `${base}/e2b`;

// Set before the SDK builds any connection (it reads them for each one).
process.env.E2B_API_URL = e2bUrl;
process.env.E2B_SANDBOX_URL = e2bUrl;
process.env.E2B_API_KEY = token;
for (const name of ["E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"]) delete process.env[name];

const { E2B, FileNotFoundError, InvalidArgumentError, Sandbox, SandboxError, SandboxNotFoundError, TimeoutError } =
  await import("@e2b/code-interpreter");

const other = new E2B({ apiKey: otherToken });

async function withSandbox(work, opts) {
  const sandbox = await Sandbox.create(opts);
  try {
    return await work(sandbox);
  } finally {
    await Sandbox.kill(sandbox.sandboxId);
  }
}

async function listedIds(sandboxClass = Sandbox) {
  const paginator = sandboxClass.list();
  const ids = [];
  while (paginator.hasNext) ids.push(...(await paginator.nextItems()).map((s) => s.sandboxId));
  return ids;
}

// The headers the SDK puts on a data-plane request, with `accessToken` as
// X-Access-Token (none when undefined).
function sandboxHeaders(sandboxId, port, accessToken) {
  const headers = { "E2b-Sandbox-Id": sandboxId, "E2b-Sandbox-Port": String(port) };
  if (accessToken !== undefined) headers["X-Access-Token"] = accessToken;
  return headers;
}

function rawExecute(sandboxId, accessToken, code) {
  return fetch(`${e2bUrl}/execute`, {
    method: "POST",
    headers: { ...sandboxHeaders(sandboxId, 49999, accessToken), "Content-Type": "application/json" },
    body: JSON.stringify({ code }),
  });
}

function rawRead(sandboxId, accessToken, path) {
  return fetch(`${e2bUrl}/files?path=${encodeURIComponent(path)}`, { headers: sandboxHeaders(sandboxId, 49983, accessToken) });
}

const wrongTokens = [
  ["a made-up token", "not-the-access-token-0123456789"],
  ["no token", undefined],
];

test("create, getInfo, isRunning, list (the caller's only), connect and kill", async () => {
  const sandbox = await Sandbox.create();
  const id = sandbox.sandboxId;
  try {
    const info = await sandbox.getInfo();
    assert.equal(info.sandboxId, id);
    assert.equal(info.templateId, "code-interpreter-v1");
    assert.equal(info.state, "running");
    assert.equal(await sandbox.isRunning(), true);
    assert.ok((await listedIds()).includes(id), "the owner's list lacks its sandbox");
    assert.ok(!(await listedIds(other.Sandbox)).includes(id), "the other token's list shows it");

    await sandbox.runCode("seen = 'through connect'");
    const again = await Sandbox.connect(id);
    assert.equal((await again.runCode("seen")).text, "through connect");

    await sandbox.setTimeout(1_800_000);
    const left = (await Sandbox.getInfo(id)).endAt.getTime() - Date.now();
    assert.ok(left > 25 * 60_000 && left <= 31 * 60_000, `${left} ms left`);

    assert.equal(await sandbox.kill(), true);
    assert.equal(await Sandbox.kill(id), false);
    await assert.rejects(Sandbox.connect(id), SandboxNotFoundError);
    assert.equal(await sandbox.isRunning(), false);
  } finally {
    await Sandbox.kill(id);
  }
});

test("state is kept between runCode calls; results carry the value", () =>
  withSandbox(async (sandbox) => {
    const first = await sandbox.runCode("x = 21");
    assert.equal(first.error, undefined);
    const execution = await sandbox.runCode("x * 2");
    assert.equal(execution.text, "42");
    assert.deepEqual(
      execution.results.map((r) => r.isMainResult),
      [true],
    );
  }));

test("onStdout and onStderr get output printed over time", () =>
  withSandbox(async (sandbox) => {
    const out = [];
    const err = [];
    const code = "import sys, time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\nprint('oops', file=sys.stderr)";
    const execution = await sandbox.runCode(code, {
      onStdout: (m) => out.push(m),
      onStderr: (m) => err.push(m),
    });
    const expected = [0, 1, 2, 3].map((i) => `tick ${i}\n`).join("");
    assert.equal(out.map((m) => m.line).join(""), expected);
    assert.equal(execution.logs.stdout.join(""), expected);
    assert.equal(err.map((m) => m.line).join(""), "oops\n");
    assert.ok(err.every((m) => m.error === true));
  }));

test("an exception is an execution error with name, value and traceback", () =>
  withSandbox(async (sandbox) => {
    const execution = await sandbox.runCode("1 / 0");
    assert.equal(execution.error.name, "ZeroDivisionError");
    assert.match(execution.error.value, /division by zero/);
    assert.match(execution.error.traceback, /ZeroDivisionError/);
    assert.equal(execution.text, undefined);
  }));

test("JavaScript runs with its state kept, under js and javascript", () =>
  withSandbox(async (sandbox) => {
    await sandbox.runCode("globalThis.y = 5", { language: "js" });
    const execution = await sandbox.runCode("y + 1", { language: "javascript" });
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    assert.equal(execution.text, "6");
    const logged = await sandbox.runCode("console.log('from js', y * 2)", { language: "js" });
    assert.equal(logged.logs.stdout.join(""), "from js 10\n");
  }));

test("a new code context has its own state", () =>
  withSandbox(async (sandbox) => {
    await sandbox.runCode("secret = 1");
    const context = await sandbox.createCodeContext();
    assert.ok(context.id);
    assert.equal((await sandbox.runCode("'secret' in globals()", { context })).text, "False");
  }));

test("a timeoutMs stops the run, and the next run works", () =>
  withSandbox(async (sandbox) => {
    await assert.rejects(sandbox.runCode("while True: pass", { timeoutMs: 2000 }), TimeoutError);
    const execution = await sandbox.runCode("print('recovered')", { timeoutMs: 180_000 });
    assert.equal(execution.logs.stdout.join(""), "recovered\n");
  }));

test("files: write, read, bytes, list, and the errors", () =>
  withSandbox(async (sandbox) => {
    const info = await sandbox.files.write("data/x.csv", "a,b\n1,2\n");
    assert.equal(info.name, "x.csv");
    assert.equal(info.path, "/home/user/data/x.csv");
    const printed = await sandbox.runCode("print(open('data/x.csv').read(), end='')");
    assert.equal(printed.logs.stdout.join(""), "a,b\n1,2\n");

    await sandbox.runCode("open('data/made.bin', 'wb').write(bytes(range(256)))");
    const bytes = await sandbox.files.read("data/made.bin", { format: "bytes" });
    assert.deepEqual([...bytes], [...Array(256).keys()]);
    assert.equal(await sandbox.files.read("/home/user/data/x.csv"), "a,b\n1,2\n");

    await sandbox.files.makeDir("data/sub");
    const entries = Object.fromEntries((await sandbox.files.list("data")).map((e) => [e.name, e.type]));
    assert.deepEqual(entries, { "x.csv": "file", "made.bin": "file", sub: "dir" });
    const moved = await sandbox.files.rename("data/x.csv", "data/sub/x.csv");
    assert.equal(moved.path, "/home/user/data/sub/x.csv");
    assert.equal((await sandbox.files.getInfo("data/sub/x.csv")).size, 8);
    assert.equal(await sandbox.files.exists("data/x.csv"), false);

    await assert.rejects(sandbox.files.read("missing.txt"), FileNotFoundError);
    await assert.rejects(sandbox.files.read("/etc/passwd"), InvalidArgumentError);
    await assert.rejects(sandbox.files.write("../x", "escape"), InvalidArgumentError);
  }));

test("pause, then connect resumes with state and files", () =>
  withSandbox(async (sandbox) => {
    await sandbox.runCode("kept = 'across the pause'");
    await sandbox.files.write("kept.txt", "file across the pause");
    assert.equal(await sandbox.pause(), true);
    assert.equal(await Sandbox.pause(sandbox.sandboxId), false, "a second pause is a 409");
    assert.equal((await sandbox.getInfo()).state, "paused");
    const resumed = await Sandbox.connect(sandbox.sandboxId);
    assert.equal((await resumed.runCode("kept")).text, "across the pause");
    assert.equal(await resumed.files.read("kept.txt"), "file across the pause");
  }));

test("commands.run fails at once, saying there is no shell and naming runCode's endpoint", () =>
  withSandbox(async (sandbox) => {
    await assert.rejects(sandbox.commands.run("ls", { timeoutMs: 30_000 }), (error) => {
      assert.ok(error instanceof SandboxError, String(error));
      assert.ok(!(error instanceof TimeoutError), String(error));
      assert.match(error.message, /no shell/);
      assert.match(error.message, /run_code/);
      return true;
    });
  }));

test("the second token reaches nothing of the first's", () =>
  withSandbox(async (sandbox) => {
    const id = sandbox.sandboxId;
    await sandbox.runCode("owner = 'still here'");
    await assert.rejects(other.Sandbox.connect(id), SandboxNotFoundError);
    assert.equal(await other.Sandbox.kill(id), false);
    await assert.rejects(other.Sandbox.setTimeout(id, 10_000), SandboxNotFoundError);
    await assert.rejects(other.Sandbox.getInfo(id), SandboxNotFoundError);

    for (const [what, wrong] of wrongTokens) {
      const response = await rawExecute(id, wrong, "open('refused.txt', 'w').write('ran')");
      const body = await response.text();
      // Whether the code ran, asked with the owner's token, says more than
      // the status alone when this fails.
      const ran = await sandbox.files.exists("refused.txt");
      assert.deepEqual({ status: response.status, ran }, { status: 401, ran: false }, `${what}: ${body}`);
      const read = await rawRead(id, wrong, "refused.txt");
      assert.equal(read.status, 401, what);
      await read.body?.cancel();
    }
    // The sandbox's own token opens the same doors, so the probes could fail.
    const allowed = await rawExecute(id, sandbox.envdAccessToken, "open('allowed.txt', 'w').write('ran')");
    assert.equal(allowed.status, 200);
    await allowed.text();
    assert.equal(await sandbox.files.read("allowed.txt"), "ran");
    assert.equal((await sandbox.runCode("owner")).text, "still here");
  }));
