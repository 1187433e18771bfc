// Harness for JavaScript and TypeScript jobs.
//
// Usage: js.mjs                                     (a single-use child)
//        js.mjs shared|session <frames> <results>   (see protocol.mjs)
//
// A single-use child starts with no read access beyond the job's files. The
// program arrives on stdin (see protocol.mjs) and is imported from a blob:
// URL, so its stack traces name `blob:` rather than a path, and TypeScript
// types are stripped by Deno itself. The program runs in this realm, as the
// process's main module would: its event loop is the process's, and the
// process exits when it is done, with the program's status. The harness
// keeps nothing after the program starts: it claims an allocation failure
// when it sees one, and the runner checks the claim (see protocol.mjs).
//
// A shared-lane child runs each job of one batch in a fresh Worker
// (`js-job.mjs`); a session child runs its execs in one Worker that lives
// as long as the session (`js-session.mjs`), and keeps read and write
// access to its home, its working directory, alone. This realm holds the
// channel and the nonces, and no job has a reference to it.
//
// The runner's last argument, `egress=<socket>`, when given, is the egress
// proxy's socket (egress.mjs); a job whose frame says `egress` gets a
// `fetch` through it (egress-fetch.mjs), in this realm or its Worker's.
import { connectEgress, servePort } from "./egress.mjs";
import { egressFetch } from "./egress-fetch.mjs";
import {
  awaitJob,
  Channel,
  claimOutOfMemory,
  dropPersistentStorage,
  endOutput,
  exit,
  hideHostDetails,
  isAllocationFailure,
  jsMemoryInUse,
  moduleUrl,
  readHarnessFile,
  watchRealm,
  withoutHarnessFrames,
  writeError,
} from "./protocol.mjs";

const harnessDir = new URL(".", import.meta.url).href;
const PortPair = MessageChannel;
const createObjectURL = URL.createObjectURL;
const egressPath = Deno.args.find((arg) => arg.startsWith("egress="))?.slice("egress=".length);
const [mode, framesPath, resultsPath] = Deno.args.filter((arg) => !arg.startsWith("egress="));

dropPersistentStorage();
const egress = await connectEgress(egressPath);
Deno.permissions.revokeSync({ name: "net" });
if (mode === "shared" || mode === "session") {
  const channel = new Channel(framesPath, resultsPath);
  const source = readHarnessFile(mode === "shared" ? "js-job.mjs" : "js-session.mjs");
  const fetchSource = readHarnessFile("egress-fetch.mjs");
  if (mode === "shared") {
    Deno.permissions.revokeSync({ name: "read" });
    Deno.permissions.revokeSync({ name: "write" });
  } else {
    keepOnlyTheHome();
  }
  // Deno redefines a global (queueMicrotask) the first time a message
  // crosses a port: done once now, so that a job's first request through
  // the egress port does not change this realm's fingerprint (watchRealm).
  if (egress) await portRoundTrip();
  if (mode === "shared") await serveShared(channel, source, fetchSource);
  else await serveSession(channel, moduleUrl(source), fetchSource);
}
// A single-use child keeps reading its job's files, and nothing else.
if (egressPath) Deno.permissions.revokeSync({ name: "read", path: egressPath });
Deno.permissions.revokeSync({ name: "write" });

const job = awaitJob();
egress?.begin(job.egress_tag);
if (job.egress && egress) globalThis.fetch = egressFetch((meta, body) => egress.send(meta, body));
const typescript = job.language === "typescript";
hideHostDetails(typescript ? "file:///main.ts" : "file:///main.js", job.args ?? [], /\bprocess\b/.test(job.code));
const url = createObjectURL(new Blob([job.code], { type: typescript ? "application/typescript" : "text/javascript" }));
const nonce = job.nonce;
const halfCap = (job.memory_mb * 1024 * 1024) / 2;

/** Claims an out-of-memory ending if `error` looks like a real allocation failure. */
function failOnAllocation(error) {
  if (isAllocationFailure(error) && jsMemoryInUse() >= halfCap) {
    writeError(`error: out of memory: ${error.message}\n`);
    claimOutOfMemory(nonce);
  }
}
globalThis.addEventListener("error", (event) => failOnAllocation(event.error));
globalThis.addEventListener("unhandledrejection", (event) => failOnAllocation(event.reason));

try {
  await import(url);
} catch (error) {
  failOnAllocation(error);
  let text;
  try {
    text = withoutHarnessFrames(error?.stack ?? error, harnessDir);
  } catch {
    text = "(the error could not be printed)";
  }
  writeError(`error: Uncaught ${text}\n`);
  exit(1);
}

/**
 * A session keeps read and write access to its home (its working
 * directory) and loses the rest: the harness's files, the channel, the
 * egress socket. Each is revoked by path, then checked gone, since a
 * revocation that missed would leave it to the session's code.
 */
function keepOnlyTheHome() {
  const harnessPath = new URL(".", import.meta.url).pathname;
  const revoked = [
    ["read", harnessPath],
    ["read", framesPath],
    ["write", resultsPath],
    ...(egressPath ? [["read", egressPath], ["write", egressPath]] : []),
  ];
  for (const [name, path] of revoked) Deno.permissions.revokeSync({ name, path });
  for (const [name, path] of [...revoked, ["read", "/"], ["write", "/"]]) {
    if (Deno.permissions.querySync({ name, path }).state === "granted") {
      throw new Error(`the session still has ${name} access to ${path}`);
    }
  }
}

/**
 * The shared lane: for each frame, a new Worker runs the program and posts
 * its exit status (only its first message counts); the Worker is then
 * terminated, the job's output ended and its report sent. A job cannot
 * reach the channel, this realm, or the Worker of any other job.
 */
async function serveShared(channel, jobSource, fetchSource) {
  const realm = watchRealm();
  channel.report({ kind: "ready" });
  for (;;) {
    const frame = channel.readFrame();
    realm.begin();
    egress?.begin(frame.egress_tag);
    // A URL of the job's own, revoked once its Worker is up: the blob store
    // is the process's, and a job must not be able to break the next one's.
    const jobUrl = moduleUrl(jobSource);
    const worker = new Worker(jobUrl, { type: "module", name: "runbox-job" });
    const ready = await untilEnded(worker);
    URL.revokeObjectURL(jobUrl);
    const ended = untilEnded(worker);
    // The job's time, and the runner's count of its memory, start once its
    // Worker is up.
    channel.report({ kind: "started" });
    if (ready.status === 1) {
      // The Worker failed before the job: its error is on stderr.
      worker.terminate();
      endOutput(frame.nonce);
      channel.report({ kind: "end", status: 1, clean: realm.isClean() });
      continue;
    }
    // The job's way to the egress proxy, closed with the job.
    const port = frame.egress && egress ? throughEgress() : null;
    const job = { language: frame.language, code: frame.code, args: frame.args ?? [] };
    if (port) job.egress = { source: fetchSource, port: port.theirs };
    worker.postMessage(job, port ? [port.theirs] : []);
    const { status, allocation } = await ended;
    port?.close();
    if (allocation) {
      // Left running, so that the runner measures the memory it holds.
      endOutput(frame.nonce);
      channel.report({ kind: "end", status, clean: false, memory: true });
      continue;
    }
    worker.terminate();
    endOutput(frame.nonce);
    channel.report({ kind: "end", status, clean: realm.isClean() });
  }
}

/**
 * A session: one Worker, the session's realm, runs every exec. The open
 * frame's `replay` (a restored session's execs) runs first, each under its
 * own timeout; their output is the runner's to drop.
 */
async function serveSession(channel, sessionUrl, fetchSource) {
  const worker = new Worker(sessionUrl, { type: "module", name: "runbox-session" });
  // Its first message, posted before any code of the session's has run.
  await new Promise((resolve) => (worker.onmessage = resolve));
  const ask = asker(worker);
  let opened = false;
  const openEgress = (frame) => {
    if (opened || !frame.egress || !egress) return;
    opened = true;
    const port = throughEgress();
    worker.postMessage({ op: "egress", egress: { source: fetchSource, port: port.theirs } }, [port.theirs]);
  };
  const exec = async (code, memoryMb, timeoutMs) => {
    const reply = await ask({ op: "run", code: String(code), memory_mb: memoryMb }, timeoutMs);
    if (reply === null) return { status: 1, overran: true };
    // Deno.exit or process.exit: the session's process ends with the code.
    if (reply.exit === true) exit(report(reply).status);
    return report(reply);
  };
  channel.report({ kind: "ready" });
  const open = channel.readFrame();
  openEgress(open);
  const replay = Array.isArray(open.replay) ? open.replay : [];
  for (let i = 0; i < replay.length; i++) {
    const { code, timeout_ms: timeoutMs } = replay[i];
    const { overran } = await exec(code, open.memory_mb, timeoutMs);
    if (overran) {
      endOutput(open.nonce);
      channel.report({ kind: "end", status: 1, error: `replaying exec ${i + 1} took longer than its ${timeoutMs} ms` });
      // The exec may still be running; the runner ends this child.
      return await new Promise(() => {});
    }
  }
  endOutput(open.nonce);
  channel.report({ kind: "end", status: 0 });
  for (;;) {
    const frame = await channel.nextFrame();
    channel.report({ kind: "started" });
    egress?.begin(frame.egress_tag);
    const { status, allocation } = await exec(frame.code, frame.memory_mb, 0);
    egress?.clear();
    endOutput(frame.nonce);
    channel.report({ kind: "end", status, ...(allocation ? { memory: true } : {}) });
  }
}

/**
 * Messages a session's `worker` one request at a time; each promise gets
 * the Worker's reply to it, or null once `timeoutMs` (when above 0) has
 * passed. The session's code runs in the Worker and can post anything,
 * whenever it likes, and call the Worker's own handler: a reply is taken
 * only if it bears the request's `seq`, 128 random bits that exist nowhere
 * before the request is sent, so no message posted before it (a
 * program's own `postMessage`, as code written for a browser's Worker
 * calls it; a reply to a request the session made up, or one it saw and
 * answers again) passes for its reply. Replies are structured clones,
 * plain data, read here as such (`report`). The same defence as a Python
 * session's (`asker` in python.mjs).
 */
function asker(worker) {
  let waiting = null;
  worker.onmessage = ({ data }) => {
    if (!waiting || data?.seq !== waiting.seq) return;
    const { resolve } = waiting;
    waiting = null;
    resolve(data);
  };
  // An error nobody caught ends the Worker, and when relative to the
  // request in hand cannot be told (the session can throw one after its
  // exec was answered, and it is seen only once the next request is
  // sent): the session's process ends here, as if it had died, and takes
  // no reply from it.
  worker.onerror = (event) => {
    event.preventDefault();
    writeError(`\nrunbox: the session's interpreter ended: ${String(event.message).slice(0, 8192)}\n`);
    exit(1);
  };
  return (message, timeoutMs = 0) =>
    new Promise((resolve) => {
      const seq = [...crypto.getRandomValues(new Uint32Array(4))].map((n) => n.toString(16)).join("-");
      // Until the reply comes, the process stays up: a Worker that closed
      // itself never replies, and with nothing else pending Deno would
      // exit as if the exec had ended. The runner ends it at the exec's
      // limit instead, as an exec that cannot be interrupted.
      const alive = setInterval(() => {}, 60_000);
      let timer = null;
      const settle = (data) => {
        waiting = null;
        clearInterval(alive);
        clearTimeout(timer);
        resolve(data);
      };
      if (timeoutMs > 0) timer = setTimeout(() => settle(null), timeoutMs);
      waiting = { seq, resolve: settle };
      worker.postMessage({ ...message, seq });
    });
}

/**
 * A channel from a job's Worker to the egress proxy: `theirs` goes to the
 * Worker; `close` ends it, and drops what the job still waits for.
 */
function throughEgress() {
  const { port1, port2 } = new PortPair();
  servePort(port1, egress);
  return {
    theirs: port2,
    close() {
      port1.close();
      egress.clear();
    },
  };
}

/** One message from one end of a new MessageChannel to the other. */
async function portRoundTrip() {
  const { port1, port2 } = new PortPair();
  const delivered = new Promise((resolve) => (port2.onmessage = resolve));
  port1.postMessage(0);
  await delivered;
  port1.close();
  port2.close();
}

/** The first report `worker` posts, or its first uncaught error. */
function untilEnded(worker) {
  return new Promise((resolve) => {
    let done = false;
    const end = (data) => {
      if (done) return;
      done = true;
      worker.onmessage = null;
      resolve(report(data));
    };
    worker.onmessage = ({ data }) => end(data);
    worker.onerror = (event) => {
      event.preventDefault();
      writeError(`error: Uncaught ${event.message}\n`);
      end({ status: 1 });
    };
  });
}

/** A job Worker's report as plain values: it comes from the job's realm. */
function report(data) {
  if (data?.ready === true) return { status: 0, allocation: false };
  const status = typeof data?.status === "number" ? data.status & 0xff : 1;
  return { status, allocation: data?.allocation === true };
}
