// Harness for JavaScript and TypeScript jobs.
//
// The child starts with no read access at all. The program arrives over the
// pipe (see protocol.mjs) and is imported from a blob: URL, so its stack
// traces name `blob:` rather than a path, and TypeScript types are stripped by
// Deno itself.
import { awaitJob, dropPersistentStorage, isAllocationFailure, MEMORY_EXIT } from "./protocol.mjs";

dropPersistentStorage();
const job = awaitJob();
const type = job.language === "typescript" ? "application/typescript" : "text/javascript";
const url = URL.createObjectURL(new Blob([job.code], { type }));

function failOnAllocation(error) {
  if (isAllocationFailure(error)) {
    console.error(`error: out of memory: ${error.message}`);
    Deno.exit(MEMORY_EXIT);
  }
}
globalThis.addEventListener("error", (event) => failOnAllocation(event.error));
globalThis.addEventListener("unhandledrejection", (event) => failOnAllocation(event.reason));

try {
  await import(url);
} catch (error) {
  failOnAllocation(error);
  console.error(`error: Uncaught ${error?.stack ?? error}`);
  Deno.exit(1);
}
