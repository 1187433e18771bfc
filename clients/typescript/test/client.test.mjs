// The TypeScript client, as built (dist/), against a real stack started by
// clients/with-stack. Runs under Node (`node --test`) and under Deno
// (`deno test`), both through `node:test`.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Client,
  InvalidRequest,
  isDone,
  jobSpec,
  NotFound,
  TransportError,
  Unauthorized,
  Unavailable,
} from "../dist/index.js";

const env = (name) => globalThis.Deno?.env.get(name) ?? globalThis.process?.env[name];
const url = env("RUNBOX_URL");
const token = env("RUNBOX_TOKEN");
const client = new Client({ url, token });

test("runs each language", async () => {
  assert.equal((await client.run("print(6 * 7)")).stdout, "42\n");
  assert.equal((await client.run("console.log(6 * 7)", "javascript")).stdout, "42\n");
  const job = await client.run("const n: number = 42; console.log(n)", "typescript");
  assert.deepEqual([job.status, job.exit_code, job.stdout], ["completed", 0, "42\n"]);
  assert.ok(isDone(job));
});

test("stdin, args, files and a verdict", async () => {
  const job = await client.run("import sys; print(input(), sys.argv[1:], open('data.txt').read())", "python", {
    stdin: "hello\n",
    args: ["-v"],
    files: [{ path: "data.txt", content: "from a file" }],
  });
  assert.equal(job.stdout, "hello ['-v'] from a file\n");
  assert.equal((await client.run("print(1)", "python", { expected_stdout: "2\n" })).verdict, "wrong_answer");
});

test("a failing program is data, not an exception", async () => {
  const job = await client.run("import sys; sys.exit(3)");
  assert.deepEqual([job.status, job.exit_code], ["completed", 3]);
  const looping = await client.run("while (true) {}", "js", { timeout_ms: 500 });
  assert.equal(looping.status, "timeout");
});

test("submit, get, wait, cancel and an idempotent retry", async () => {
  const id = await client.submit("console.log('later')", "js");
  assert.equal((await client.wait(id)).stdout, "later\n");
  const slow = await client.submit("await new Promise((r) => setTimeout(r, 20000))", "js", { timeout_ms: 30000 });
  await client.cancel(slow);
  assert.equal((await client.wait(slow, 10)).status, "cancelled");
  const first = await client.submit("print(1)", "python", { idempotencyKey: "ts-client-retry" });
  assert.equal(await client.submit("print(1)", "python", { idempotencyKey: "ts-client-retry" }), first);
});

test("errors are typed and carry the server's code", async () => {
  await assert.rejects(client.submit("x", "cobol"), (e) => e instanceof InvalidRequest && e.code === "invalid_field");
  await assert.rejects(
    client.get("00000000-0000-4000-8000-000000000000"),
    (e) => e instanceof NotFound && e.status === 404,
  );
  const stranger = new Client({ url, token: "not-a-token-at-all-0123" });
  await assert.rejects(stranger.run("print(1)"), (e) => e instanceof Unauthorized && e.code === "unauthorized");
  const id = await client.submit("print(1)");
  const other = new Client({ url, token: env("RUNBOX_OTHER_TOKEN") });
  await assert.rejects(other.get(id), NotFound);
  const nowhere = new Client({ url: "http://127.0.0.1:9", token, maxRetries: 0 });
  await assert.rejects(nowhere.get("x"), TransportError);
});

test("a full queue is retried after Retry-After, then given up", async () => {
  const tight = new Client({ url: env("RUNBOX_TIGHT_URL"), token });
  await tight.submit("import time; time.sleep(2)");
  const started = Date.now();
  assert.equal((await tight.run("print('got in')")).stdout, "got in\n");
  assert.ok(Date.now() - started >= 1000, "it waited for room");
  const impatient = new Client({ url: env("RUNBOX_TIGHT_URL"), token, maxRetries: 0 });
  await impatient.submit("import time; time.sleep(2)");
  await assert.rejects(impatient.submit("print(1)"), (e) => e instanceof Unavailable && e.code === "queue_full");
  await tight.run("print('drained')");
});

test("batch results stream as jobs finish", async () => {
  const handle = await client.batch([0, 1, 2, 3].map((i) => jobSpec(`print(${i} * ${i})`)), { shared_runtime: true });
  const streamed = new Map();
  for await (const job of handle.results()) streamed.set(job.id, job.stdout);
  assert.deepEqual(streamed, new Map(handle.jobIds.map((id, i) => [id, `${i * i}\n`])));
  const batch = await handle.wait();
  assert.deepEqual([batch.status, batch.size, batch.counts], ["finished", 4, { completed: 4 }]);
  const cancelled = await client.batch([jobSpec("import time; time.sleep(30)", "python", { timeout_ms: 40000 })]);
  await cancelled.cancel();
  assert.equal((await cancelled.wait()).counts.cancelled, 1);
});

test("stream gives output as it is written, then the result", async () => {
  const id = await client.submit(
    "console.log('one'); await new Promise((r) => setTimeout(r, 1500)); console.error('two')",
    "javascript",
  );
  const seen = [];
  for await (const event of client.stream(id)) seen.push({ event, at: Date.now() });
  const first = seen[0];
  const last = seen.at(-1);
  assert.deepEqual(first.event, { kind: "stdout", offset: 0, data: "one\n" });
  assert.equal(last.event.kind, "result");
  assert.ok(last.at - first.at >= 1000, "the first chunk came only at the end");
  assert.equal(last.event.job.stderr, "two\n");
  const again = [];
  for await (const event of client.stream(id)) again.push(event);
  assert.equal(again.filter((e) => e.kind === "stdout").map((e) => e.data).join(""), "one\n");
  await assert.rejects(async () => {
    for await (const _ of client.stream("00000000-0000-4000-8000-000000000000")) { /* none */ }
  }, NotFound);
});
