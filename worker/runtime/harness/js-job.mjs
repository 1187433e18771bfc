// One shared-lane JavaScript or TypeScript job, in a Worker of its own
// (see js.mjs). This module and the program share the Worker's realm, which
// is thrown away with the job; nothing here is trusted. It posts
// `{ready: true}` once it can take the job, then one report, `{status,
// allocation}`, once the program is done: its module has
// run, and every timer it set has fired (a program ends when its event loop
// is empty, as in a child of its own). An uncaught error ends it with 1,
// printed as Deno prints one.
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
const post = self.postMessage.bind(self);
const apply = Reflect.apply;
const waitAsync = Atomics.waitAsync;
const never = new Int32Array(new SharedArrayBuffer(4));
// Bound now: a program that patches these breaks its own output only.
const encode = TextEncoder.prototype.encode.bind(new TextEncoder());
const stderrWrite = Deno.stderr.writeSync.bind(Deno.stderr);
const writeError = (text) => stderrWrite(encode(text));
class Exit {}
let ended = false;

function end(status, allocation = false) {
  if (ended) return;
  ended = true;
  post({ status, allocation });
}

function uncaught(error) {
  if (ended) return;
  let text;
  try {
    text = String(error?.stack ?? error);
  } catch {
    text = "(the error could not be printed)";
  }
  writeError(`error: Uncaught ${text}\n`);
  const allocation = error instanceof RangeError &&
    /allocation failed|Out of memory|could not allocate memory/i.test(String(error.message));
  end(1, allocation);
}

const { promise: started, resolve: start } = Promise.withResolvers();
self.onmessage = ({ data }) => {
  self.onmessage = null;
  start(data);
};
post({ ready: true });
const job = await started;
const typescript = job.language === "typescript";
const program = URL.createObjectURL(
  new Blob([job.code], { type: typescript ? "application/typescript" : "text/javascript" }),
);
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
define(Deno, "args", Object.freeze([...job.args]));
define(Deno, "mainModule", typescript ? "file:///main.ts" : "file:///main.js");
define(Deno, "execPath", () => "deno");
// Node's `process` names host paths too. Loading it costs a Worker about
// 60 ms of CPU, so only for a program that mentions it.
if (/\bprocess\b/.test(job.code) && globalThis.process) {
  const process = globalThis.process;
  define(process, "argv", ["deno", typescript ? "/main.ts" : "/main.js", ...job.args]);
  define(process, "argv0", "deno");
  define(process, "execPath", "deno");
  define(process, "execArgv", []);
  // An abort ends the process, as it would a program's own.
  define(process, "abort", () => Deno.kill(Deno.pid, "SIGABRT"));
}
// Deno.exit ends the program where it stands: the report goes first, then
// the Worker closes, and the throw unwinds what called it.
define(Deno, "exit", (code = 0) => {
  end(Number(code) & 0xff);
  self.close();
  throw new Exit();
});

// The program's timers are counted: it ends once they have all run. Deno
// defines the four functions as accessors that load its timers on first
// use, about 2 ms of CPU in every Worker, so they are wrapped the same way:
// a program that never reads them does not pay for them, and sees what a
// program in a child of its own sees (an accessor, which assigning turns
// into a plain property).
const timers = new Set();
let idle = null;
const settle = () => {
  if (timers.size === 0 && idle) idle();
};
const TIMERS = ["setTimeout", "setInterval", "clearTimeout", "clearInterval"];
const denoTimers = TIMERS.map((name) => Object.getOwnPropertyDescriptor(globalThis, name));
let counted = null;
function countedTimers() {
  if (counted) return counted;
  // Indexed, with no iterator, and Deno's getters applied with what was
  // taken at load: the program may have changed Array.prototype or
  // Function.prototype by now.
  const deno = (i) => (denoTimers[i]?.get ? apply(denoTimers[i].get, globalThis, []) : denoTimers[i]?.value);
  const setTimeout = deno(0);
  const setInterval = deno(1);
  const clearTimeout = deno(2);
  const clearInterval = deno(3);
  counted = {
    setTimeout(callback, delay, ...args) {
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
    },
    setInterval(callback, delay, ...args) {
      const id = setInterval(callback, delay, ...args);
      timers.add(id);
      return id;
    },
    clearTimeout(id) {
      timers.delete(id);
      clearTimeout(id);
      settle();
    },
    clearInterval(id) {
      timers.delete(id);
      clearInterval(id);
      settle();
    },
  };
  return counted;
}
for (const name of TIMERS) {
  Object.defineProperty(globalThis, name, {
    get: () => countedTimers()[name],
    set(value) {
      Object.defineProperty(globalThis, name, { value, writable: true, enumerable: true, configurable: true });
    },
    enumerable: true,
    configurable: true,
  });
}
// A job whose token has egress rules: a `fetch` through the proxy (see
// egress-fetch.mjs), which keeps the job going until it has its answer.
if (job.egress) {
  const url = URL.createObjectURL(new Blob([job.egress.source], { type: "text/javascript" }));
  const { egressFetch, portSender } = await import(url);
  URL.revokeObjectURL(url);
  const send = egressFetch(portSender(job.egress.port));
  globalThis.fetch = function fetch(input, init) {
    const request = {};
    timers.add(request);
    const answer = send(input, init);
    answer.finally(() => {
      timers.delete(request);
      settle();
    }).catch(() => {});
    return answer;
  };
}
self.addEventListener("error", (event) => {
  event.preventDefault();
  uncaught(event.error);
});
self.addEventListener("unhandledrejection", (event) => {
  event.preventDefault();
  uncaught(event.reason);
});

try {
  await import(program);
} catch (error) {
  if (!(error instanceof Exit)) uncaught(error);
}
// Until the program's timers have all run, and what they queued has too.
for (;;) {
  if (timers.size > 0) await new Promise((resolve) => (idle = resolve));
  await nextTurn();
  if (timers.size === 0) break;
}
end(0);

/**
 * Resolves about a millisecond later, at a later turn of the event loop,
 * once the promises resolved by now have run and their rejections been
 * reported: the wait a timer of no delay gave (Deno fires one after at
 * least 1 ms), without loading Deno's timers in a Worker whose program
 * never did. Work the program started and did not wait for (a
 * `crypto.subtle` call, a wasm compile), timers aside, is not waited for
 * (docs/api.md); this millisecond gives it the time it had before. V8
 * itself ends the wait, for a value that never changes, so nothing the
 * program can patch takes part (a message through a channel did not end
 * once the program had replaced Function.prototype.call).
 */
function nextTurn() {
  return waitAsync(never, 0, 0, 1).value;
}
