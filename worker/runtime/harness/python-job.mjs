// A Python session's interpreter: a Worker that builds one Pyodide instance
// and runs the session's execs in it (see python.mjs, which starts it). It
// runs on a thread of its own so that the harness's timer can interrupt an
// exec through Pyodide's interrupt buffer. The instance, its `import js`
// realm and this module are the session's; nothing here is trusted, and
// nothing of the harness is reachable from it. (A job's interpreter runs
// in a bare realm instead: see python-realm.js.)
//
// Requests, the Worker's messages from the harness, each with a `seq` of
// its own (random):
//
// - `{op: "init", assets, scriptUrl, loaderUrl, runner, memoryMb, interrupt}`,
//   first: loads Pyodide's scripts;
// - `{op: "open", checkpoint, egress}`: builds the instance, restored from
//   the checkpoint's bytes when given, with a `fetch` through the egress
//   proxy when `egress` (egress-fetch.mjs's source and a port) is given;
// - `{op: "run", job}`: runs one exec in the session's `__main__`;
// - `{op: "checkpoint"}`: the instance's memory and files;
// - `{op: "file", action, path, to, content, limits}`: one operation of the
//   session's files API on its home (see `fileOp`).
//
// Each gets one reply, with its `seq`: `{ok, message}` for init and open,
// `{status, memoryError}` for run, `{parts}` (see `checkpoint`) or
// `{message}` for checkpoint, and `{ok, code, parts, entries}` for file. The session's code runs in this realm and can
// post what it likes; the harness takes only a reply that bears the `seq`
// of the request it waits for, which nobody knows before the request
// arrives (see `asker` in python.mjs).
const post = self.postMessage.bind(self);
const stdoutWrite = Deno.stdout.writeSync.bind(Deno.stdout);
const stderrWrite = Deno.stderr.writeSync.bind(Deno.stderr);
const encoder = new TextEncoder();

// Added to the exit status the runner returns when the program ended on a MemoryError.
const MEMORY_FLAG = 0x100;
const CHECKPOINT_MAGIC = encoder.encode("RBXS");
const HOME = "/home/pyodide";
const SESSION_DIRS = [HOME, "/tmp"];

// Web storage and WebGPU: see `dropPersistentStorage` in protocol.mjs.
for (const name of ["localStorage", "sessionStorage", "caches"]) {
  try {
    delete globalThis[name];
  } catch {
    // Not configurable in this Deno: the runner's blocked DENO_DIR still applies.
  }
}
try {
  delete Object.getPrototypeOf(navigator).gpu;
} catch {
  // As above.
}

/** Hides host paths where cheap: see `hideHostDetails` in protocol.mjs. */
function hideHostDetails(args) {
  const define = (object, name, value) => {
    try {
      Object.defineProperty(object, name, { value, configurable: true, writable: true });
    } catch {
      try {
        object[name] = value;
      } catch {
        // Not configurable in this Deno: the path stays visible (documented).
      }
    }
  };
  define(Deno, "mainModule", "file:///main.py");
  define(Deno, "execPath", () => "deno");
  define(Deno, "args", Object.freeze([...args]));
  // Pyodide has loaded Node's `process` already.
  const process = globalThis.process;
  if (process) {
    define(process, "argv", ["deno", "/main.py", ...args]);
    define(process, "argv0", "deno");
    define(process, "execPath", "deno");
    define(process, "execArgv", []);
  }
}

let init = null;
let build = null;
let instance = null;
let execs = 0;
const memories = [];

self.onmessage = async ({ data }) => {
  let reply;
  try {
    reply = await handle(data);
  } catch (error) {
    reply = { ok: false, message: String(error?.message ?? error) };
  }
  // A checkpoint's parts, the memory image among them, move to the
  // harness's realm instead of being copied: one copy fewer at the
  // session's peak. (The session's code can make them anything: what
  // cannot move is copied, what cannot be sent fails the request.)
  const parts = Array.isArray(reply.parts) ? reply.parts : [];
  const moved = parts.map((part) => part?.buffer).filter((buffer) => buffer instanceof ArrayBuffer);
  try {
    post({ ...reply, seq: data.seq }, moved);
  } catch (error) {
    post({ ok: false, message: String(error?.message ?? error), seq: data.seq });
  }
};

async function handle(message) {
  switch (message.op) {
    case "init": {
      init = message;
      capWasmMemory(init.memoryMb);
      const { instanceBuilder } = await import(init.loaderUrl);
      build = await instanceBuilder(init.assets, init.scriptUrl);
      return { ok: true };
    }
    case "open": {
      if (message.egress) await useEgress(message.egress);
      const restored = message.checkpoint ? unpack(message.checkpoint) : null;
      instance = prepare(await build({ _makeSnapshot: true, ...(restored ? { _loadSnapshot: restored.memory } : {}) }));
      if (restored) writeFiles(instance.pyodide.FS, restored.files.map((file) => ({ ...file, encoding: "base64" })));
      if (init.interrupt) instance.pyodide.setInterruptBuffer(new Uint8Array(init.interrupt, 0, 1));
      return { ok: true };
    }
    case "run":
      return await run(message.job);
    case "checkpoint":
      return checkpoint();
    case "file":
      return fileOp(message);
  }
  return { ok: false, message: `unknown op ${message.op}` };
}

/**
 * The session's token has egress rules: `fetch` (what `js.fetch` and
 * `pyodide.http.pyfetch` call) goes through the proxy (egress-fetch.mjs).
 */
async function useEgress({ source, port }) {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const { egressFetch, portSender } = await import(url);
  URL.revokeObjectURL(url);
  globalThis.fetch = egressFetch(portSender(port));
}

/** Connects a booted Pyodide to the process's stdout and stderr and loads the runner into it. */
function prepare(pyodide) {
  const sink = (write) => ({
    write: (bytes) => {
      let at = 0;
      while (at < bytes.length) at += write(bytes.subarray(at));
      return bytes.length;
    },
  });
  pyodide.setStdout(sink(stdoutWrite));
  pyodide.setStderr(sink(stderrWrite));
  // Plain exec, not runPython: Pyodide's eval_code parses the source with
  // `ast` first, and the instance's first call after it ran markedly slower.
  const globals = pyodide.toPy({ PACKAGES_ZIP: "/lib/packages.zip", MEMORY_FLAG });
  pyodide.pyimport("builtins").exec(init.runner, globals);
  return { pyodide, runInSession: globals.get("run_in_session") };
}

/** Runs one exec; returns its exit status and whether it ended on a MemoryError. */
async function run(job) {
  const { pyodide, runInSession } = instance;
  hideHostDetails([]);
  // An exec's files land under the home, wherever its code went since.
  writeFiles(pyodide.FS, (job.files ?? []).map((file) => ({ ...file, path: `${HOME}/${file.path}` })));
  // With `return_files: true`, the files this exec wrote: those whose
  // change time or size moved (or that are new), against what was there.
  const before = job.return_files?.want === true ? changeTimes(pyodide.FS) : null;
  const stdin = encoder.encode(job.stdin ?? "");
  let consumed = 0;
  pyodide.setStdin({
    read(buffer) {
      const n = Math.min(buffer.length, stdin.length - consumed);
      buffer.set(stdin.subarray(consumed, consumed + n));
      consumed += n;
      return n;
    },
  });
  // callPromising lets the program block on JS promises (run_until_complete,
  // run_sync) through WebAssembly stack switching.
  execs += 1;
  const result = await runInSession.callPromising(job.code, `<exec ${execs}>`);
  const memoryError = (result & MEMORY_FLAG) !== 0 && largestMemory() >= (job.memory_mb * 1024 * 1024) / 2;
  const files = job.return_files && !memoryError ? filesWritten(pyodide.FS, job.return_files, before) : null;
  return { status: result & 0xff, memoryError, files };
}

/** Each regular file under the home (a relative path), with when it last changed and its size. */
function changeTimes(FS) {
  const times = new Map();
  const walkInto = (dir, prefix) => {
    for (const name of FS.readdir(dir)) {
      if (name === "." || name === "..") continue;
      const stat = FS.lstat(`${dir}/${name}`);
      if (FS.isDir(stat.mode)) walkInto(`${dir}/${name}`, `${prefix}${name}/`);
      else if (FS.isFile(stat.mode)) times.set(`${prefix}${name}`, `${millisOf(stat.ctime)}:${stat.size}`);
    }
  };
  walkInto(HOME, "");
  return times;
}

/**
 * The files an exec's `return_files` asks for, under the home, in path
 * order: the listed paths that are regular files, or with `true` every
 * regular file the exec wrote (`before` holds the change times it
 * started with). Links are not followed. At most `max_files` files and
 * `max_bytes` bytes in all are kept; the harness checks the shape again.
 */
function filesWritten(FS, { want, max_files: maxFiles, max_bytes: maxBytes }, before) {
  const now = changeTimes(FS);
  const paths = want === true ? [...now.keys()].filter((path) => before.get(path) !== now.get(path)) : want;
  const out = { files: [], truncated: false };
  let budget = maxBytes;
  for (const path of [...paths].sort()) {
    if (!now.has(path)) continue;
    if (out.files.length === maxFiles) {
      out.truncated = true;
      break;
    }
    const bytes = FS.readFile(`${HOME}/${path}`);
    const kept = bytes.subarray(0, budget);
    budget -= kept.length;
    const truncated = kept.length < bytes.length;
    out.truncated ||= truncated;
    out.files.push({ path, content: base64(kept), size: bytes.length, truncated });
  }
  return out;
}

/**
 * The session's checkpoint: MAGIC, the files as JSON (its length first, 4
 * bytes little-endian), the memory image. In two parts, sent one after the
 * other, never joined: a joined copy of the image would be the third at
 * the session's peak (the heap, its image, the copy), all of them counted
 * against the process's memory limit.
 */
function checkpoint() {
  try {
    const memory = instance.pyodide.makeMemorySnapshot();
    const json = encoder.encode(JSON.stringify(readFiles(instance.pyodide.FS)));
    // Spaces after the JSON (which its parse skips) end the head on a
    // multiple of 8 bytes: the image then starts aligned, and a restore
    // reads it where it lies (see `unpack`).
    const length = Math.ceil((CHECKPOINT_MAGIC.length + 4 + json.length) / 8) * 8;
    const head = new Uint8Array(length).fill(0x20);
    head.set(CHECKPOINT_MAGIC, 0);
    new DataView(head.buffer).setUint32(CHECKPOINT_MAGIC.length, length - CHECKPOINT_MAGIC.length - 4, true);
    head.set(json, CHECKPOINT_MAGIC.length + 4);
    return { parts: [head, memory] };
  } catch (error) {
    const message = String(error?.message ?? error);
    const why = /serialize/i.test(message)
      ? "the session holds a JavaScript object (for example from `import js` or `pyodide.ffi`), " +
        "which a memory snapshot cannot carry; delete the names that refer to one and try again"
      : message;
    return { message: why };
  }
}

function unpack(bytes) {
  for (let i = 0; i < CHECKPOINT_MAGIC.length; i++) {
    if (bytes[i] !== CHECKPOINT_MAGIC[i]) throw new Error("not a runbox checkpoint");
  }
  const length = new DataView(bytes.buffer, bytes.byteOffset).getUint32(CHECKPOINT_MAGIC.length, true);
  const at = CHECKPOINT_MAGIC.length + 4;
  const files = JSON.parse(new TextDecoder().decode(bytes.subarray(at, at + length)));
  // Pyodide reads the image through aligned typed arrays: read where it
  // lies when it starts aligned (checkpoints since their head was padded),
  // copied otherwise. A copy would be one more of the image at the
  // restore's peak, counted against the process's memory limit.
  const start = bytes.byteOffset + at + length;
  return { files, memory: start % 8 === 0 ? bytes.subarray(at + length) : bytes.slice(at + length) };
}

/**
 * One operation of the session's files API on its home, by a path
 * relative to it that the runner checked (plain names, no `.` or `..`).
 * A path through a symbolic link is refused: the session's code may have
 * pointed one anywhere in the file system (deleting the link itself
 * removes the link). An upload is refused where it
 * would take the files under the home past the session's caps.
 */
function fileOp({ action, path, to, content, limits }) {
  const FS = instance.pyodide.FS;
  const refuse = (code) => ({ ok: false, code });
  // A link itself may be deleted or moved, never gone through.
  const at = resolve(FS, path, action === "delete" || action === "move");
  if (at.refusal) return refuse(at.refusal);
  const { full, found, names } = at;
  switch (action) {
    case "put": {
      if (found && FS.isDir(found.mode)) return refuse("not_a_file");
      const before = found ? found.size : 0;
      const { bytes, count } = homeUsage(FS);
      if (bytes - before + content.length > limits.max_total) return refuse("files_full");
      if (!found && count + 1 > limits.max_count) return refuse("too_many_files");
      FS.mkdirTree(full.slice(0, full.lastIndexOf("/")));
      FS.writeFile(full, content);
      return { ok: true };
    }
    case "get":
      if (!found) return refuse("no_file");
      if (!FS.isFile(found.mode)) return refuse("not_a_file");
      if (found.size > limits.max_file) return refuse("too_large");
      return { ok: true, parts: [FS.readFile(full)] };
    case "list": {
      if (!found) return refuse("no_file");
      if (!FS.isDir(found.mode)) return refuse("not_a_directory");
      const all = FS.readdir(full).filter((name) => name !== "." && name !== "..");
      const entries = all.slice(0, limits.max_entries).map((name) => entryOf(FS, name, `${full}/${name}`));
      return { ok: true, entries, truncated: all.length > entries.length };
    }
    case "stat":
      if (!found) return refuse("no_file");
      if (names.length === 0) return refuse("not_a_file");
      return { ok: true, entries: [entryOf(FS, names.at(-1), full)], truncated: false };
    case "delete":
      if (!found) return refuse("no_file");
      if (names.length === 0) return refuse("not_a_file");
      removeTree(FS, full);
      return { ok: true };
    case "mkdir":
      if (found) return refuse(FS.isDir(found.mode) ? "exists" : "not_a_directory");
      FS.mkdirTree(full);
      return { ok: true };
    case "move": {
      if (!found) return refuse("no_file");
      if (names.length === 0) return refuse("not_a_file");
      const target = resolve(FS, to, false);
      if (target.refusal) return refuse(target.refusal);
      if (target.found && FS.isDir(target.found.mode)) return refuse("exists");
      // A directory moved into itself would vanish from the home.
      if (FS.isDir(found.mode) && `${target.full}/`.startsWith(`${full}/`)) return refuse("not_a_directory");
      FS.mkdirTree(target.full.slice(0, target.full.lastIndexOf("/")));
      FS.rename(full, target.full);
      return { ok: true };
    }
  }
  return { ok: false, message: `unknown file action ${action}` };
}

/**
 * Where `path` (relative to the home) leads: its full path, what is there
 * (null for nothing), its names; or why it is refused: it goes through a
 * file, or through a link (a link as its last name only if `lastLinkOk`).
 */
function resolve(FS, path, lastLinkOk) {
  const names = path === "" ? [] : path.split("/");
  const full = names.length > 0 ? `${HOME}/${path}` : HOME;
  let at = HOME;
  let found = lstatOf(FS, HOME);
  for (let i = 0; i < names.length && found; i++) {
    if (!FS.isDir(found.mode)) return { refusal: "not_a_directory" };
    at += `/${names[i]}`;
    found = lstatOf(FS, at);
    const last = i === names.length - 1;
    if (found && FS.isLink(found.mode) && !(last && lastLinkOk)) return { refusal: "link" };
  }
  return { full, found, names };
}

/** One entry of a listing: 0 a file, 1 a directory, 2 a link (never followed). */
function entryOf(FS, name, path) {
  const stat = FS.lstat(path);
  const type = FS.isDir(stat.mode) ? 1 : FS.isLink(stat.mode) ? 2 : 0;
  return { name, type, size: type === 0 ? stat.size : 0, mtime: millisOf(stat.mtime) };
}

function lstatOf(FS, path) {
  try {
    return FS.lstat(path);
  } catch {
    return null;
  }
}

/** A stat time (a Date in this Emscripten, a number in others) in Unix milliseconds. */
function millisOf(time) {
  const ms = time instanceof Date ? time.getTime() : Number(time);
  return Number.isSafeInteger(ms) && ms >= 0 ? ms : 0;
}

/** The regular files under the home: how many, and their bytes. Links are not followed. */
function homeUsage(FS) {
  let bytes = 0;
  let count = 0;
  const walkInto = (dir) => {
    for (const name of FS.readdir(dir)) {
      if (name === "." || name === "..") continue;
      const stat = FS.lstat(`${dir}/${name}`);
      if (FS.isDir(stat.mode)) walkInto(`${dir}/${name}`);
      else if (FS.isFile(stat.mode)) {
        bytes += stat.size;
        count += 1;
      }
    }
  };
  walkInto(HOME);
  return { bytes, count };
}

/** Removes `path`: a file or link, or a directory and what it holds (links are removed, never followed). */
function removeTree(FS, path) {
  const stat = FS.lstat(path);
  if (!FS.isDir(stat.mode)) return FS.unlink(path);
  for (const name of FS.readdir(path)) {
    if (name !== "." && name !== "..") removeTree(FS, `${path}/${name}`);
  }
  FS.rmdir(path);
}

/** The regular files under the session's directories, base64. */
function readFiles(FS) {
  const files = [];
  const walkInto = (dir) => {
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
      if (FS.isDir(mode)) walkInto(path);
      else if (FS.isFile(mode)) files.push({ path, content: base64(FS.readFile(path)) });
    }
  };
  for (const dir of SESSION_DIRS) walkInto(dir);
  return files;
}

/** Puts files in Pyodide's in-memory file system, at their absolute paths. */
function writeFiles(FS, files) {
  for (const { path, ...file } of files) {
    FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    FS.writeFile(path, inputBytes(file));
  }
}

function inputBytes({ content, encoding }) {
  return encoding === "base64" ? Uint8Array.from(atob(content), (c) => c.charCodeAt(0)) : encoder.encode(content);
}

function base64(bytes) {
  let text = "";
  for (let at = 0; at < bytes.length; at += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(at, at + 0x8000));
  }
  return btoa(text);
}

function largestMemory() {
  let largest = 0;
  for (const memory of memories) largest = Math.max(largest, memory.buffer.byteLength);
  return largest;
}

/**
 * Python's heap is WebAssembly memory, which V8's heap limit does not cover.
 * Capping the maximum page count makes growth fail inside the allocator, so
 * Python raises a clean MemoryError instead of the process being killed.
 */
function capWasmMemory(mb) {
  const maxPages = mb > 0 ? Math.floor((mb * 1024 * 1024) / 65536) : 65536;
  const Memory = WebAssembly.Memory;
  function CappedMemory(descriptor) {
    const maximum = Math.min(descriptor.maximum ?? maxPages, maxPages);
    const initial = Math.min(descriptor.initial, maximum);
    const memory = new Memory({ ...descriptor, initial, maximum });
    // Pyodide's one-page shared memory (for Atomics.wait) is not its heap.
    if (!descriptor.shared) memories.push(memory);
    return memory;
  }
  CappedMemory.prototype = Memory.prototype;
  WebAssembly.Memory = CappedMemory;
}
