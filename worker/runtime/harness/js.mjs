// Harness for JavaScript and TypeScript jobs.
//
// Usage: js.mjs [shared|session]
//
// The child starts with no read access at all. The program arrives over the
// pipe (see protocol.mjs) and is imported from a blob: URL, so its stack
// traces name `blob:` rather than a path, and TypeScript types are stripped by
// Deno itself. After the program starts, this file uses only what
// protocol.mjs captured beforehand.
//
// With `shared`, the child serves the shared lane: each job of the batch
// runs in a fresh Worker (fresh globals), one after another; see
// `runShared` below.
import {
  awaitJob,
  dropPersistentStorage,
  readFrame,
  signalEnd,
  signalReady,
  exit,
  hideHostDetails,
  isAllocationFailure,
  jsMemoryInUse,
  reportOutOfMemory,
  withoutHarnessFrames,
  writeError,
} from "./protocol.mjs";
import { serveJsSession } from "./session.mjs";

const harnessDir = new URL(".", import.meta.url).href;
const createObjectURL = URL.createObjectURL;

dropPersistentStorage();
if (Deno.args[0] === "shared") await runShared();
if (Deno.args[0] === "session") {
  // A session loads Node's `process` sooner or later; hide its paths too.
  hideHostDetails("file:///main.js", [], true);
  await serveJsSession();
}
const job = awaitJob();
const typescript = job.language === "typescript";
hideHostDetails(typescript ? "file:///main.ts" : "file:///main.js", job.args ?? [], /\bprocess\b/.test(job.code));
const url = createObjectURL(new Blob([job.code], { type: typescript ? "application/typescript" : "text/javascript" }));
const nonce = job.nonce;
const halfCap = (job.memory_mb * 1024 * 1024) / 2;

/** Ends the run as out of memory if `error` is a real allocation failure. */
function failOnAllocation(error) {
  if (isAllocationFailure(error) && jsMemoryInUse() >= halfCap) {
    writeError(`error: out of memory: ${error.message}\n`);
    reportOutOfMemory(nonce);
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
 * The shared lane: READY once, then for each frame a new module Worker
 * runs the program and reports its exit status as its only message; the
 * Worker is then terminated and the end markers written. The runner sends
 * a job here only if it has no stdin and no files and its code does not
 * name stdin or Node's `process` (the Worker shares this process's stdin,
 * which carries the frames), and it replaces the child when a thread is
 * left behind.
 */
async function runShared() {
  signalReady();
  for (;;) {
    const job = readFrame();
    const typescript = job.language === "typescript";
    const program = createObjectURL(new Blob([job.code], { type: typescript ? "application/typescript" : "text/javascript" }));
    const bootstrap = createObjectURL(new Blob([workerSource(job, program)], { type: "text/javascript" }));
    const worker = new Worker(bootstrap, { type: "module", name: "runbox-job" });
    const status = await new Promise((resolve) => {
      worker.onmessage = (event) => resolve(Number(event.data) & 0xff);
      worker.onerror = (event) => {
        event.preventDefault();
        writeError(`error: Uncaught ${event.message}\n`);
        resolve(1);
      };
    });
    worker.terminate();
    URL.revokeObjectURL(program);
    URL.revokeObjectURL(bootstrap);
    signalEnd(job.nonce, status, true);
  }
}

/**
 * The module a job's Worker starts from: it sets the program's `Deno.args`
 * and `Deno.exit`, imports the program, waits until the timers it set have
 * all run (a program ends when its event loop is empty, as in a child of
 * its own), and posts the exit status. An uncaught error ends it with 1,
 * printed as Deno prints one.
 */
function workerSource(job, program) {
  const mainModule = job.language === "typescript" ? "file:///main.ts" : "file:///main.js";
  return `
const post = self.postMessage.bind(self);
const encoder = new TextEncoder();
const writeError = (text) => Deno.stderr.writeSync(encoder.encode(text));
class Exit {}
let ended = false;
function end(status) {
  if (ended) return;
  ended = true;
  post(status);
}
function uncaught(error) {
  if (ended) return;
  let text;
  try {
    text = String(error?.stack ?? error);
  } catch {
    text = "(the error could not be printed)";
  }
  writeError("error: Uncaught " + text + "\\n");
  end(1);
}
const define = (name, value) => Object.defineProperty(Deno, name, { value, configurable: true, writable: true });
define("args", Object.freeze(${JSON.stringify(job.args ?? [])}));
define("mainModule", ${JSON.stringify(mainModule)});
define("execPath", () => "deno");
// Deno.exit ends the program where it stands: the Worker closes, and the
// throw unwinds what called it.
define("exit", (code = 0) => {
  end(Number(code) & 0xff);
  self.close();
  throw new Exit();
});
const timers = new Set();
let idle = null;
const settle = () => { if (timers.size === 0 && idle) idle(); };
const { setTimeout, setInterval, clearTimeout, clearInterval } = globalThis;
globalThis.setTimeout = function (callback, delay, ...args) {
  const id = setTimeout(() => {
    timers.delete(id);
    try {
      if (typeof callback === "function") callback(...args);
    } finally {
      settle();
    }
  }, delay);
  timers.add(id);
  return id;
};
globalThis.setInterval = function (callback, delay, ...args) {
  const id = setInterval(callback, delay, ...args);
  timers.add(id);
  return id;
};
globalThis.clearTimeout = (id) => { timers.delete(id); clearTimeout(id); settle(); };
globalThis.clearInterval = (id) => { timers.delete(id); clearInterval(id); settle(); };
self.addEventListener("error", (event) => { event.preventDefault(); uncaught(event.error); });
self.addEventListener("unhandledrejection", (event) => { event.preventDefault(); uncaught(event.reason); });
try {
  await import(${JSON.stringify(program)});
} catch (error) {
  uncaught(error);
}
// Until the program's timers have all run, and what they queued has too.
for (;;) {
  if (timers.size > 0) await new Promise((resolve) => (idle = resolve));
  await new Promise((resolve) => setTimeout(resolve, 0));
  if (timers.size === 0) break;
}
end(0);
`;
}
