// Harness side of a session: one interpreter that lives across execs.
//
// The runner sends frames (see protocol.mjs), each with an `op`:
//
// - `open`, first: builds the interpreter, from a checkpoint when
//   `checkpoint_bytes` says one follows the frame (raw bytes). A JS session replays `replay`, the programs of its checkpoint,
//   in order; their output is the runner's to drop.
// - `exec`: runs `code` in the session's globals and ends with the end
//   markers, as a shared-lane job does. The flag after the status is 2 when
//   the exec was interrupted at its deadline and the session lives on.
// - `checkpoint` (Python): writes CHECKPOINT_MARKER, the nonce, the length
//   and then the checkpoint's bytes on stdout, before the end markers; the
//   length is 0 when it failed, and stderr says why.
//
// A Python exec that runs past `timeout_ms` gets a KeyboardInterrupt from
// Pyodide's interrupt buffer, which a timer Worker sets: the main thread is
// busy running Python then. Code that does not return to the interpreter
// (time.sleep, a long C call) is not interrupted; the runner kills the
// child a little after the deadline instead.
import {
  base64,
  hideHostDetails,
  isAllocationFailure,
  jsMemoryInUse,
  readBytes,
  readFrame,
  reportOutOfMemory,
  signalEnd,
  signalReady,
  withoutHarnessFrames,
  writeAll,
  writeError,
} from "./protocol.mjs";

const CHECKPOINT_MARKER = "\u0006runbox-checkpoint:";
const MAGIC = new TextEncoder().encode("RBXS");
const HOME = "/home/pyodide";
const SESSION_DIRS = [HOME, "/tmp"];

/** Serves a Python session until the runner closes stdin or kills it. */
export async function serveSession({ newInstance, prepare, runJob }) {
  signalReady();
  const open = readFrame();
  let instance;
  let status = 0;
  const saved = readBytes(open.checkpoint_bytes ?? 0);
  try {
    const restored = saved.length > 0 ? unpack(saved) : null;
    instance = prepare(await newInstance({ _makeSnapshot: true, ...(restored ? { _loadSnapshot: restored.memory } : {}) }));
    if (restored) writeFiles(instance.pyodide.FS, restored.files);
  } catch (error) {
    writeError(`runbox: could not open the session: ${error?.message ?? error}\n`);
    status = 1;
  }
  signalEnd(open.nonce, status, true);
  if (!instance) return await new Promise(() => {});

  // Byte 0 is Pyodide's interrupt buffer, which Pyodide clears once it
  // has raised the KeyboardInterrupt; the timer also sets byte 1, so the
  // harness can tell afterwards that the deadline passed.
  const flags = new SharedArrayBuffer(2);
  const interrupt = new Uint8Array(flags, 0, 1);
  const fired = new Uint8Array(flags, 1, 1);
  instance.pyodide.setInterruptBuffer(interrupt);
  const timer = interruptTimer();
  let execs = 0;
  for (;;) {
    const frame = readFrame();
    if (frame.op === "checkpoint") {
      checkpoint(instance.pyodide, frame.nonce);
      continue;
    }
    execs += 1;
    Atomics.store(interrupt, 0, 0);
    Atomics.store(fired, 0, 0);
    timer.postMessage({ buffer: flags, after: frame.timeout_ms, exec: execs });
    const name = `<exec ${execs}>`;
    const run = (code) => instance.runInSession.callPromising(code, name);
    const result = await runJob(instance, frame, new TextEncoder().encode(frame.stdin ?? ""), run);
    timer.postMessage({ exec: execs, cancel: true });
    const interrupted = Atomics.load(fired, 0) !== 0;
    Atomics.store(interrupt, 0, 0);
    signalEnd(frame.nonce, result & 0xff, interrupted ? 2 : 1);
  }
}

/** A Worker that sets the interrupt buffer once an exec's deadline passes. */
function interruptTimer() {
  const source = `
let pending = null;
self.onmessage = ({ data }) => {
  if (data.cancel) {
    if (pending && pending.exec === data.exec) clearTimeout(pending.timer);
    pending = null;
    return;
  }
  const flags = new Uint8Array(data.buffer);
  const fire = () => {
    Atomics.store(flags, 1, 1);
    Atomics.store(flags, 0, 2); // SIGINT
  };
  pending = { exec: data.exec, timer: setTimeout(fire, data.after) };
};`;
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const worker = new Worker(url, { type: "module", name: "runbox-interrupt" });
  URL.revokeObjectURL(url);
  return worker;
}

/** Writes the session's checkpoint: its memory image plus its files. */
function checkpoint(pyodide, nonce) {
  let bytes;
  try {
    bytes = pack(pyodide.makeMemorySnapshot(), readFiles(pyodide.FS));
  } catch (error) {
    const message = String(error?.message ?? error);
    const why = /serialize/i.test(message)
      ? "the session holds a JavaScript object (for example from `import js` or `pyodide.ffi`), " +
        "which a memory snapshot cannot carry; delete the names that refer to one and try again"
      : message;
    writeError(`runbox: could not checkpoint the session: ${why}\n`);
    bytes = new Uint8Array(0);
  }
  writeAll(1, new TextEncoder().encode(`${CHECKPOINT_MARKER}${nonce}:${bytes.length}\n`));
  writeAll(1, bytes);
  signalEnd(nonce, bytes.length > 0 ? 0 : 1, true);
}

/** MAGIC, the files as JSON (its length first, 4 bytes little-endian), the memory image. */
function pack(memory, files) {
  const json = new TextEncoder().encode(JSON.stringify(files));
  const out = new Uint8Array(MAGIC.length + 4 + json.length + memory.length);
  out.set(MAGIC, 0);
  new DataView(out.buffer).setUint32(MAGIC.length, json.length, true);
  out.set(json, MAGIC.length + 4);
  out.set(memory, MAGIC.length + 4 + json.length);
  return out;
}

function unpack(bytes) {
  for (let i = 0; i < MAGIC.length; i++) if (bytes[i] !== MAGIC[i]) throw new Error("not a runbox checkpoint");
  const length = new DataView(bytes.buffer, bytes.byteOffset).getUint32(MAGIC.length, true);
  const at = MAGIC.length + 4;
  const files = JSON.parse(new TextDecoder().decode(bytes.subarray(at, at + length)));
  // A copy: Pyodide reads the image through aligned typed arrays.
  return { files, memory: bytes.slice(at + length) };
}

/** The regular files under the session's directories, base64. */
function readFiles(FS) {
  const files = [];
  const walk = (dir) => {
    let names;
    try {
      names = FS.readdir(dir);
    } catch {
      return;
    }
    for (const name of names) {
      if (name === "." || name === "..") continue;
      const path = `${dir}/${name}`;
      const mode = FS.lstat(path).mode;
      if (FS.isDir(mode)) walk(path);
      else if (FS.isFile(mode)) files.push({ path, content: base64(FS.readFile(path)) });
    }
  };
  for (const dir of SESSION_DIRS) walk(dir);
  return files;
}

function writeFiles(FS, files) {
  for (const { path, content } of files) {
    const slash = path.lastIndexOf("/");
    if (slash > 0) FS.mkdirTree(path.slice(0, slash));
    FS.writeFile(path, fromBase64(content));
  }
}

function fromBase64(text) {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

/**
 * Serves a JavaScript session. Each exec runs as a classic script in this
 * realm (`vm.runInThisContext`), so its top-level `let`, `const`, `class`
 * and `function` declarations stay visible to the next, as in a REPL. A
 * script has no top-level `await` or `import`: an exec that does not
 * compile as one runs as a module instead, in the same realm, whose
 * declarations are its own (assign to `globalThis` to keep a value).
 *
 * An exec ends once its code has run, the promise it completed with (if
 * any) has settled, and the timeouts it set have fired; an error thrown by
 * any of them fails it. Intervals and Workers live on with the session.
 * Nothing stops a running exec but killing the child.
 */
export async function serveJsSession() {
  // Loaded here, not at the top: loading `node:vm` sets up Node's `process`
  // again, undoing what a job's harness hid on it.
  const { runInThisContext } = await import("node:vm");
  // Scripts see Node's `process`, not the global the harness hid paths on.
  hideHostDetails("file:///main.js", [], true, runInThisContext("globalThis.process ?? process"));
  const split = String.prototype.split;
  const filter = Array.prototype.filter;
  const join = Array.prototype.join;
  const includes = String.prototype.includes;
  const apply = Reflect.apply;
  const withoutVmFrames = (text) =>
    apply(join, apply(filter, apply(split, text, ["\n"]), [(line) => !apply(includes, line, ["ext:deno_node/vm.js"])]), [
      "\n",
    ]);
  const harnessDir = new URL(".", import.meta.url).href;
  const createObjectURL = URL.createObjectURL;
  const revokeObjectURL = URL.revokeObjectURL;
  const isThenable = (value) => value !== null && (typeof value === "object" || typeof value === "function") &&
    typeof value.then === "function";
  let current = null;
  const report = (error, prefix = "") => {
    if (current && isAllocationFailure(error) && jsMemoryInUse() >= current.halfCap) {
      writeError(`error: out of memory: ${error.message}\n`);
      reportOutOfMemory(current.nonce);
    }
    let text;
    try {
      text = withoutVmFrames(withoutHarnessFrames(error?.stack ?? error, harnessDir));
    } catch {
      text = "(the error could not be printed)";
    }
    writeError(`error: Uncaught ${prefix}${text}\n`);
    if (current) current.failed = true;
  };

  // The timeouts each exec sets, so that it ends after they have fired.
  const { setTimeout, clearTimeout } = globalThis;
  const pending = new Set();
  let settled = null;
  globalThis.setTimeout = function (callback, delay, ...args) {
    const id = setTimeout(() => {
      pending.delete(id);
      try {
        if (typeof callback === "function") callback(...args);
      } finally {
        if (pending.size === 0 && settled) settled();
      }
    }, delay);
    if (current) pending.add(id);
    return id;
  };
  globalThis.clearTimeout = (id) => {
    pending.delete(id);
    clearTimeout(id);
    if (pending.size === 0 && settled) settled();
  };

  let execs = 0;
  const run = async (code, frame) => {
    execs += 1;
    current = { failed: false, nonce: frame.nonce, halfCap: ((frame.memory_mb ?? 0) * 1024 * 1024) / 2 };
    try {
      let value;
      try {
        value = runInThisContext(code, { filename: `exec-${execs}.js`, displayErrors: false });
      } catch (error) {
        // A syntax error as a script: most often top-level await or import.
        if (!(error instanceof SyntaxError)) throw error;
        const url = createObjectURL(new Blob([code], { type: "text/javascript" }));
        try {
          await import(url);
        } finally {
          revokeObjectURL(url);
        }
      }
      if (isThenable(value)) await value;
    } catch (error) {
      report(error);
    }
    while (pending.size > 0) await new Promise((resolve) => (settled = resolve));
    settled = null;
    // Callbacks queued for now (resolved promises, 0 ms timers) print before the end.
    await new Promise((resolve) => setTimeout(resolve, 0));
    const status = current.failed ? 1 : 0;
    current = null;
    return status;
  };
  globalThis.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    report(event.reason, "(in promise) ");
  });
  globalThis.addEventListener("error", (event) => {
    event.preventDefault();
    report(event.error ?? event.message);
  });
  signalReady();
  const open = readFrame();
  for (const code of open.replay ?? []) await run(code, open);
  signalEnd(open.nonce, 0, true);
  for (;;) {
    const frame = readFrame();
    const status = await run(frame.code, frame);
    signalEnd(frame.nonce, status, true);
  }
}
