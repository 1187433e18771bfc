// The runner ↔ harness protocol, shared by every harness.
//
// 1. The harness boots (loads whatever the language needs), drops every
//    permission it used for that, and writes READY to stdout. Nothing the user
//    controls has run yet, so the marker cannot be forged.
// 2. The runner writes one frame to stdin: an ASCII decimal byte length, "\n",
//    then that many bytes of UTF-8 JSON (`{"code": "...", ...}`; unknown
//    fields are ignored so the protocol can grow).
// 3. Everything after the frame is the program's own stdin, up to EOF.
//
// The code arrives over the pipe, never as a file, so the child needs no read
// access at all once it is booted.

export const READY = "\u0006runbox-ready\n";

/** Exit status the harnesses use when the program ran out of memory. */
export const MEMORY_EXIT = 133;

const MAX_FRAME = 64 * 1024 * 1024;

/** Reads exactly `n` bytes from stdin, never more: the rest belongs to the program. */
function readExactly(n) {
  const out = new Uint8Array(n);
  let got = 0;
  while (got < n) {
    const r = Deno.stdin.readSync(out.subarray(got));
    if (r === null) throw new Error(`stdin closed after ${got} of ${n} frame bytes`);
    got += r;
  }
  return out;
}

/** Signals readiness, then blocks until the runner sends the job frame. */
export function awaitJob() {
  writeAll(Deno.stdout, new TextEncoder().encode(READY));
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
    const r = Deno.stdin.readSync(buf);
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

export function writeAll(stream, bytes) {
  let at = 0;
  while (at < bytes.length) at += stream.writeSync(bytes.subarray(at));
}

/** True for the errors V8 throws when an allocation outside the JS heap fails. */
export function isAllocationFailure(error) {
  return error instanceof RangeError &&
    /allocation failed|Out of memory|could not allocate memory/i.test(String(error.message));
}

/**
 * Removes web storage from the global scope. Deno persists `localStorage` and
 * `caches` under DENO_DIR; the runner already gives every child a throwaway
 * DENO_DIR, and this keeps the program from reaching them at all.
 */
export function dropPersistentStorage() {
  for (const name of ["localStorage", "sessionStorage", "caches"]) {
    try {
      delete globalThis[name];
    } catch {
      // Not configurable in this Deno: the throwaway DENO_DIR still applies.
    }
  }
}
