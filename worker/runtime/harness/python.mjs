// Harness for Python jobs: Pyodide (CPython on WebAssembly) inside Deno.
//
// Usage: python.mjs <pyodide-dir> <memory-snapshot|-> <memory-mb> packages=<url> [egress=<socket>]
//        python.mjs <pyodide-dir> <memory-snapshot|-> <memory-mb> packages=<url> shared|session <frames> <results> [egress=<socket>]
//
// `packages=<url>` is where Pyodide's own packages are loaded from
// (`pyodide_js.loadPackage`), through the egress proxy: only a job whose
// token's rules name that host can load one.
//
// This realm is the harness's: it holds the frames, their nonces and the
// channel to the runner (see protocol.mjs). No program ever runs in it.
//
// Boot reads the Pyodide files, the memory snapshot and the harness's own
// files, which is why this child alone gets --allow-read (scoped to those
// paths). Read access is revoked before READY, so no program ever has it.
//
// - A single-use or shared-lane job runs in a realm of its own: a bare V8
//   context with a Pyodide instance built in it from the wasm module this
//   realm compiled once (see python-realms.mjs and python-realm.js). The
//   context has no Deno API at all. A single-use child builds one while it
//   boots, runs its job and exits with the job's status. A shared child
//   runs job after job, each in a new realm built between jobs, so that
//   nothing but the job itself grows the process while it runs; once a job
//   ends, its realm is retired and collected, and a realm V8 could not free
//   (something of the job's is still pending in it) gets the child replaced.
// - A session child keeps one Worker, the session's interpreter, across
//   execs (python-job.mjs). An exec that runs past its `timeout_ms` gets a
//   KeyboardInterrupt through Pyodide's interrupt buffer, which this
//   realm's timer sets, which is why a session's interpreter runs on a
//   thread of its own; code that does not return to the interpreter
//   (time.sleep, a long C call) is not interrupted, and the runner kills
//   the child a little after the deadline instead.
// - A job whose frame says `egress` (its token has egress rules) gets a
//   `fetch` through the proxy's socket (egress.mjs), which the harness
//   connects to while it boots: in its realm python-fetch.js, in a
//   session's Worker egress-fetch.mjs.
import process from "node:process";

import { connectEgress, servePort } from "./egress.mjs";
import { readAssets } from "./pyodide.mjs";
import { collectGarbage, heapInUse, nextTurn, prepareRealms, PythonRealm } from "./python-realms.mjs";
import {
  awaitJob,
  Channel,
  claimOutOfMemory,
  dropPersistentStorage,
  endOutput,
  exit,
  filesSection,
  listingSection,
  moduleUrl,
  readHarnessFile,
  sendFiles,
  utf8,
  watchRealm,
  writeError,
} from "./protocol.mjs";

const named = (name) => Deno.args.find((arg) => arg.startsWith(`${name}=`))?.slice(name.length + 1);
const egressPath = named("egress");
const packagesUrl = named("packages") ?? "";
const [pyodideDir, snapshotPath, memoryMb, mode, framesPath, resultsPath] = Deno.args.filter(
  (arg) => !/^(egress|packages)=/.test(arg),
);
// Taken before any job runs (see `collected`).
const cpuUsage = process.cpuUsage.bind(process);
const channel = mode ? new Channel(framesPath, resultsPath) : null;

dropPersistentStorage();
const snapshot = snapshotPath === "-" ? null : snapshotPath;
const runner = readHarnessFile("runner.py");
const fetchSources = { realm: readHarnessFile("python-fetch.js"), worker: readHarnessFile("egress-fetch.mjs") };
const egress = await connectEgress(egressPath);
Deno.permissions.revokeSync({ name: "net" });
ignoreJobRealmErrors();

/**
 * A rejected promise or an uncaught error of a job's realm would end the
 * process (Deno's default): it is the program's own business, so it is
 * let go. One of this realm is the harness's bug, and still ends it.
 *
 * A listener that throws leaves the event to Deno's default, which
 * formats the value with `Deno.inspect`, handing a program's custom
 * inspect method this realm's functions; and `instanceof` runs a
 * program's proxy traps (a promise's prototype can be a proxy). So
 * anything the test cannot answer is the job's.
 */
function ignoreJobRealmErrors() {
  const ours = (value) => {
    try {
      return value instanceof Object;
    } catch {
      return false;
    }
  };
  globalThis.addEventListener("unhandledrejection", (event) => {
    if (!ours(event.promise)) event.preventDefault();
  });
  globalThis.addEventListener("error", (event) => {
    if (!ours(event.error)) event.preventDefault();
  });
}

/**
 * A session's Worker (python-job.mjs), ready to open its instance. The
 * `blob:` URLs it starts from are its own and revoked once it is up.
 */
async function sessionWorker(interrupt) {
  const assets = await readAssets(pyodideDir, snapshot);
  const scriptFile = `file://${pyodideDir}/pyodide.asm.js`;
  const urls = [moduleUrl(readHarnessFile("python-job.mjs")), moduleUrl(readHarnessFile("pyodide.mjs")), scriptFile];
  const [jobUrl, loaderUrl, scriptUrl] = urls;
  const worker = new Worker(jobUrl, { type: "module", name: "runbox-python" });
  const realm = { worker, ask: asker(worker) };
  const reply = await realm.ask({
    op: "init",
    assets,
    scriptUrl,
    loaderUrl,
    runner,
    memoryMb: Number(memoryMb),
    interrupt,
  });
  for (const url of urls) if (url.startsWith("blob:")) URL.revokeObjectURL(url);
  if (reply.ok !== true) throw new Error(`the Python runtime did not boot: ${messageOf(reply)}`);
  return realm;
}

/**
 * Messages `worker` one request at a time; each promise gets the Worker's
 * reply to it. The session's code runs in the Worker and can post
 * anything, whenever it likes: a reply is taken only if it bears the
 * request's `seq`, 128 random bits that exist nowhere before the request
 * is sent, so no message posted before it (a program's own `postMessage`,
 * as code written for a browser's Worker calls it; a request the session
 * made up and had answered) passes for its reply. Replies are structured
 * clones, plain data, read here as such.
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
  return (message, transfer = []) =>
    new Promise((resolve) => {
      const seq = [...crypto.getRandomValues(new Uint32Array(4))].map((n) => n.toString(16)).join("-");
      // Until the reply comes, the process stays up: a Worker that closed
      // itself never replies, and with nothing else pending Deno would
      // exit as if the exec had ended. The runner ends it at the exec's
      // limit instead, as an exec that cannot be interrupted.
      const alive = setInterval(() => {}, 60_000);
      waiting = {
        seq,
        resolve: (data) => {
          clearInterval(alive);
          resolve(data);
        },
      };
      worker.postMessage({ ...message, seq }, transfer);
    });
}

/** What a job's realm (or a session's Worker) is given of the frame: never the nonce. */
function jobOf(frame) {
  return {
    code: String(frame.code ?? ""),
    args: Array.isArray(frame.args) ? frame.args.map(String) : [],
    files: Array.isArray(frame.files) ? frame.files : [],
    stdin: String(frame.stdin ?? ""),
    memory_mb: Number(frame.memory_mb),
    return_files: frame.return_files ?? null,
    egress: frame.egress === true,
  };
}

/**
 * A session's checkpoint as its realm sent it (python-job.mjs): exactly
 * two byte arrays, the head and the memory image, or null. The reply is a
 * structured clone, but the session's code could have made it: a hole, a
 * third part, or a part over a SharedArrayBuffer (which the session could
 * still grow while the harness writes it) gets no checkpoint.
 */
function checkpointParts(parts) {
  if (!Array.isArray(parts) || parts.length !== 2) return null;
  const [head, image] = [parts[0], parts[1]];
  const own = (part) => part instanceof Uint8Array && !(part.buffer instanceof SharedArrayBuffer);
  return own(head) && own(image) ? [head, image] : null;
}

/**
 * The reason a reply gives: the session's code can make it anything, so
 * the channel sends it as bytes, cut to the runner's cap (see protocol.mjs).
 */
function messageOf(reply) {
  return typeof reply.message === "string" ? reply.message : "no reason given";
}

/** The refusals a file operation's reply may name (`FileRefusal` in common/src/session.rs). */
const FILE_REFUSALS = [
  "no_file",
  "not_a_file",
  "not_a_directory",
  "link",
  "files_full",
  "too_many_files",
  "too_large",
  "exists",
];

/**
 * One file operation of the session's files API, done by its Worker (see
 * `fileOp` in python-job.mjs) and answered here: a file's bytes or a
 * listing section in a `file` report, then the end, with the refusal's
 * name as its error when refused. The upload moves to the Worker. The
 * reply is plain data the session's code could have made: it is rebuilt
 * field by field, and what is not what the Worker sends fails the step.
 */
async function serveFile(realm, frame, content) {
  const action = String(frame.action);
  const limits = {
    max_file: Number(frame.max_file),
    max_total: Number(frame.max_total),
    max_count: Number(frame.max_count),
    max_entries: Number(frame.max_entries),
  };
  const request = { op: "file", action, path: String(frame.path ?? ""), to: String(frame.to ?? ""), content, limits };
  const reply = await realm.ask(request, content.length > 0 ? [content.buffer] : []);
  let end = { kind: "end", status: 0 };
  if (reply.ok !== true) {
    const refusal = FILE_REFUSALS.find((name) => name === reply.code);
    end = { kind: "end", status: 1, error: refusal ?? `the session did not do it: ${messageOf(reply)}` };
  } else if (action === "get") {
    const parts = Array.isArray(reply.parts) ? reply.parts : [];
    const bytes = parts[0];
    const own = bytes instanceof Uint8Array && !(bytes.buffer instanceof SharedArrayBuffer);
    if (parts.length === 1 && own && bytes.length <= limits.max_file) channel.report({ kind: "file" }, bytes);
    else end = { kind: "end", status: 1, error: "the session's reply was not a file" };
  } else if (action === "list" || action === "stat") {
    const listed = listedEntries(reply.entries, limits.max_entries);
    const truncated = reply.truncated === true || listed?.skipped === true;
    if (listed) channel.report({ kind: "file" }, listingSection({ entries: listed.entries, truncated }));
    else end = { kind: "end", status: 1, error: "the session's reply was not a listing" };
  }
  endOutput(frame.nonce);
  channel.report(end);
}

/**
 * A listing's entries as the Worker sends them, rebuilt, or null if any
 * is not what it sends; a name past 255 bytes is left out (`skipped`).
 */
function listedEntries(sent, max) {
  if (!Array.isArray(sent) || sent.length > max) return null;
  const entries = [];
  let skipped = false;
  for (const entry of sent) {
    const { name, type, size, mtime } = entry ?? {};
    const number = (n) => Number.isSafeInteger(n) && n >= 0;
    if (typeof name !== "string" || ![0, 1, 2].includes(type) || !number(size) || !number(mtime)) return null;
    const bytes = utf8(name);
    if (bytes.length > 255) skipped = true;
    else entries.push({ name: bytes, type, size, mtime });
  }
  return { entries, skipped };
}

/** A session exec's reply as plain values. */
function resultOf(reply) {
  return {
    status: typeof reply.status === "number" ? reply.status & 0xff : 1,
    memoryError: reply.memoryError === true,
  };
}

/** A new job realm (see python-realms.mjs), with the memory `previous`'s job left if it can. */
function newRealm(assets, previous = null) {
  return PythonRealm.boot(assets, Number(memoryMb), runner, packagesUrl, previous);
}

/**
 * The files a job's realm says it wrote, rebuilt field by field from
 * what it sent (JSON it made, any value at all), within what the frame
 * allowed, as `filesSection` takes them: names and contents as bytes. A
 * file that is not what the realm's harness sends (a name past 255 bytes,
 * content that is not base64), or past the frame's count or bytes, is
 * left out, and the section says so.
 */
function filesOf(sent, { max_files: maxFiles, max_bytes: maxBytes }) {
  const files = [];
  let truncated = sent?.truncated === true || !Array.isArray(sent?.files);
  let budget = maxBytes;
  for (const file of Array.isArray(sent?.files) ? sent.files : []) {
    const { path, content, size } = file ?? {};
    const name = typeof path === "string" ? utf8(path) : null;
    const bytes = typeof content === "string" ? fromBase64(content) : null;
    const valid = name !== null && name.length <= 255 && bytes !== null && Number.isSafeInteger(size) && size >= 0;
    if (!valid || files.length === maxFiles || bytes.length > budget) {
      truncated = true;
      continue;
    }
    budget -= bytes.length;
    files.push({ name, content: bytes, size, truncated: file.truncated === true });
  }
  return { files, truncated };
}

/** The bytes standard base64 `text` holds, or null if it is not base64. */
function fromBase64(text) {
  try {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  } catch {
    return null;
  }
}

// Not awaited at the top level: a module still evaluating when the event
// loop runs dry makes Deno exit, before a job that stalled can be ended
// (see `PythonRealm.run`).
const serving = mode === "session" ? serveSession() : mode ? serveShared() : serveOne();
serving.catch((error) => {
  writeError(`runbox: the Python harness failed: ${error?.stack ?? error}\n`);
  exit(1);
});

async function serveOne() {
  const assets = await prepareRealms(pyodideDir, snapshot, readHarnessFile("python-realm.js"), fetchSources.realm);
  const realm = await newRealm(assets);
  Deno.permissions.revokeSync({ name: "read" });
  const frame = awaitJob();
  egress?.begin(frame.egress_tag);
  const { status, memoryError, files } = await realm.run(jobOf(frame), egress);
  // The realm is left as it is: the runner measures what it holds.
  if (memoryError) claimOutOfMemory(frame.nonce);
  if (frame.return_files) sendFiles(frame.nonce, filesOf(files, frame.return_files));
  exit(status);
}

async function serveShared() {
  const assets = await prepareRealms(pyodideDir, snapshot, readHarnessFile("python-realm.js"), fetchSources.realm);
  let next = await newRealm(assets);
  Deno.permissions.revokeSync({ name: "read" });
  Deno.permissions.revokeSync({ name: "write" });
  const fingerprint = watchRealm();
  channel.report({ kind: "ready" });
  for (;;) {
    // A blocking read: the next realm is built before it, or its boot's
    // later steps would wait for the frame.
    const frame = channel.readFrame();
    let realm = next;
    next = null;
    // The job's time, and the runner's count of its memory, start now.
    egress?.begin(frame.egress_tag);
    channel.report({ kind: "started" });
    fingerprint.begin();
    const heapBefore = heapInUse();
    const { status, memoryError, files } = await realm.run(jobOf(frame), egress);
    // The job's memory, measured here, where it has no reference: its
    // instance's wasm memory (its peak) and what the heap grew by while
    // it ran (its realm's objects; not a peak, which V8 does not keep).
    // Nothing the job sent takes part, so it cannot set this figure; the
    // runner also takes the kernel's count, and reports the larger.
    const memoryBytes = realm.memoryBytes() + Math.max(0, heapInUse() - heapBefore);
    // The program has ended: the runner's count of its CPU stops here,
    // before the harness collects its realm.
    channel.report({ kind: "ran" });
    if (memoryError) {
      // Left as it is, so that the runner measures the memory it holds.
      endOutput(frame.nonce);
      channel.report({ kind: "end", status, clean: false, memory: true, memory_bytes: memoryBytes });
      return await new Promise(() => {});
    }
    realm.retire();
    if (frame.return_files) channel.report({ kind: "files" }, filesSection(filesOf(files, frame.return_files)));
    endOutput(frame.nonce);
    // The job's result goes out now; its realm is collected after, while
    // the runner waits for `retired` before it sends this child another
    // job, and ends the child if that does not come in time.
    channel.report({ kind: "end", status, clean: fingerprint.isClean(), memory_bytes: memoryBytes });
    // Nothing of the job's may outlive it (see `collected`).
    const retired = realm;
    realm = null;
    const clean = (await collected(retired)) && fingerprint.isClean();
    // The next job's realm is built now, between jobs, and before the
    // report, so that the runner counts it in the child's memory before
    // the next job and not as that job's.
    if (clean) next = await newRealm(assets, retired);
    channel.report({ kind: "retired", clean });
    if (!clean) return await new Promise(() => {});
  }
}

/**
 * CPU a retired realm may use in the waits of its collection before its
 * child is retired. Pyodide's own finalization callbacks may run there;
 * work a job left pending (a promise chain, a compile) takes more.
 */
const LEFTOVER_CPU_MICROS = 20_000;

/**
 * Whether V8 has freed `realm`, retired and no longer referenced, with
 * nothing of its job's run since the job's end beyond a trace. After a
 * full collection, a realm V8 could not free still has something of the
 * job's pending. One mark-compact usually frees it; a second, thorough
 * collection is tried before the child is given up (on a loaded machine a
 * finalization registry's cleanup, which holds the realm, may not have run
 * by the first, and a plain mark-compact now and then leaves a realm a
 * memory-reducing one frees). A WeakRef reads its target as alive until
 * the turn after a collection, hence the waits; and reading it alive keeps
 * it alive to the end of that turn, so the second collection waits for the
 * next turn, or it could never free the realm.
 *
 * No code of the job runs between its end and the first collection, nor
 * after a collection that freed its realm; in the waits after a first
 * collection that missed it, what the job left pending may run, which
 * no job's CPU time counts: more than `LEFTOVER_CPU_MICROS` of the
 * process's CPU there, less the collections' own, and the child is
 * retired.
 */
async function collected(realm) {
  const start = cpuMicros();
  let collecting = 0;
  for (let attempt = 0; attempt < 2; attempt++) {
    if (attempt > 0) await nextTurn();
    const before = cpuMicros();
    collectGarbage({ thorough: attempt > 0 });
    collecting += Math.max(0, cpuMicros() - before);
    await nextTurn();
    if (realm.isGone()) return attempt === 0 || cpuMicros() - start - collecting <= LEFTOVER_CPU_MICROS;
  }
  return false;
}

/** The process's CPU time so far (user and system, every thread), in microseconds. */
function cpuMicros() {
  const { user, system } = cpuUsage();
  return user + system;
}

async function serveSession() {
  // Byte 0 is Pyodide's interrupt buffer, which the Worker's instance reads.
  const interrupt = new SharedArrayBuffer(1);
  const flag = new Uint8Array(interrupt);
  // The runner sends SIGINT to stop the exec running (a cancelled exec):
  // the code gets a KeyboardInterrupt, as at its timeout, and the session
  // lives on. Between execs there is nothing to stop.
  let running = false;
  Deno.addSignalListener("SIGINT", () => {
    if (running) Atomics.store(flag, 0, 2);
  });
  const realm = await sessionWorker(interrupt);
  Deno.permissions.revokeSync({ name: "read" });
  Deno.permissions.revokeSync({ name: "write" });
  channel.report({ kind: "ready" });
  const open = channel.readFrame();
  const saved = channel.readBytes(Number(open.checkpoint_bytes ?? 0));
  // A session whose token has egress rules gets a `fetch` through the proxy.
  let egressPort = null;
  if (open.egress === true && egress) {
    const { port1, port2 } = new MessageChannel();
    servePort(port1, egress);
    egressPort = port2;
  }
  const opened = await realm.ask(
    {
      op: "open",
      checkpoint: saved.length > 0 ? saved : null,
      egress: egressPort ? { source: fetchSources.worker, port: egressPort } : null,
    },
    // The checkpoint moves to the session's Worker instead of being
    // copied: one copy of the image fewer at the restore's peak.
    [...(egressPort ? [egressPort] : []), ...(saved.length > 0 ? [saved.buffer] : [])],
  );
  endOutput(open.nonce);
  if (opened.ok !== true) {
    channel.report({ kind: "end", status: 1, error: `could not open the session: ${messageOf(opened)}` });
    return await new Promise(() => {});
  }
  channel.report({ kind: "end", status: 0 });
  for (;;) {
    const frame = await channel.nextFrame();
    if (frame.op === "checkpoint") {
      const reply = await realm.ask({ op: "checkpoint" });
      const parts = checkpointParts(reply.parts);
      if (parts) channel.report({ kind: "checkpoint" }, ...parts);
      endOutput(frame.nonce);
      channel.report({ kind: "end", status: parts ? 0 : 1, error: parts ? undefined : messageOf(reply) });
      continue;
    }
    if (frame.op === "file") {
      await serveFile(realm, frame, channel.readBytes(Number(frame.size ?? 0)));
      continue;
    }
    channel.report({ kind: "started" });
    egress?.begin(frame.egress_tag);
    Atomics.store(flag, 0, 0);
    running = true;
    let interrupted = false;
    const timer = setTimeout(() => {
      interrupted = true;
      Atomics.store(flag, 0, 2); // SIGINT
    }, Number(frame.timeout_ms));
    const reply = await realm.ask({ op: "run", job: jobOf(frame) });
    const { status, memoryError } = resultOf(reply);
    clearTimeout(timer);
    running = false;
    Atomics.store(flag, 0, 0);
    egress?.clear();
    if (frame.return_files && !memoryError) {
      channel.report({ kind: "files" }, filesSection(filesOf(reply.files, frame.return_files)));
    }
    endOutput(frame.nonce);
    channel.report({ kind: "end", status, interrupted, ...(memoryError ? { memory: true } : {}) });
  }
}
