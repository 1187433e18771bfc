// The npm piston-client (1.0.2, pinned in package-lock.json), unchanged,
// against runbox's Piston API on a real stack (run under clients/with-stack).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import piston from "piston-client";

const base = process.env.RUNBOX_URL;
const token = process.env.RUNBOX_TOKEN;
const server = `${base}/piston/${token}`;
const client = piston({ server });

test("runtimes lists the three languages with versions and aliases", async () => {
  const runtimes = await client.runtimes();
  const byLanguage = Object.fromEntries(runtimes.map((r) => [r.language, r]));
  assert.deepEqual(Object.keys(byLanguage).sort(), ["javascript", "python", "typescript"]);
  assert.match(byLanguage.python.version, /^3\.\d+\.\d+$/);
  assert.ok(byLanguage.python.aliases.includes("py"));
  assert.ok(byLanguage.javascript.aliases.includes("js"));
  assert.equal(byLanguage.javascript.version, byLanguage.typescript.version);
});

for (const [language, code] of [
  ["python", "import sys\nprint('hello from', sys.argv[1:])"],
  ["javascript", "console.log('hello from', JSON.stringify(Deno.args))"],
  ["typescript", "const who: string = 'hello from';\nconsole.log(who, JSON.stringify(Deno.args))"],
]) {
  test(`execute runs ${language} at the latest version, with piston-client's default args`, async () => {
    const result = await client.execute(language, code);
    assert.equal(result.language, language, JSON.stringify(result));
    assert.equal(result.run.code, 0, JSON.stringify(result));
    assert.equal(result.run.signal, null);
    assert.match(result.run.stdout, /^hello from \[['"]1['"], ?['"]2['"], ?['"]3['"]\]\n$/);
    assert.equal(result.run.output, result.run.stdout + result.run.stderr);
  });
}

test("stdin and args reach the program; a version selector picks the runtime", async () => {
  const code = "import sys\nprint(input().upper(), ' '.join(sys.argv[1:]))";
  const result = await client.execute({ language: "py", version: "3", files: [{ content: code }], stdin: "shout", args: ["a", "b"] });
  assert.equal(result.run.stdout, "SHOUT a b\n", JSON.stringify(result));
  assert.equal(result.language, "python");
  const exact = await client.execute({ language: "python", version: result.version, files: [{ content: "print(2)" }] });
  assert.equal(exact.run.stdout, "2\n");
  const any = await client.execute({ language: "python", version: "*", files: [{ content: "print(3)" }] });
  assert.equal(any.run.stdout, "3\n");
});

test("a program past its run_timeout is killed with SIGKILL", async () => {
  const result = await client.execute("javascript", "while (true) {}", { runTimeout: 500 });
  assert.equal(result.run.signal, "SIGKILL", JSON.stringify(result));
  assert.equal(result.run.code, null);
});

test("a failing program reports its exit code and stderr", async () => {
  const result = await client.execute("python", "import sys\nprint('out')\nsys.exit('bad things')");
  assert.equal(result.run.code, 1);
  assert.equal(result.run.stdout, "out\n");
  assert.match(result.run.stderr, /bad things/);
  assert.equal(result.run.output, "out\n" + result.run.stderr);
});

test("multiple files: the first runs, the others are files beside it", async () => {
  const py = await client.execute({
    language: "python",
    version: "*",
    files: [
      { name: "main.py", content: "print(open('data.txt').read().strip(), open('bin.dat', 'rb').read())" },
      { name: "data.txt", content: "from a second file" },
      { name: "bin.dat", content: Buffer.from([1, 2, 255]).toString("base64"), encoding: "base64" },
    ],
  });
  assert.equal(py.run.stdout, "from a second file b'\\x01\\x02\\xff'\n", JSON.stringify(py));
  const js = await client.execute({
    language: "javascript",
    version: "*",
    files: [{ content: "console.log(Deno.readTextFileSync('lib/words.txt').trim())" }, { name: "lib/words.txt", content: "nested" }],
  });
  assert.equal(js.run.stdout, "nested\n", JSON.stringify(js));
});

test("a wrong token is rejected, and so is a missing one", async () => {
  const wrong = await piston({ server: `${base}/piston/not-the-token-0123456789` }).runtimes();
  assert.ok(Array.isArray(wrong) === false && typeof wrong.message === "string", JSON.stringify(wrong));
  const response = await fetch(`${base}/piston/not-the-token-0123456789/api/v2/execute`, {
    method: "POST",
    body: JSON.stringify({ language: "python", version: "*", files: [{ content: "print(1)" }] }),
  });
  assert.equal(response.status, 401);
  assert.equal((await fetch(`${base}/piston/api/v2/runtimes`)).status, 401);
});

test("a bearer header works without the token in the path", async () => {
  const response = await fetch(`${base}/piston/api/v2/execute`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ language: "ts", version: "*", files: [{ content: "console.log(1 + 1)" }] }),
  });
  assert.equal(response.status, 200);
  assert.equal((await response.json()).run.stdout, "2\n");
});

test("a JSON body sent as text/plain is read", async () => {
  const response = await fetch(`${server}/api/v2/execute`, {
    method: "POST",
    headers: { "Content-Type": "text/plain" },
    body: JSON.stringify({ language: "python", version: "*", files: [{ content: "print('plain')" }] }),
  });
  assert.equal(response.status, 200);
  assert.equal((await response.json()).run.stdout, "plain\n");
});

test("an unknown language or version is a 400 with Piston's message", async () => {
  const unknown = await client.execute({ language: "cobol", version: "*", files: [{ content: "x" }] });
  assert.deepEqual(unknown, { message: "cobol-* runtime is unknown" });
  const response = await fetch(`${server}/api/v2/execute`, {
    method: "POST",
    body: JSON.stringify({ language: "python", version: "2.7", files: [{ content: "print 1" }] }),
  });
  assert.equal(response.status, 400);
  assert.deepEqual(await response.json(), { message: "python-2.7 runtime is unknown" });
});

test("the token never reaches the api's log", { skip: !process.env.RUNBOX_STACK_LOGS }, async () => {
  await client.execute("python", "print('logged')");
  const log = readFileSync(`${process.env.RUNBOX_STACK_LOGS}/api.log`, "utf8");
  // The request was logged, under its redacted path.
  assert.match(log, /\/piston\/\*\*\*\/api\/v2\/execute/);
  assert.equal(log.includes(token), false, "the api log contains the token");
});
