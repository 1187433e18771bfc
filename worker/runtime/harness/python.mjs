// Harness for Python jobs: Pyodide (CPython on WebAssembly) inside Deno.
//
// Usage: python.mjs <pyodide-dir> <memory-snapshot|-> <memory-mb>
//        python.mjs <pyodide-dir> <memory-snapshot|-> <memory-mb> shared|session <frames> <results>
//
// This realm is the harness's: it holds the frames, their nonces and the
// channel to the runner (see protocol.mjs). Every program runs in a Worker
// of its own (python-job.mjs), with a Pyodide instance built inside it, so
// `import js` reaches that Worker's realm and nothing of this one.
//
// Boot reads the Pyodide files, the memory snapshot and the harness's own
// files, which is why this child alone gets --allow-read (scoped to those
// paths). Read access is revoked before READY, so no program ever has it.
//
// - A single-use child builds one Worker while it boots, runs one job in
//   it, and exits with the job's status.
// - A shared-lane child runs the jobs of one batch, each in a new Worker
//   built from the wasm module compiled once here and its own copy of the
//   snapshot. The next job's Worker boots between jobs, so that nothing
//   but the job itself grows the process while it runs.
// - A session child keeps one Worker, the session's interpreter, across
//   execs. An exec that runs past its `timeout_ms` gets a KeyboardInterrupt
//   through Pyodide's interrupt buffer, which this realm's timer sets;
//   code that does not return to the interpreter (time.sleep, a long C
//   call) is not interrupted, and the runner kills the child a little
//   after the deadline instead.
import { readAssets } from "./pyodide.mjs";
import {
  awaitJob,
  Channel,
  claimOutOfMemory,
  dropPersistentStorage,
  endOutput,
  exit,
  moduleUrl,
  readHarnessFile,
  sendFiles,
  watchRealm,
} from "./protocol.mjs";

const [pyodideDir, snapshotPath, memoryMb, mode, framesPath, resultsPath] = Deno.args;
const channel = mode ? new Channel(framesPath, resultsPath) : null;

dropPersistentStorage();
const assets = await readAssets(pyodideDir, snapshotPath === "-" ? null : snapshotPath);
const runner = readHarnessFile("runner.py");
const jobSource = readHarnessFile("python-job.mjs");
const loaderSource = readHarnessFile("pyodide.mjs");
// Until read access goes, a Worker imports Pyodide's script from its file,
// for which Deno keeps a code cache; later Workers get it from memory.
let scriptFile = `file://${pyodideDir}/pyodide.asm.js`;

/**
 * A new Worker with a Pyodide instance of its own, built (`build`) or ready
 * to open. The `blob:` URLs it starts from are its own and revoked once it
 * is up: the blob store is the process's, and a job that revoked a URL
 * the next Worker needs would break the jobs after it.
 */
async function newRealm(build, interrupt) {
  const urls = [moduleUrl(jobSource), moduleUrl(loaderSource), scriptFile ?? moduleUrl(assets.script)];
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
    build,
    interrupt,
  });
  for (const url of urls) if (url.startsWith("blob:")) URL.revokeObjectURL(url);
  if (reply.ok !== true) throw new Error(`the Python runtime did not boot: ${reply.message}`);
  return realm;
}

/**
 * Messages `worker` one at a time; each promise gets the next reply. The
 * replies come from the job's realm: they are structured clones, plain
 * data, read here as such.
 */
function asker(worker) {
  let waiting = null;
  worker.onmessage = ({ data }) => {
    const settle = waiting;
    waiting = null;
    settle?.(data ?? {});
  };
  worker.onerror = (event) => {
    event.preventDefault();
    const settle = waiting;
    waiting = null;
    settle?.({ ok: false, message: String(event.message) });
  };
  return (message) =>
    new Promise((resolve) => {
      waiting = resolve;
      worker.postMessage(message);
    });
}

/** What a job's Worker is given of the frame: never the nonce. */
function jobOf(frame) {
  return {
    code: String(frame.code ?? ""),
    args: Array.isArray(frame.args) ? frame.args.map(String) : [],
    files: Array.isArray(frame.files) ? frame.files : [],
    stdin: String(frame.stdin ?? ""),
    memory_mb: Number(frame.memory_mb),
    return_files: frame.return_files ?? null,
  };
}

/** A run's reply as plain values. */
function resultOf(reply) {
  return {
    status: typeof reply.status === "number" ? reply.status & 0xff : 1,
    memoryError: reply.memoryError === true,
    files: reply.files ?? null,
  };
}

/**
 * The files a job's Worker says it wrote, rebuilt field by field from
 * what it sent, and within what the frame allowed: the runner takes
 * nothing else on the channel, and a section longer than the runner's
 * cap would end the child, so one that does not fit is sent empty.
 */
function filesOf(sent, { max_files: maxFiles, max_bytes: maxBytes }) {
  const files = [];
  let truncated = sent?.truncated === true || !Array.isArray(sent?.files);
  for (const file of Array.isArray(sent?.files) ? sent.files : []) {
    const { path, content, size } = file ?? {};
    const valid = typeof path === "string" && path.length <= 256 && typeof content === "string" &&
      Number.isSafeInteger(size) && size >= 0;
    if (!valid || files.length === maxFiles) {
      truncated = true;
      continue;
    }
    files.push({ path, content, size, truncated: file.truncated === true });
  }
  const kept = files.reduce((sum, file) => sum + file.content.length, 0);
  if (kept > Math.ceil(maxBytes / 3) * 4) return { files: [], truncated: true };
  return { files, truncated };
}

if (!mode) {
  const realm = await newRealm(true);
  Deno.permissions.revokeSync({ name: "read" });
  const frame = awaitJob();
  const { status, memoryError, files } = resultOf(await realm.ask({ op: "run", job: jobOf(frame) }));
  // The Worker is left as it is: the runner measures what it holds.
  if (memoryError) claimOutOfMemory(frame.nonce);
  if (frame.return_files) sendFiles(frame.nonce, filesOf(files, frame.return_files));
  exit(status);
}

if (mode === "session") await serveSession();
await serveShared();

async function serveShared() {
  // The first Worker can still read Pyodide's files; every later one cannot.
  let next = newRealm(true);
  await next;
  Deno.permissions.revokeSync({ name: "read" });
  Deno.permissions.revokeSync({ name: "write" });
  scriptFile = null;
  const fingerprint = watchRealm();
  channel.report({ kind: "ready" });
  for (;;) {
    const frame = channel.readFrame();
    const realm = await next;
    // The job's time, and the runner's count of its memory, start now.
    channel.report({ kind: "started" });
    fingerprint.begin();
    const { status, memoryError, files } = resultOf(await realm.ask({ op: "run", job: jobOf(frame) }));
    if (memoryError) {
      // Left running, so that the runner measures the memory it holds.
      endOutput(frame.nonce);
      channel.report({ kind: "end", status, clean: false, memory: true });
      next = newRealm(true);
      continue;
    }
    realm.worker.terminate();
    // The next job's Worker starts now, before the end is reported, so
    // that the runner, which counts Worker threads between jobs, sees this
    // job's as one too many for as long as it lingers (terminate() does
    // not stop running code at once).
    next = newRealm(true);
    if (frame.return_files) {
      const { files: kept, truncated } = filesOf(files, frame.return_files);
      channel.report({ kind: "files", files: kept, truncated });
    }
    endOutput(frame.nonce);
    channel.report({ kind: "end", status, clean: fingerprint.isClean() });
  }
}

async function serveSession() {
  // Byte 0 is Pyodide's interrupt buffer, which the Worker's instance reads.
  const interrupt = new SharedArrayBuffer(1);
  const flag = new Uint8Array(interrupt);
  const realm = await newRealm(false, interrupt);
  Deno.permissions.revokeSync({ name: "read" });
  Deno.permissions.revokeSync({ name: "write" });
  channel.report({ kind: "ready" });
  const open = channel.readFrame();
  const saved = channel.readBytes(Number(open.checkpoint_bytes ?? 0));
  const opened = await realm.ask({ op: "open", checkpoint: saved.length > 0 ? saved : null });
  endOutput(open.nonce);
  if (opened.ok !== true) {
    channel.report({ kind: "end", status: 1, error: `could not open the session: ${opened.message}` });
    return await new Promise(() => {});
  }
  channel.report({ kind: "end", status: 0 });
  for (;;) {
    const frame = channel.readFrame();
    if (frame.op === "checkpoint") {
      const reply = await realm.ask({ op: "checkpoint" });
      if (reply.bytes instanceof Uint8Array) channel.report({ kind: "checkpoint" }, reply.bytes);
      endOutput(frame.nonce);
      channel.report({ kind: "end", status: reply.bytes ? 0 : 1, error: reply.bytes ? undefined : String(reply.message) });
      continue;
    }
    channel.report({ kind: "started" });
    Atomics.store(flag, 0, 0);
    let interrupted = false;
    const timer = setTimeout(() => {
      interrupted = true;
      Atomics.store(flag, 0, 2); // SIGINT
    }, Number(frame.timeout_ms));
    const { status, memoryError } = resultOf(await realm.ask({ op: "run", job: jobOf(frame), session: true }));
    clearTimeout(timer);
    Atomics.store(flag, 0, 0);
    endOutput(frame.nonce);
    channel.report({ kind: "end", status, interrupted, ...(memoryError ? { memory: true } : {}) });
  }
}
