// A JavaScript session's realm: one Worker that runs the session's execs,
// one after another, for as long as the session lives (see js.mjs). This
// module and the execs share the realm; nothing here is trusted.
//
// Each exec runs as a classic script (`vm.runInThisContext`), so its
// top-level `let`, `const`, `class` and `function` declarations stay
// visible to the next, as in a REPL. A script has no top-level `await` or
// `import`: an exec that does not compile as one runs as a module instead,
// in the same realm, whose declarations are its own (assign to
// `globalThis` to keep a value).
//
// An exec ends once its code has run, the promise it completed with (if
// any) has settled, and the timeouts it set have fired; an error thrown by
// any of them fails it. Intervals and Workers live on with the session.
//
// The Worker posts `{ready: true}` once it can take requests. Requests,
// the Worker's messages from the harness: `{op: "egress", egress}`, first
// if at all (see `useEgress`), and `{op: "run", code, seq}`, one exec,
// whose one reply is `{status, allocation, seq}`, or `{status, exit: true,
// seq}` when the exec called `Deno.exit` or `process.exit`. Each request's
// `seq` is random and its own. The session's code runs in this realm and
// can post what it likes; the harness takes only a reply that bears the
// `seq` of the request it waits for, which nobody knows before the
// request arrives (see `asker` in js.mjs).
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
const { runInThisContext } = await import("node:vm");
// Bound now: an exec that patches these breaks its own output only.
const encode = TextEncoder.prototype.encode.bind(new TextEncoder());
const stderrWrite = Deno.stderr.writeSync.bind(Deno.stderr);
const writeError = (text) => stderrWrite(encode(text));
const ownUrl = import.meta.url;
const post = self.postMessage.bind(self);

// Scripts see Node's `process`, which names host paths. Some of its
// properties are accessors that cannot be redefined in a Worker; their
// setters take the value instead.
const define = (object, name, value) => {
  try {
    Object.defineProperty(object, name, { value, configurable: true, writable: true });
  } catch {
    try {
      object[name] = value;
    } catch {
      // Neither: the path stays visible (documented).
    }
  }
};
class Exit {}
// Deno.exit and process.exit end the session's process with the code, as
// they would end a program's own; the harness does the exiting, told in
// the reply to the exec in hand. Called once its exec was answered (from
// an interval, say), the code ends the process at the next exec instead,
// which does not run.
let exited = null;
const exitWith = (code = 0) => {
  const status = Number(code) & 0xff;
  if (current) exitNow(status, current.seq);
  else exited ??= status;
  throw new Exit();
};
const exitNow = (status, seq) => {
  post({ status, exit: true, seq });
  self.close();
};
const process = runInThisContext("globalThis.process ?? process");
for (const [name, value] of [["argv", ["deno", "/main.js"]], ["argv0", "deno"], ["execPath", "deno"], ["execArgv", []]]) {
  define(process, name, value);
}
define(process, "exit", exitWith);
define(process, "abort", () => Deno.kill(Deno.pid, "SIGABRT"));
for (const [name, value] of [["mainModule", "file:///main.js"], ["execPath", () => "deno"], ["args", []], ["exit", exitWith]]) {
  define(Deno, name, value);
}

const isThenable = (value) =>
  value !== null && (typeof value === "object" || typeof value === "function") && typeof value.then === "function";
// The stack lines of node:vm and of this module are not the exec's.
const { apply } = Reflect;
const [split, filter, join, includes] = [String.prototype.split, Array.prototype.filter, Array.prototype.join, String.prototype.includes];
const ours = (line) => apply(includes, line, ["ext:deno_node/vm.js"]) || apply(includes, line, [ownUrl]);
const withoutVmFrames = (text) => apply(join, apply(filter, apply(split, text, ["\n"]), [(line) => !ours(line)]), ["\n"]);

let current = null;
function report(error, prefix = "") {
  if (error instanceof Exit) return;
  let text;
  try {
    text = withoutVmFrames(String(error?.stack ?? error));
  } catch {
    text = "(the error could not be printed)";
  }
  writeError(`error: Uncaught ${prefix}${text}\n`);
  if (!current) return;
  current.failed = true;
  current.allocation ||= error instanceof RangeError &&
    /allocation failed|Out of memory|could not allocate memory/i.test(String(error.message));
}

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
globalThis.addEventListener("unhandledrejection", (event) => {
  event.preventDefault();
  report(event.reason, "(in promise) ");
});
globalThis.addEventListener("error", (event) => {
  event.preventDefault();
  report(event.error ?? event.message);
});

let execs = 0;
async function run(code, seq) {
  if (exited !== null) return exitNow(exited, seq);
  execs += 1;
  current = { failed: false, allocation: false, seq };
  try {
    let value;
    try {
      value = runInThisContext(code, { filename: `exec-${execs}.js`, displayErrors: false });
    } catch (error) {
      // A syntax error as a script: most often top-level await or import.
      if (!(error instanceof SyntaxError)) throw error;
      const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
      try {
        await import(url);
      } finally {
        URL.revokeObjectURL(url);
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
  const { failed, allocation } = current;
  current = null;
  post({ status: failed ? 1 : 0, allocation, seq });
}

let queue = Promise.resolve();
self.onmessage = ({ data }) => {
  if (data?.op === "egress") queue = queue.then(() => useEgress(data.egress));
  else if (data?.op === "run") queue = queue.then(() => run(String(data.code), data.seq));
};

/**
 * The session's token has egress rules: a `fetch` through the proxy (see
 * egress-fetch.mjs); an exec that starts one ends once it is answered.
 */
async function useEgress({ source, port }) {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const { egressFetch, portSender } = await import(url);
  URL.revokeObjectURL(url);
  const send = egressFetch(portSender(port));
  globalThis.fetch = function fetch(input, init) {
    const answer = send(input, init);
    if (!current) return answer;
    const request = {};
    pending.add(request);
    answer.finally(() => {
      pending.delete(request);
      if (pending.size === 0 && settled) settled();
    }).catch(() => {});
    return answer;
  };
}
post({ ready: true });
