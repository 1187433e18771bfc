// runbox's /mcp through the official TypeScript SDK, against a real stack
// started by clients/with-stack (RUNBOX_URL, RUNBOX_TOKEN).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL("/mcp", process.env.RUNBOX_URL);
const token = process.env.RUNBOX_TOKEN;

async function connect(bearer) {
  const client = new Client({ name: "runbox-mcp-test", version: "0.0.0" });
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  });
  await client.connect(transport);
  return client;
}

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

describe("runbox /mcp with @modelcontextprotocol/sdk", () => {
  let client;
  before(async () => {
    client = await connect(token);
  });
  after(async () => {
    await client?.close();
  });

  test("the handshake names the server", () => {
    assert.equal(client.getServerVersion()?.name, "runbox");
    assert.ok(client.getServerCapabilities()?.tools, "tools capability");
  });

  test("run_code is listed, says what the sandbox lacks, and declares its output", async () => {
    const { tools } = await client.listTools();
    const runCode = tools.find((t) => t.name === "run_code");
    assert.ok(runCode, `run_code among ${tools.map((t) => t.name)}`);
    assert.match(runCode.description, /no network|cannot: reach the network/i);
    assert.match(runCode.description, /Nothing persists between run_code calls/);
    assert.match(runCode.description, /pytest/);
    assert.deepEqual(runCode.inputSchema.required, ["language", "code"]);
    assert.deepEqual(runCode.inputSchema.properties.language.enum, ["python", "javascript", "typescript"]);
    assert.ok(runCode.outputSchema?.properties?.exit_code, "outputSchema names exit_code");
  });

  // callTool checks structuredContent against the declared outputSchema,
  // so each of these also checks that the two agree.
  const programs = [
    ["python", "import sys\nprint(sum(map(int, sys.stdin.read().split())))", "2 3 4", "9\n"],
    ["javascript", "console.log([1, 2, 3].map((x) => x * 2).join(','))", undefined, "2,4,6\n"],
    ["typescript", "const greet = (name: string): string => `hi ${name}`;\nconsole.log(greet('ts'))", undefined, "hi ts\n"],
  ];
  for (const [language, code, stdin, expected] of programs) {
    test(`run_code runs ${language}`, async () => {
      const args = { language, code, ...(stdin === undefined ? {} : { stdin }) };
      const result = await client.callTool({ name: "run_code", arguments: args });
      assert.equal(result.isError, false, text(result));
      const run = result.structuredContent;
      assert.equal(run.status, "completed");
      assert.equal(run.exit_code, 0);
      assert.equal(run.stdout, expected);
      assert.equal(run.stderr, "");
      assert.equal(typeof run.duration_ms, "number");
      assert.match(run.id, /^[0-9a-f-]{36}$/);
      assert.ok(text(result).includes(expected.trim()), text(result));
    });
  }

  test("a failing program is a tool error with its exit code and stderr", async () => {
    const code = "console.error('bad things'); Deno.exit(3)";
    const result = await client.callTool({ name: "run_code", arguments: { language: "javascript", code } });
    assert.equal(result.isError, true);
    assert.equal(result.structuredContent.status, "completed");
    assert.equal(result.structuredContent.exit_code, 3);
    assert.match(result.structuredContent.stderr, /bad things/);
    assert.match(text(result), /exited with code 3/);
  });

  test("a program past its time limit is a tool error with status timeout", async () => {
    const args = { language: "python", code: "while True:\n    pass", timeout_ms: 500 };
    const result = await client.callTool({ name: "run_code", arguments: args });
    assert.equal(result.isError, true);
    assert.equal(result.structuredContent.status, "timeout");
    assert.equal(result.structuredContent.exit_code, null);
  });

  test("bad arguments are tool errors that say what to fix", async () => {
    const cases = [
      [{ language: "ruby", code: "puts 1" }, /python, javascript or typescript/],
      [{ language: "python", code: "print(1)", timeout_ms: 10_000_000 }, /timeout_ms must be .* from 1 to \d+/],
      [{ language: "python", code: "print(1)", timeout: 5 }, /unknown argument "timeout"; run_code takes/],
      [{ language: "python" }, /code is required/],
    ];
    for (const [args, message] of cases) {
      const result = await client.callTool({ name: "run_code", arguments: args });
      assert.equal(result.isError, true, JSON.stringify(args));
      assert.match(text(result), message);
      assert.equal(result.structuredContent, undefined);
    }
  });

  test("a session keeps state across calls, forks, and ends", async () => {
    const created = await client.callTool({ name: "create_session", arguments: { language: "javascript" } });
    assert.equal(created.isError, false, text(created));
    const id = created.structuredContent.id;
    const run = (sessionId, code) => client.callTool({ name: "run_in_session", arguments: { session_id: sessionId, code } });
    await run(id, "const seen = []; function note(x) { seen.push(x); return seen.length }");
    const noted = await run(id, "console.log(note('a'), note('b'))");
    assert.equal(noted.structuredContent.stdout, "1 2\n", text(noted));
    const fork = await client.callTool({ name: "fork_session", arguments: { session_id: id } });
    const forkId = fork.structuredContent.id;
    const inFork = await run(forkId, "note('c'); console.log(seen.join(''))");
    const inParent = await run(id, "console.log(seen.join(''))");
    assert.equal(inFork.structuredContent.stdout, "abc\n", text(inFork));
    assert.equal(inParent.structuredContent.stdout, "ab\n", text(inParent));
    for (const sessionId of [id, forkId]) {
      const ended = await client.callTool({ name: "destroy_session", arguments: { session_id: sessionId } });
      assert.equal(ended.structuredContent.status, "closed", text(ended));
    }
    const gone = await run(id, "1");
    assert.equal(gone.isError, true);
    assert.match(text(gone), /session_closed/);
  });

  test("files move in and out of a session", async () => {
    const { tools } = await client.listTools();
    for (const name of ["upload_file", "read_file", "list_files"]) {
      assert.ok(tools.some((t) => t.name === name), `${name} among ${tools.map((t) => t.name)}`);
    }
    const created = await client.callTool({ name: "create_session", arguments: { language: "python" } });
    const id = created.structuredContent.id;
    const tool = (name, args) => client.callTool({ name, arguments: { session_id: id, ...args } });
    const uploaded = await tool("upload_file", { path: "in/a.txt", content: "abc" });
    assert.deepEqual(uploaded.structuredContent, { path: "in/a.txt", size: 3 }, text(uploaded));
    const ran = await tool("run_in_session", {
      code: "open('out.bin', 'wb').write(open('in/a.txt', 'rb').read() + open('b.bin', 'rb').read())",
      files: [{ path: "b.bin", content: "/w==", encoding: "base64" }],
      return_files: true,
    });
    assert.equal(ran.isError, false, text(ran));
    assert.equal(ran.structuredContent.files.find((f) => f.path === "out.bin")?.content, "YWJj/w==", text(ran));
    const read = await tool("read_file", { path: "out.bin" });
    assert.deepEqual(read.structuredContent, { path: "out.bin", size: 4, encoding: "base64", content: "YWJj/w==" });
    const readText = await tool("read_file", { path: "in/a.txt" });
    assert.deepEqual([readText.structuredContent.encoding, readText.structuredContent.content], ["utf8", "abc"]);
    const listed = await tool("list_files", { path: "in" });
    assert.deepEqual(listed.structuredContent.files.map((f) => [f.name, f.type, f.size]), [["a.txt", "file", 3]]);
    const missing = await tool("read_file", { path: "in/nothing" });
    assert.equal(missing.isError, true);
    assert.match(text(missing), /^no_file: /);
    await tool("destroy_session", {});
  });

  test("a wrong token gets 401", async () => {
    await assert.rejects(connect("not-the-token-0123456789"), (error) => {
      assert.ok(error instanceof StreamableHTTPError, `${error}`);
      assert.equal(error.code, 401);
      return true;
    });
  });
});
