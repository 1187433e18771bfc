// The runner ↔ harness protocol, shared by every harness.
//
// 1. The harness boots (loads whatever the language needs), drops every
//    permission it used for that, and writes READY to stdout. Nothing the user
//    controls has run yet, so the marker cannot be forged.
// 2. The runner writes one frame to stdin: an ASCII decimal byte length, "\n",
//    then that many bytes of UTF-8 JSON (`{"code": "...", "nonce": "...",
//    "memory_mb": n, ...}`; unknown fields are ignored so the protocol can grow).
// 3. Everything after the frame is the program's own stdin, up to EOF.
// 4. If the program ended on an allocation failure that the harness confirms
//    (see `reportOutOfMemory`), the harness's last bytes on stderr are
//    MEMORY_MARKER followed by the frame's nonce and "\n". The program never
//    sees the nonce, so it cannot forge the marker; the runner strips it.
//
// The code arrives over the pipe, never as a file, so the child needs no read
// access at all once it is booted.
//
// A job with `return_files` (Python only) gets, on stdout after the
// program's last output, FILES_MARKER + nonce + "\n" and one line of JSON,
// `{"files": [{path, content (base64), size, truncated}], "truncated": bool}`.
//
// A shared-lane child (see python.mjs and js.mjs) runs many jobs of one
// batch, so its stdin carries only frames: a Python program's stdin is the
// frame's `stdin` field (a JS job with stdin never goes there). After each job the harness writes, in one write each,
// END_MARKER + nonce + ":" + exit status + ":" + (1 if the realm is still
// clean, else 0) + "\n" on stdout, and END_MARKER + nonce + "\n" on stderr.
// The runner reads each stream up to its marker; the program never sees the
// nonce, so it cannot end its own output early or forge a status.
//
// The program shares this realm: it can replace any global, prototype method
// or property of `Deno`. So everything a harness uses once the program has
// started is captured here, at load time, before any user code exists.

export const READY = "\u0006runbox-ready\n";
const END_MARKER = "\u0006runbox-end:";
const FILES_MARKER = "\u0006runbox-files:";
const MEMORY_MARKER = "\u0006runbox-out-of-memory:";
const MAX_FRAME = 64 * 1024 * 1024;

const apply = Reflect.apply;
const stdinRead = Deno.stdin.readSync.bind(Deno.stdin);
const stdoutWrite = Deno.stdout.writeSync.bind(Deno.stdout);
const stderrWrite = Deno.stderr.writeSync.bind(Deno.stderr);
const denoExit = Deno.exit;
const memoryUsage = Deno.memoryUsage;
const subarray = Uint8Array.prototype.subarray;
const encoder = new TextEncoder();
const encode = encoder.encode.bind(encoder);
const RangeErrorClass = RangeError;
const test = RegExp.prototype.test;
const toText = String;
const split = String.prototype.split;
const includes = String.prototype.includes;
const filter = Array.prototype.filter;
const join = Array.prototype.join;
const errorMessage = Object.getOwnPropertyDescriptor(Error.prototype, "message") ?? null;
const memoryBuffer = Object.getOwnPropertyDescriptor(WebAssembly.Memory.prototype, "buffer").get;
const byteLength = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, "byteLength").get;

/** Ends the process with `code`, whatever the program did to `Deno.exit`. */
export function exit(code) {
  denoExit(code);
}

/** Writes all of `bytes` to stdout (1) or stderr (2). */
export function writeAll(fd, bytes) {
  const write = fd === 1 ? stdoutWrite : stderrWrite;
  let at = 0;
  while (at < bytes.length) at += write(apply(subarray, bytes, [at]));
}

/** Writes `text` to stderr. */
export function writeError(text) {
  writeAll(2, encode(text));
}

/** Reads exactly `n` bytes from stdin, never more: the rest belongs to the program. */
function readExactly(n) {
  const out = new Uint8Array(n);
  let got = 0;
  while (got < n) {
    const r = stdinRead(out.subarray(got));
    if (r === null) throw new Error(`stdin closed after ${got} of ${n} frame bytes`);
    got += r;
  }
  return out;
}

/** Reads the `n` raw bytes the runner sends after a frame that announces them. */
export function readBytes(n) {
  return n > 0 ? readExactly(n) : new Uint8Array(0);
}

/** Signals readiness, then blocks until the runner sends the job frame. */
export function awaitJob() {
  signalReady();
  return readFrame();
}

/** Tells the runner the harness is booted. */
export function signalReady() {
  writeAll(1, encode(READY));
}

/**
 * Ends a shared-lane job or a session's step: see the header. `flag` is
 * whether the child is clean (true/false), or 2 for a session exec that
 * was interrupted at its deadline.
 */
export function signalEnd(nonce, status, flag) {
  writeAll(1, encode(`${END_MARKER}${nonce}:${status}:${flag === 2 ? 2 : flag ? 1 : 0}\n`));
  writeAll(2, encode(`${END_MARKER}${nonce}\n`));
}

/** Sends the files a job asked back; see the header. */
export function sendFiles(nonce, files) {
  writeAll(1, encode(`${FILES_MARKER}${nonce}\n${JSON.stringify(files)}\n`));
}

/** Standard base64 of `bytes`. */
export function base64(bytes) {
  let text = "";
  for (let at = 0; at < bytes.length; at += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(at, at + 0x8000));
  }
  return btoa(text);
}

/** Blocks until the runner sends a job frame, and returns it. */
export function readFrame() {
  let header = "";
  for (;;) {
    const [byte] = readExactly(1);
    if (byte === 0x0a) break;
    if (byte < 0x30 || byte > 0x39 || header.length > 10) throw new Error("malformed frame header");
    header += String.fromCharCode(byte);
  }
  const length = Number(header);
  if (!(length > 0 && length <= MAX_FRAME)) throw new Error(`bad frame length ${header}`);
  return JSON.parse(new TextDecoder().decode(readExactly(length)));
}

/** Reads the program's stdin to EOF. */
export function readRest() {
  const chunks = [];
  let total = 0;
  const buf = new Uint8Array(64 * 1024);
  for (;;) {
    const r = stdinRead(buf);
    if (r === null) break;
    chunks.push(buf.slice(0, r));
    total += r;
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/** True for the errors V8 throws when an allocation outside the JS heap fails. */
export function isAllocationFailure(error) {
  if (!(error instanceof RangeErrorClass)) return false;
  const message = errorMessage?.get ? apply(errorMessage.get, error, []) : error.message;
  return apply(test, /allocation failed|Out of memory|could not allocate memory/i, [toText(message)]);
}

/** Bytes the JS heap and ArrayBuffers hold now, as V8 counts them. */
export function jsMemoryInUse() {
  const { heapUsed, external } = memoryUsage();
  return heapUsed + external;
}

/** Bytes a WebAssembly memory has grown to. */
export function wasmMemorySize(memory) {
  return apply(byteLength, apply(memoryBuffer, memory, []), []);
}

/**
 * Tells the runner that the program ran out of memory, then exits. A
 * harness calls this only after checking, with numbers the program cannot
 * fake, that the program really holds at least half its cap: an error the
 * program throws or raises itself is just an error.
 */
export function reportOutOfMemory(nonce) {
  writeError(`${MEMORY_MARKER}${nonce}\n`);
  exit(1);
}

/**
 * Removes web storage from the global scope. The runner also makes the
 * DENO_DIR paths where Deno would store it unusable (which covers Workers,
 * whose globals this cannot reach).
 */
export function dropPersistentStorage() {
  for (const name of ["localStorage", "sessionStorage", "caches"]) {
    try {
      delete globalThis[name];
    } catch {
      // Not configurable in this Deno: the runner's blocked DENO_DIR still applies.
    }
  }
  // No adapter exists anyway (DENO_WEBGPU_BACKEND is empty); drop the entry point.
  try {
    delete Navigator.prototype.gpu;
  } catch {
    // As above.
  }
}

/**
 * Hides host paths that are cheap to hide: the harness's own path, the
 * Deno binary's path and the harness's arguments, which become the job's
 * `args`. Node's `process.argv` reads the first two from `Deno` when it
 * loads; the job's args are added to it only when `withProcess` says the
 * program mentions `process`, because loading it costs a JS child about
 * 60 ms of CPU. (`Deno.cwd()` still names the job's temporary directory.)
 * Scripts run by `node:vm` see Node's own `process`, which a session
 * passes as `processObject`.
 */
export function hideHostDetails(mainModule, args, withProcess, processObject) {
  const define = (object, name, value) => {
    try {
      Object.defineProperty(object, name, { value, configurable: true, writable: true });
    } catch {
      // Not configurable in this Deno: the path stays visible (documented).
    }
  };
  define(Deno, "mainModule", mainModule);
  define(Deno, "execPath", () => "deno");
  define(Deno, "args", Object.freeze([...args]));
  // Read only when wanted: loading Node's `process` costs a JS child time.
  const process = withProcess ? (processObject ?? globalThis.process) : undefined;
  if (process) {
    // Already loaded in the Python child, with the harness's own arguments.
    define(process, "argv", ["deno", new URL(mainModule).pathname, ...args]);
    define(process, "argv0", "deno");
    define(process, "execPath", "deno");
    define(process, "execArgv", []);
  }
}

/** Cuts stack lines that name `dir` (the harness's own files). */
export function withoutHarnessFrames(stack, dir) {
  const lines = apply(split, toText(stack), ["\n"]);
  return apply(join, apply(filter, lines, [(line) => !apply(includes, line, [dir])]), ["\n"]);
}

/**
 * Watches what a job in a shared-lane child could leave behind for the
 * next one: timers and Workers it started, and changes to the globals and
 * built-in prototypes of the realm. `begin()` takes a fingerprint before a
 * job; `isClean()` afterwards says whether anything changed. The runner
 * also counts the process's threads. When in doubt the child is replaced,
 * so this only has to be right when it says "clean".
 *
 * Call before anything else is loaded, so that every later user of
 * setTimeout, setInterval and Worker gets the counting versions.
 */
export function watchRealm() {
  const ownKeys = Reflect.ownKeys;
  const same = Object.is;
  const describe = Reflect.getOwnPropertyDescriptor;
  const pending = new Set();
  let workers = 0;
  const { setTimeout, setInterval, clearTimeout, clearInterval, Worker } = globalThis;
  const add = apply.bind(null, Set.prototype.add);
  const remove = apply.bind(null, Set.prototype.delete);
  globalThis.setTimeout = function (callback, delay, ...args) {
    const id = apply(setTimeout, globalThis, [function () {
      remove(pending, [id]);
      return typeof callback === "function" ? apply(callback, this, args) : undefined;
    }, delay]);
    add(pending, [id]);
    return id;
  };
  globalThis.setInterval = function (...args) {
    const id = apply(setInterval, globalThis, args);
    add(pending, [id]);
    return id;
  };
  globalThis.clearTimeout = (id) => (remove(pending, [id]), apply(clearTimeout, globalThis, [id]));
  globalThis.clearInterval = (id) => (remove(pending, [id]), apply(clearInterval, globalThis, [id]));
  if (Worker) {
    globalThis.Worker = new Proxy(Worker, { construct: (target, args, newTarget) => (workers++, Reflect.construct(target, args, newTarget)) });
  }

  const watched = [
    globalThis, Object, Object.prototype, Function.prototype, Array, Array.prototype, String.prototype,
    Number.prototype, Boolean.prototype, Symbol, Symbol.prototype, Promise, Promise.prototype, Map.prototype,
    Set.prototype, WeakMap.prototype, RegExp.prototype, Error.prototype, JSON, Math, Reflect, ArrayBuffer.prototype,
    DataView.prototype, Uint8Array.prototype, Object.getPrototypeOf(Uint8Array.prototype), TextDecoder.prototype,
    TextEncoder.prototype, WebAssembly, WebAssembly.Module.prototype, WebAssembly.Instance.prototype,
    WebAssembly.Table.prototype, WebAssembly.Global.prototype, Deno,
  ];
  const fingerprint = () => {
    const parts = [];
    for (let i = 0; i < watched.length; i++) {
      const object = watched[i];
      const keys = ownKeys(object);
      parts[parts.length] = keys.length;
      for (let k = 0; k < keys.length; k++) {
        const d = describe(object, keys[k]);
        parts[parts.length] = keys[k];
        parts[parts.length] = d.value;
        parts[parts.length] = d.get;
        parts[parts.length] = d.set;
      }
    }
    return parts;
  };
  let before = [];
  return {
    begin() {
      workers = 0;
      before = fingerprint();
    },
    isClean() {
      if (workers > 0 || pending.size > 0) return false;
      const after = fingerprint();
      if (after.length !== before.length) return false;
      for (let i = 0; i < after.length; i++) if (!same(after[i], before[i])) return false;
      return true;
    },
  };
}
