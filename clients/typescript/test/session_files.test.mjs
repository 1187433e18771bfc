// A session's files through the TypeScript client, as built (dist/), against
// a real stack started by clients/with-stack; under Node and under Deno.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";

import { Client, InvalidRequest, NotFound, SessionEnded } from "../dist/index.js";

const env = (name) => globalThis.Deno?.env.get(name) ?? globalThis.process?.env[name];
const client = new Client({ url: env("RUNBOX_URL"), token: env("RUNBOX_TOKEN") });
const text = (bytes) => new TextDecoder().decode(bytes);
const fromBase64 = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
const BINARY = Uint8Array.from({ length: 768 }, (_, i) => i % 256);

const opened = [];
const open = async () => {
  const session = await client.createSession("python");
  opened.push(session);
  return session;
};
afterEach(async () => {
  await Promise.all(opened.splice(0).map((s) => s.close()));
});

test("files go in and out of a session", async () => {
  const session = await open();
  assert.deepEqual(await session.uploadFile("data/in put.csv", "a,b\n1,2\n"), { path: "data/in put.csv", size: 8 });
  assert.equal((await session.uploadFile("blob.bin", BINARY)).size, 768);

  // The session's code sees the uploads in its working directory; what it writes is read back.
  const ran = await session.exec(
    "rows = open('data/in put.csv').read().splitlines()\n" +
      "print(len(rows), len(open('blob.bin', 'rb').read()))\n" +
      "open('data/out é.txt', 'w').write('from the session\\n')",
  );
  assert.deepEqual([ran.exit_code, ran.stdout], [0, "2 768\n"], ran.stderr);
  assert.equal(text(await session.readFile("data/out é.txt")), "from the session\n");
  assert.deepEqual(await session.readFile("blob.bin"), BINARY);

  const home = await session.listFiles();
  assert.deepEqual([home.path, home.truncated], ["", false]);
  const byName = Object.fromEntries(home.files.map((f) => [f.name, f]));
  assert.equal(byName.data.type, "directory");
  assert.deepEqual([byName["blob.bin"].type, byName["blob.bin"].size, byName["blob.bin"].path], ["file", 768, "blob.bin"]);
  const data = await session.listFiles("data");
  assert.deepEqual(data.files.map((f) => f.path).sort(), ["data/in put.csv", "data/out é.txt"]);

  await session.deleteFile("data/in put.csv");
  assert.deepEqual((await session.listFiles("data")).files.map((f) => f.name), ["out é.txt"]);
  await assert.rejects(session.readFile("data/in put.csv"), (e) => e instanceof NotFound && e.code === "no_file");
});

test("file errors are typed", async () => {
  const session = await open();
  await assert.rejects(
    session.uploadFile("../etc/passwd", "x"),
    (e) => e instanceof InvalidRequest && e.status === 400 && e.code === "invalid_path",
  );
  await session.uploadFile("dir/f.txt", "x");
  await assert.rejects(session.readFile("dir"), (e) => e instanceof InvalidRequest && e.code === "not_a_file");
  await assert.rejects(session.listFiles("dir/f.txt"), (e) => e instanceof InvalidRequest && e.code === "not_a_directory");
  await assert.rejects(session.deleteFile("nothing-here"), (e) => e instanceof NotFound && e.code === "no_file");
  await session.destroy();
  await assert.rejects(session.readFile("dir/f.txt"), (e) => e instanceof SessionEnded && e.code === "session_closed");
});

test("an exec takes files and returns what it wrote", async () => {
  const session = await open();
  const ran = await session.exec(
    "n = len(open('in/b.bin', 'rb').read())\nopen('out.txt', 'w').write(open('in/a.txt').read().upper() + str(n))",
    {
      files: [{ path: "in/a.txt", content: "abc" }, { path: "in/b.bin", content: btoa("\x00\x01\x02"), encoding: "base64" }],
      return_files: true,
    },
  );
  assert.equal(ran.exit_code, 0, ran.stderr);
  const out = ran.files.find((f) => f.path === "out.txt");
  assert.deepEqual([text(fromBase64(out.content)), out.size, out.truncated], ["ABC3", 4, false]);
  const again = await session.exec("open('out.txt', 'a').write('!')", { return_files: ["out.txt"] });
  assert.deepEqual(again.files.map((f) => [f.path, text(fromBase64(f.content))]), [["out.txt", "ABC3!"]]);
  assert.equal(text(await session.readFile("in/a.txt")), "abc");
});
