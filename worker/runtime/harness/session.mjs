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
import vm from "node:vm";
import { base64, readBytes, readFrame, signalEnd, signalReady, writeAll, writeError } from "./protocol.mjs";

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
 * completion value that is a promise is awaited. There is no top-level
 * `await` (a script has none), and no way to stop a running exec but
 * killing the child.
 */
export async function serveJsSession() {
  const runInThisContext = vm.runInThisContext;
  const then = (value) => value !== null && (typeof value === "object" || typeof value === "function") &&
    typeof value.then === "function";
  let execs = 0;
  const run = async (code) => {
    execs += 1;
    try {
      const value = runInThisContext(code, { filename: `exec-${execs}.js` });
      if (then(value)) await value;
      return 0;
    } catch (error) {
      let text;
      try {
        text = String(error?.stack ?? error);
      } catch {
        text = "(the error could not be printed)";
      }
      writeError(`error: Uncaught ${text}\n`);
      return 1;
    }
  };
  globalThis.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    writeError(`error: Uncaught (in promise) ${event.reason?.stack ?? event.reason}\n`);
  });
  globalThis.addEventListener("error", (event) => {
    event.preventDefault();
    writeError(`error: Uncaught ${event.error?.stack ?? event.message}\n`);
  });
  signalReady();
  const open = readFrame();
  for (const code of open.replay ?? []) await run(code);
  signalEnd(open.nonce, 0, true);
  for (;;) {
    const frame = readFrame();
    const status = await run(frame.code);
    // Let callbacks the exec queued for now (resolved promises, 0 ms timers) print before the end.
    await new Promise((resolve) => setTimeout(resolve, 0));
    signalEnd(frame.nonce, status, true);
  }
}
