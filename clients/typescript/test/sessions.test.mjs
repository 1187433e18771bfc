// Sessions through the TypeScript client, as built (dist/), against a real
// stack started by clients/with-stack; under Node and under Deno.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";

import { Client, InvalidRequest, NotFound, SessionBusy, SessionEnded } from "../dist/index.js";

const env = (name) => globalThis.Deno?.env.get(name) ?? globalThis.process?.env[name];
const url = env("RUNBOX_URL");
const client = new Client({ url, token: env("RUNBOX_TOKEN") });
const UNKNOWN = "7f6c1a52-0c2e-4a53-9d47-3f1e2b8c9a10";

// Sessions hold a worker slot each: a failed test closes its own, so the
// next tests are not left waiting for a slot.
const opened = [];
const open = async (make) => {
  const session = await make();
  opened.push(session);
  return session;
};
afterEach(async () => {
  await Promise.all(opened.splice(0).map((s) => s.close()));
});

test("a python session keeps state, checkpoints and forks", async () => {
  const session = await open(() => client.createSession("python"));
  assert.deepEqual([session.language, session.status], ["python", "idle"]);
  const first = await session.exec("rows = [i * i for i in range(10)]\nprint(len(rows))");
  assert.deepEqual([first.status, first.exit_code, first.stdout], ["completed", 0, "10\n"]);
  assert.deepEqual([first.session.id, first.session.status], [session.id, "idle"]);
  assert.equal((await session.exec("print(sum(rows))")).stdout, "285\n");
  assert.equal((await session.exec("print(input()[::-1])", { stdin: "abc\n" })).stdout, "cba\n");
  const failed = await session.exec("import sys\nsys.exit(4)");
  assert.deepEqual([failed.status, failed.exit_code], ["completed", 4], "a failing exec is data");

  const checkpoint = await session.checkpoint();
  assert.ok(checkpoint.size_bytes > 0 && checkpoint.expires_at);
  assert.deepEqual((await session.refresh()).checkpoints.map((c) => c.id), [checkpoint.id]);

  const fork = await open(() => session.fork());
  assert.notEqual(fork.id, session.id);
  await session.exec("rows[0] = 'parent'");
  await fork.exec("rows[0] = 'fork'");
  assert.equal((await session.exec("print(rows[0], rows[1])")).stdout, "parent 1\n");
  assert.equal((await fork.exec("print(rows[0], rows[1])")).stdout, "fork 1\n");
  const listed = new Map((await client.listSessions()).map((s) => [s.id, s.status]));
  assert.deepEqual([listed.get(session.id), listed.get(fork.id)], ["idle", "idle"]);
  await fork.close();

  assert.equal((await session.destroy()).status, "closed");
  await assert.rejects(
    session.exec("print(rows)"),
    (e) => e instanceof SessionEnded && e.status === 410 && e.code === "session_closed",
  );
  await session.close(); // already ended: nothing to do

  const restored = await client.withSession(undefined, async (s) => {
    assert.equal(s.language, "python");
    assert.equal((await s.exec("print(rows[0])")).stdout, "0\n");
    return s;
  }, { from_checkpoint: checkpoint.id });
  assert.equal(restored.status, "closed", "withSession destroyed it");
});

test("a javascript session", async () => {
  await client.withSession("javascript", async (session) => {
    assert.equal(session.info.idle_timeout_s, 60);
    await session.exec("let scale = 10; function times(x) { return x * scale }");
    assert.equal((await session.exec("console.log(times(4))")).stdout, "40\n");
    const thrown = await session.exec("throw new Error('boom')");
    assert.equal(thrown.exit_code, 1);
    assert.match(thrown.stderr, /boom/);
    await assert.rejects(
      session.exec("1", { stdin: "x" }),
      (e) => e instanceof InvalidRequest && e.code === "invalid_field",
    );
    assert.equal((await session.exec("console.log(scale)")).stdout, "10\n");
  }, { idle_timeout_s: 60 });
});

test("session errors are typed and carry the server's code", async () => {
  await assert.rejects(
    client.execInSession(UNKNOWN, "print(1)"),
    (e) => e instanceof NotFound && e.status === 404 && e.code === "no_session",
  );
  await assert.rejects(client.session("not-an-id"), (e) => e instanceof NotFound && e.code === "no_session");
  await assert.rejects(
    client.createSession(undefined, { from_checkpoint: UNKNOWN }),
    (e) => e instanceof NotFound && e.code === "no_checkpoint",
  );
  await assert.rejects(client.createSession("typescript"), (e) => e instanceof InvalidRequest && e.code === "invalid_field");

  // Another token's session does not exist for this one.
  const other = new Client({ url, token: env("RUNBOX_OTHER_TOKEN") });
  await client.withSession("python", async (mine) => {
    await mine.exec("secret = 42");
    for (const call of [
      () => other.execInSession(mine.id, "print(secret)"),
      () => other.getSession(mine.id),
      () => other.destroySession(mine.id),
      () => other.forkSession(mine.id),
    ]) {
      await assert.rejects(call(), (e) => e instanceof NotFound && e.code === "no_session");
    }
    assert.ok(!(await other.listSessions()).some((s) => s.id === mine.id));
    assert.equal((await mine.exec("print(secret)")).stdout, "42\n");
  });
});

test("a busy session is refused at once, not retried", async () => {
  await client.withSession("python", async (session) => {
    await session.exec("import time");
    const first = session.exec("t = time.time()\nwhile time.time() - t < 3: pass");
    await new Promise((resolve) => setTimeout(resolve, 800));
    const started = Date.now();
    await assert.rejects(
      client.execInSession(session.id, "print(1)"),
      (e) => e instanceof SessionBusy && e.status === 409 && e.code === "session_busy",
    );
    assert.ok(Date.now() - started < 1000, "refused at once");
    assert.equal((await first).exit_code, 0);
  });
});
