// Harness for JavaScript and TypeScript jobs.
//
// The child starts with no read access at all. The program arrives over the
// pipe (see protocol.mjs) and is imported from a blob: URL, so its stack
// traces name `blob:` rather than a path, and TypeScript types are stripped by
// Deno itself. After the program starts, this file uses only what
// protocol.mjs captured beforehand.
import {
  awaitJob,
  dropPersistentStorage,
  exit,
  hideHostDetails,
  isAllocationFailure,
  jsMemoryInUse,
  reportOutOfMemory,
  withoutHarnessFrames,
  writeError,
} from "./protocol.mjs";

const harnessDir = new URL(".", import.meta.url).href;
const createObjectURL = URL.createObjectURL;

dropPersistentStorage();
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
