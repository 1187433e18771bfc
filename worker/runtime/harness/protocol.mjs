// The runner ↔ harness protocol, shared by every harness.
//
// The rule every harness follows: a job runs in a realm of its own, and
// what runbox trusts (the frames, their nonces, the result channel) lives
// where the job holds no reference to it.
//
// A single-use child runs one job, then exits:
//
// 1. The harness boots (loads whatever the language needs), drops every
//    permission it used for that, and writes READY to stdout. Nothing the
//    user controls has run yet, so the marker cannot be forged.
// 2. The runner writes one frame to stdin: an ASCII decimal byte length,
//    "\n", then that many bytes of UTF-8 JSON (`{"code": "...", "nonce":
//    "...", "memory_mb": n, ...}`; unknown fields are ignored so the
//    protocol can grow). A JavaScript program's own stdin follows the
//    frame, up to EOF; a Python program's is the frame's `stdin` field.
//    A JavaScript program runs in this realm; a Python program in a bare
//    realm of its own (python-realms.mjs).
// 3. If the program ended on an allocation failure, the harness's last
//    bytes on stderr are MEMORY_MARKER, the frame's nonce and "\n", and it
//    then holds the process, memory and all, until the runner kills it.
//    This is only a claim: the runner reads the process's memory from the
//    kernel and reports `memory_exceeded` only if the program really holds
//    at least half its cap (see `child.rs`). A JS program shares the realm
//    of its harness, so it could make the claim itself; it gains nothing.
// 4. A job with `return_files` (Python only) gets, on stdout after the
//    program's last output, FILES_MARKER + nonce + "\n" and a returned-files
//    section (`filesSection`).
//
// A shared-lane or session child runs many jobs, and its frames never touch
// stdin, stdout or stderr, which the job's code can reach. They travel on
// two FIFOs in the child's private directory (see `Channel`), which the
// harness opens while it boots and nothing can open once it has dropped its
// permissions. Each job runs in a realm of its own, so no job can reach the
// FIFOs or the realm of the harness, or another job: a JS job in a Worker
// (an isolate with its own realm and its own table of open files), a Python
// job in a bare V8 context with no Deno API, a session in a Worker. The
// harness reports `started` when the job's realm takes it: its time limit
// runs from then, not while it waited for a realm to boot. The job's output
// goes to stdout and stderr as it is written; once the job is over, the
// harness writes END_MARKER + nonce + "\n" on both streams, so the runner
// can tell one job's output from the next, and then the job's report on
// the results FIFO.
//
// Whatever a job makes crosses as raw bytes with its length, never as JSON
// text, which cannot carry every value (a name with a lone surrogate, say):
// a returned file's name and content, the reason a session's code gave for
// a failure. A report's line holds only what the harness makes. A value
// too long for its cap is cut on bytes.
//
// The code arrives over a pipe, never as a file, so a child needs no read
// access to anything of the user's once it is booted.

export const READY = "\u0006runbox-ready\n";
const END_MARKER = "\u0006runbox-end:";
const FILES_MARKER = "\u0006runbox-files:";
const MEMORY_MARKER = "\u0006runbox-out-of-memory:";
const MAX_FRAME = 64 * 1024 * 1024;
// The most of a failure's reason sent (the runner's MAX_REASON_BYTES).
const MAX_REASON_BYTES = 8192;

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
function readExactly(n, read = stdinRead) {
  const out = new Uint8Array(n);
  let got = 0;
  while (got < n) {
    const r = read(out.subarray(got));
    if (r === null) throw new Error(`stdin closed after ${got} of ${n} frame bytes`);
    got += r;
  }
  return out;
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

/** Ends a job's output on stdout and stderr, in a child that runs many: see the header. */
export function endOutput(nonce) {
  writeAll(1, encode(`${END_MARKER}${nonce}\n`));
  writeAll(2, encode(`${END_MARKER}${nonce}\n`));
}

/** Sends the files a job asked back (see `filesSection`) on stdout. */
export function sendFiles(nonce, files) {
  writeAll(1, encode(`${FILES_MARKER}${nonce}\n`));
  writeAll(1, filesSection(files));
}

/**
 * The returned-files section for `{files: [{name, content, size,
 * truncated}], truncated}`, where each `name` and `content` are bytes: a
 * line of JSON with each file's lengths and flags, then each file's name
 * and content, raw (the runner's reader is worker/src/sandbox/returned.rs).
 */
export function filesSection({ files, truncated }) {
  const head = files.map(({ name, content, size, truncated }) => ({
    path: name.length,
    content: content.length,
    size,
    truncated,
  }));
  const parts = [encode(`${JSON.stringify({ files: head, truncated })}\n`)];
  for (const { name, content } of files) parts.push(name, content);
  return joined(parts);
}

/**
 * The listing section for `{entries: [{name, type, size, mtime}],
 * truncated}`, where each `name` is bytes and `type` is 0 (a file), 1 (a
 * directory) or 2 (a link): a line of JSON with each entry's numbers, then
 * each name, raw (the runner's reader is worker/src/sandbox/listing.rs).
 */
export function listingSection({ entries, truncated }) {
  const head = entries.map(({ name, type, size, mtime }) => ({ name: name.length, type, size, mtime }));
  const parts = [encode(`${JSON.stringify({ entries: head, truncated })}\n`), ...entries.map(({ name }) => name)];
  return joined(parts);
}

/** The byte arrays `parts`, one after the other, in one array. */
function joined(parts) {
  const whole = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    whole.set(part, at);
    at += part.length;
  }
  return whole;
}

/** `text` as UTF-8 (a lone surrogate becomes U+FFFD), its first `max` bytes at most. */
export function utf8(text, max = Infinity) {
  const bytes = encode(text);
  return bytes.length > max ? bytes.subarray(0, max) : bytes;
}

/** Standard base64 of `bytes`. */
export function base64(bytes) {
  let text = "";
  for (let at = 0; at < bytes.length; at += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(at, at + 0x8000));
  }
  return btoa(text);
}

/** Blocks until the runner sends a job frame on stdin, and returns it. */
export function readFrame() {
  return frameFrom(readExactly);
}

/**
 * Reads a frame through `readExactly(n)`, which returns n bytes: a
 * decimal length, "\n", then that many bytes of JSON.
 */
function frameFrom(readExactly) {
  const frame = frameParts();
  let step = frame.next();
  while (!step.done) step = frame.next(readExactly(step.value));
  return step.value;
}

/** As `frameFrom`, with a `readExactly` that returns a promise. */
async function frameFromAsync(readExactly) {
  const frame = frameParts();
  let step = frame.next();
  while (!step.done) step = frame.next(await readExactly(step.value));
  return step.value;
}

/** A frame's parts: yields how many bytes it wants next, and is given them. */
function* frameParts() {
  let header = "";
  for (;;) {
    const [byte] = yield 1;
    if (byte === 0x0a) break;
    if (byte < 0x30 || byte > 0x39 || header.length > 10) throw new Error("malformed frame header");
    header += String.fromCharCode(byte);
  }
  const length = Number(header);
  if (!(length > 0 && length <= MAX_FRAME)) throw new Error(`bad frame length ${header}`);
  return JSON.parse(new TextDecoder().decode(yield length));
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

/**
 * Tells the runner of a single-use child that the program ended on an
 * allocation failure, then holds the process, and the memory the program
 * holds, until the runner has measured it and killed it (see the header).
 */
export function claimOutOfMemory(nonce) {
  writeError(`${MEMORY_MARKER}${nonce}\n`);
  for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
}

/**
 * The control channel of a child that runs many jobs: frames from the
 * runner on the `frames` FIFO, reports to it on the `results` FIFO (see the
 * header). Open it while booting, before the permissions are dropped.
 *
 * A report is one line of JSON (`{"kind": ...}`), followed by `bytes` raw
 * bytes when it says so.
 */
export class Channel {
  #frames;
  #results;

  constructor(framesPath, resultsPath) {
    // Results first: the runner has its end open already, frames' too.
    this.#results = Deno.openSync(resultsPath, { write: true });
    this.#frames = Deno.openSync(framesPath, { read: true });
  }

  /** Blocks until the runner sends a frame, and returns it. */
  readFrame() {
    return frameFrom((n) => this.#readExactly(n));
  }

  /**
   * Waits for the runner's next frame with this realm's event loop
   * running, so that what arrives meanwhile is handled now, between jobs
   * (a session's egress request is refused then, not taken for the next
   * exec's once that has begun).
   */
  nextFrame() {
    return frameFromAsync(async (n) => {
      const out = new Uint8Array(n);
      let got = 0;
      while (got < n) {
        const read = await this.#frames.read(out.subarray(got));
        if (read === null) throw new Error(`the frames FIFO closed after ${got} of ${n} bytes`);
        got += read;
      }
      return out;
    });
  }

  /** Reads the `n` raw bytes the runner sends after a frame that announces them. */
  readBytes(n) {
    return n > 0 ? this.#readExactly(n) : new Uint8Array(0);
  }

  /**
   * Sends `report`, then the byte arrays `parts` raw, one after the other,
   * if any are given (their total length goes in the report). A report's
   * `error`, a failure's reason, which a job may have made, goes as bytes
   * too, its first MAX_REASON_BYTES (see the header).
   */
  report(report, ...parts) {
    if (typeof report.error === "string") {
      const { error, ...rest } = report;
      return this.report({ ...rest, failed: true }, utf8(error, MAX_REASON_BYTES));
    }
    // Each part's length is read once: what goes out is what the report announced.
    const sized = parts.map((part) => part.subarray(0, part.length));
    const line = sized.length > 0 ? { ...report, bytes: sized.reduce((sum, part) => sum + part.length, 0) } : report;
    this.#write(encode(`${JSON.stringify(line)}\n`));
    for (const part of sized) this.#write(part);
  }

  #readExactly(n) {
    return readExactly(n, (buffer) => this.#frames.readSync(buffer));
  }

  #write(bytes) {
    let at = 0;
    while (at < bytes.length) at += this.#results.writeSync(bytes.subarray(at));
  }
}

/** Reads harness files while the child may still read: sources for Workers. */
export function readHarnessFile(name) {
  return Deno.readTextFileSync(new URL(name, import.meta.url));
}

/** A `blob:` URL for module `source`, importable from any Worker of this process. */
export function moduleUrl(source) {
  return URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
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
 * A second line behind the Workers: a fingerprint of this realm's globals
 * and built-in prototypes. No job runs in this realm or holds a reference
 * into it, so it never changes; if it ever did, the runner replaces the
 * child. `begin()` takes the fingerprint before a job, `isClean()` compares.
 */
export function watchRealm() {
  const ownKeys = Reflect.ownKeys;
  const same = Object.is;
  const describe = Reflect.getOwnPropertyDescriptor;
  const watched = [
    globalThis, Object, Object.prototype, Function.prototype, Array, Array.prototype, String.prototype,
    Number.prototype, Boolean.prototype, Symbol, Symbol.prototype, Promise, Promise.prototype, Map.prototype,
    Set.prototype, WeakMap.prototype, RegExp.prototype, Error.prototype, JSON, Math, Reflect, ArrayBuffer.prototype,
    DataView.prototype, Uint8Array, Uint8Array.prototype, Object.getPrototypeOf(Uint8Array.prototype),
    TextDecoder.prototype, TextEncoder.prototype, WebAssembly, WebAssembly.Module.prototype,
    WebAssembly.Instance.prototype, WebAssembly.Memory.prototype, Worker.prototype, console, Deno, Deno.stdout,
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
      before = fingerprint();
    },
    isClean() {
      const after = fingerprint();
      if (after.length !== before.length) return false;
      for (let i = 0; i < after.length; i++) if (!same(after[i], before[i])) return false;
      return true;
    },
  };
}
