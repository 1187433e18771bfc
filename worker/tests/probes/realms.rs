//! A Python job's bare realm: a node:vm context on the harness's own
//! thread, in the isolate where the harness keeps `Deno`, the frames and
//! the result channel. Any object of the harness's realm in a job's hands
//! is a full escape (`x.constructor.constructor("return Deno")()`), so
//! every way V8 or Deno could hand one over is probed here, as is every
//! way a job could leave something behind for the next job of its lane.
//!
//! A review of the realm-per-job harness, as a stranger with the code in
//! hand, found the first four; each probe failed on the harness it was
//! found in. The rest are the defences that held and matter most.
//!
//! Each check prints what it found; a value "of the harness" is one whose
//! prototype chain ends at another realm's `Object.prototype` (see
//! [`FOREIGN`]). A session's interpreter runs in a Worker, an isolate of
//! its own, where every object is the job's: the same checks hold there.

use runbox_common::{JobSpec, Outcome, Status, Verdict};
use runbox_worker::sandbox::Runner;

use crate::util::*;

/// Python that defines `foreign(value)` in the job's JS realm: whether
/// `value` is an object of another realm, i.e. its prototype chain ends
/// at an `Object.prototype` that is not this realm's. Probes append to it.
const FOREIGN: &str = r#"import js
js.eval("""globalThis.foreign = (value) => {
  if (value === null || (typeof value !== "object" && typeof value !== "function")) return false;
  let object = value;
  for (let i = 0; i < 1000; i++) {
    let next;
    try { next = Reflect.getPrototypeOf(object); } catch { return false; }
    if (next === null) return object !== value && object !== Object.prototype;
    object = next;
  }
  return false;
}""")
"#;

fn with_foreign(code: &str) -> String {
    format!("{FOREIGN}{code}")
}

/// The honest job that follows an attack in its lane: exactly its own
/// output and verdict; `reused` says whether it ran in the same child.
async fn honest_after(runner: &Runner, lane: &str, reused: Option<bool>) {
    let code = "import asyncio\nawait asyncio.sleep(0.6)\nprint('honest')";
    let spec = JobSpec { expected_stdout: Some("honest\n".into()), ..spec(Py, code) };
    let next = run_in(runner, lane, spec).await;
    assert_ran(&next.outcome, 0, "honest\n");
    assert_eq!((next.outcome.stderr.as_str(), next.outcome.verdict), ("", Some(Verdict::Accepted)), "{next:#?}");
    if let Some(reused) = reused {
        assert_eq!(next.outcome.warm, reused, "boot {:?}: {:#?}", next.boot, next.outcome);
    }
}

/// Hole 1: with a function at `Error.prepareStackTrace`, Deno's stack
/// trace hook (the isolate's, so also this realm's) calls it with call
/// sites whose prototype is of the harness's realm: from any stack, the
/// harness's `Function`, then `Deno`. The realm now fixes
/// `globalThis.Error` and its `prepareStackTrace`; each way of putting a
/// function where the hook looks is tried, on a stack that runs through
/// the harness (a timer's callback), with `.stack` and with
/// `Error.captureStackTrace`.
#[tokio::test]
async fn call_sites_of_a_stack_trace_are_never_the_harnesss() {
    let code = with_foreign(
        r#"
print(await js.eval("""(async () => {
  const OwnError = Error;
  let handed = 0, harness = 0, tried = 0;
  const collect = (error, sites) => {
    if (Array.isArray(sites)) for (const site of sites) { handed++; if (foreign(site)) harness++; }
    return "formatted";
  };
  const ways = [
    [() => { Error.prepareStackTrace = collect; }, () => { Error.prepareStackTrace = undefined; }],
    [() => Object.defineProperty(Error, "prepareStackTrace", { value: collect, configurable: true, writable: true }),
     () => { delete Error.prepareStackTrace; }],
    [() => { Function.prototype.prepareStackTrace = collect; }, () => { delete Function.prototype.prepareStackTrace; }],
    [() => { Object.prototype.prepareStackTrace = collect; }, () => { delete Object.prototype.prepareStackTrace; }],
    [() => { globalThis.Error = { prepareStackTrace: collect }; }, () => { globalThis.Error = OwnError; }],
    [() => Object.defineProperty(globalThis, "Error", { value: { prepareStackTrace: collect }, configurable: true, writable: true }),
     () => Object.defineProperty(globalThis, "Error", { value: OwnError, configurable: true, writable: true })],
  ];
  for (const [set, unset] of ways) {
    try { set(); } catch {}
    await new Promise((resolve) => setTimeout(() => {
      try { void new OwnError("from a timer").stack; } catch {}
      try { const holder = {}; OwnError.captureStackTrace(holder); void holder.stack; } catch {}
      resolve();
    }, 0));
    try { unset(); } catch {}
    tried++;
  }
  return `tried ${tried} ways, ${harness} call sites of the harness`;
})()"""))
"#,
    );
    let outcome = run(Py, &code).await;
    assert_ran(&outcome, 0, "tried 6 ways, 0 call sites of the harness\n");
}

/// Hole 2: `WebAssembly.compileStreaming` and `instantiateStreaming` are
/// installed in every context of an isolate whose embedder streams wasm,
/// and Deno's streaming hook runs its fetch code in the harness's realm,
/// which rejects anything but a Response with a TypeError of its own:
/// `(await WebAssembly.compileStreaming({}).catch(e => e)).constructor`
/// led to `Deno`. A bare realm now has neither function.
#[tokio::test]
async fn a_streaming_compile_hands_over_nothing_of_the_harness() {
    let code = with_foreign(
        r#"
print(await js.eval("""(async () => {
  const lines = [];
  for (const name of ["compileStreaming", "instantiateStreaming"]) {
    const stream = WebAssembly[name];
    if (typeof stream !== "function") { lines.push(`${name}: absent`); continue; }
    const seen = new Set();
    for (const source of [{}, Promise.resolve({}), 1, "x"]) {
      try { await stream(source); seen.add("resolved"); }
      catch (error) { seen.add(foreign(error) ? "an error of the harness" : "an error of its own"); }
    }
    lines.push(`${name}: ${[...seen].join(", ")}`);
  }
  return lines.join("\\n");
})()"""))
"#,
    );
    let outcome = run(Py, &code).await;
    // A session's Worker has both functions and Deno's fetch code in its
    // own realm; a job's bare realm has neither.
    let expected = if in_sessions() { "an error of its own" } else { "absent" };
    assert_ran(&outcome, 0, &format!("compileStreaming: {expected}\ninstantiateStreaming: {expected}\n"));
}

/// Hole 3: the harness's `unhandledrejection` listener told a job's
/// promise from its own with `instanceof`, which runs a job's proxy
/// traps; a promise whose prototype is a proxy that throws made the
/// listener throw, the event went to Deno's default, and Deno formatted
/// the reason with `Deno.inspect`, calling the reason's custom inspect
/// method with the harness's `inspect` function (then exited). The
/// listener now takes a question it cannot answer as the job's.
#[tokio::test]
async fn an_unhandled_rejection_the_harness_cannot_classify_is_let_go() {
    let code = with_foreign(
        r#"
js.eval("""(() => {
  const reason = {
    [Symbol.for("Deno.customInspect")](inspect, options) {
      print(`inspected with ${foreign(inspect) || foreign(options) ? "the harness's" : "its own"} inspect`);
      return "reason";
    },
    [Symbol.for("nodejs.util.inspect.custom")](depth, options, inspect) {
      print(`inspected with ${foreign(inspect) || foreign(options) ? "the harness's" : "its own"} node inspect`);
      return "reason";
    },
  };
  const rejected = Promise.reject(reason);
  Object.setPrototypeOf(rejected, new Proxy({}, { getPrototypeOf() { throw new Error("no prototype"); } }));
})()""")
print("done")
"#,
    );
    let outcome = run(Py, &code).await;
    let seen = format!("{}{}", outcome.stdout, outcome.stderr);
    assert!(!seen.contains("the harness's"), "{outcome:#?}");
    // A session's Worker reports the rejection to the session harness,
    // which ends the exec its own way; a job's realm lets it go.
    if !in_sessions() {
        assert_ran(&outcome, 0, "done\n");
    }
}

/// Hole 4: an `Atomics.waitAsync` waiter is V8's, not the realm's: once
/// the realm is collected the child reports clean, but every waiter's
/// timeout still fires, in the next job's time (a million of them held
/// up the next job by seconds). No other thread shares a bare realm's
/// memory, so it has no `Atomics.waitAsync`; a job that had one would
/// leave a hundred thousand waiters due while the next job runs.
#[tokio::test]
async fn a_job_leaves_no_atomics_waiters_for_the_next() {
    let runner = lane_runner().await;
    let lane = "realms-waiters";
    let code = r#"
import js
print("waitAsync:", js.eval("typeof Atomics.waitAsync"))
js.eval("""(() => {
  if (typeof Atomics.waitAsync !== "function") return;
  const cell = new Int32Array(new SharedArrayBuffer(4));
  for (let i = 0; i < 100000; i++) Atomics.waitAsync(cell, 0, 0, 300 + (i % 700)).value.then(() => print("LATE"));
})()""")
"#;
    let left = run_in(&runner, lane, spec(Py, code)).await;
    assert_ran(&left.outcome, 0, "waitAsync: undefined\n");
    honest_after(&runner, lane, Some(true)).await;
}

/// A shared Python child starts with V8's `gc` exposed, for the harness
/// to collect a finished job's realm with one mark-compact; every context
/// made in it then has a `gc` that cannot be deleted. A job's realm has
/// it set to undefined before any program runs: forced collections are
/// the harness's, between jobs, and in a job's hands one is CPU spent on
/// every realm of the child (and a way to time the harness's heap). The
/// name stays the program's own.
#[tokio::test]
async fn a_jobs_realm_has_no_gc() {
    let runner = lane_runner().await;
    let code = "import js\n\
        print(js.eval('typeof gc'), js.eval('typeof globalThis.gc'))\n\
        print(js.eval('function gc() { return 7 }; gc()'), js.eval('var gc = 8; gc'))";
    let report = run_in(&runner, "realms-gc", spec(Py, code)).await;
    assert_ran(&report.outcome, 0, "undefined undefined\n7 8\n");
}

/// What the brief of the realm names as the escape: nothing a job reaches
/// from its globals or from Pyodide (its module, its API, the wasm
/// instance's exports and table, the functions the harness put there) is
/// of the harness's realm, and the `Function` reached from Pyodide's
/// module is the realm's own.
#[tokio::test]
async fn nothing_reachable_from_the_realm_is_the_harnesss() {
    let code = with_foreign(
        r#"
import pyodide_js
js.probe_pyodide = pyodide_js
print(js.eval("""(() => {
  const seen = new Set();
  const found = [];
  const visit = (value, path, depth) => {
    if (value === null || (typeof value !== "object" && typeof value !== "function") || seen.has(value)) return;
    seen.add(value);
    if (foreign(value)) found.push(path);
    if (depth === 0) return;
    let keys;
    try { keys = Reflect.ownKeys(value); } catch { return; }
    for (const key of keys) {
      // A session Worker's Deno internals (not in a bare realm) have objects of
      // null-prototype classes, which the test cannot place.
      if (value === globalThis && (typeof key === "symbol" || key === "Deno")) continue;
      let d;
      try { d = Reflect.getOwnPropertyDescriptor(value, key); } catch { continue; }
      if (d) for (const v of [d.value, d.get, d.set]) visit(v, `${path}.${String(key)}`, depth - 1);
    }
    try { visit(Reflect.getPrototypeOf(value), `${path}.__proto__`, depth - 1); } catch {}
  };
  visit(globalThis, "globalThis", 3);
  const module = probe_pyodide._module;
  visit(module, "module", 2);
  visit(probe_pyodide._api, "api", 2);
  const table = module.wasmTable;
  for (let i = 0; i < table.length; i++) visit(table.get(i), `table[${i}]`, 0);
  const reached = module.constructor.constructor("return typeof Deno")();
  return [
    seen.size > 10000 ? "swept" : `swept only ${seen.size}`,
    `of the harness: ${found.slice(0, 5).join(" ") || "none"}`,
    `Function of Pyodide's module: ${reached === typeof Deno ? "the realm's own" : "another: Deno is " + reached}`,
  ].join("\\n");
})()"""))
"#,
    );
    let outcome = run(Py, &code).await;
    assert_ran(&outcome, 0, "swept\nof the harness: none\nFunction of Pyodide's module: the realm's own\n");
}

/// The functions the harness gives a realm take a program's odd
/// arguments (wrong types, proxies, oversized arrays, a stack about to
/// overflow) and refuse with errors of the realm: an error of the
/// harness's out of one of them would be an escape.
#[tokio::test]
async fn the_harnesss_functions_refuse_with_errors_of_the_realm() {
    let code = with_foreign(
        r#"
print(js.eval("""(() => {
  const calls = [
    () => crypto.getRandomValues(new Float64Array(2)),
    () => crypto.getRandomValues(new Uint8Array(1 << 17)),
    () => crypto.getRandomValues(new Proxy(new Uint8Array(2), {})),
    () => crypto.getRandomValues({ length: 2 }),
    () => new TextDecoder().decode(new DataView(new ArrayBuffer(2))),
    () => new TextDecoder().decode({ length: 2, 0: 1 }),
    () => performance.now.call(null),
    () => print(Symbol("s")),
    () => printErr({ toString() { throw new Error("its own"); } }),
    () => setTimeout(() => {}, Symbol("s")),
    () => read({ toString() { return "/etc/passwd"; } }),
    () => readbuffer("/pyodide/pyodide.asm.wasm").byteLength.x.y,
  ];
  let errors = 0, harness = 0;
  const check = (error) => { errors++; if (foreign(error)) harness++; };
  for (const call of calls) try { call(); } catch (error) { check(error); }
  // At every depth down to the stack's limit, a call into the harness:
  // some of them overflow inside the harness's code.
  const deep = (n) => {
    try { deep(n + 1); } catch (error) { if (foreign(error)) harness++; }
    try { crypto.getRandomValues(new Uint8Array(1)); performance.now(); new TextDecoder().decode(new Uint8Array(1)); }
    catch (error) { if (foreign(error)) harness++; }
  };
  deep(0);
  return `${errors > 6 ? "refused" : "refused only " + errors}, ${harness} errors of the harness`;
})()"""))
"#,
    );
    let outcome = run(Py, &code).await;
    assert_ran(&outcome, 0, "refused, 0 errors of the harness\n");
}

/// `import()` from code compiled any way in the realm (Function,
/// AsyncFunction, eval direct and indirect, a timer, `import.source`)
/// never reaches Deno's module loader, which would load a module of the
/// harness's realm and hand over its namespace.
#[tokio::test]
async fn no_dynamic_import_reaches_a_module_loader() {
    let code = with_foreign(
        r#"
print(await js.eval("""(async () => {
  const ways = [
    () => new Function("return import('node:fs')")(),
    () => (async function () {}).constructor("return import('node:fs')")(),
    () => (0, eval)("import('node:fs')"),
    () => eval("import('node:fs')"),
    () => new Function("return eval(`import('node:vm')`)")(),
    () => new Promise((resolve) => setTimeout(() => resolve(new Function("return import('node:process')")()), 0)),
    () => eval("import.source('node:fs')"),
    () => eval("import('data:text/javascript,export default 1')"),
  ];
  const seen = new Set();
  for (const way of ways) {
    try { const ns = await way(); seen.add(foreign(ns) || foreign(ns?.default) ? "a namespace of the harness" : "a module of its own"); }
    catch (error) { seen.add(foreign(error) ? "an error of the harness" : "refused"); }
  }
  return [...seen].sort().join(", ");
})()"""))
"#,
    );
    let outcome = run(Py, &code).await;
    let stdout = outcome.stdout.trim_end();
    assert!(!stdout.contains("harness"), "{outcome:#?}");
    if in_sessions() {
        // A session's Worker has Deno's loader, with its own realm's modules.
        assert_eq!(outcome.exit_code, Some(0), "{outcome:#?}");
    } else {
        assert_ran(&outcome, 0, "refused\n");
    }
}

/// A job that leaves work V8 will finish later (a chain of wasm
/// compilations, each resolving into the next) holds its realm, which V8
/// then cannot free: the child is not reused, so none of that work runs
/// in the next job's time. A harness that reported this child clean
/// would give the next job the same child.
#[tokio::test]
async fn a_realm_with_work_pending_gets_its_child_replaced() {
    let runner = lane_runner().await;
    let lane = "realms-pending";
    let warm = run_in(&runner, lane, spec(Py, "print(1)")).await;
    assert_ran(&warm.outcome, 0, "1\n");
    let code = r#"
import js
js.eval("""(() => {
  let n = 0;
  const leb = (x) => { const out = []; do { let b = x & 0x7f; x >>>= 7; if (x) b |= 0x80; out.push(b); } while (x); return out; };
  const section = (id, bytes) => [id, ...leb(bytes.length), ...bytes];
  // Each module is new (a custom section counts), so none comes from V8's cache.
  const module = (tag) => {
    const funcs = 2000, code = [];
    for (let i = 0; i < funcs; i++) code.push(3, 0, 0x01, 0x0b);
    return new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, ...section(0, [1, 116, ...leb(tag)]),
      ...section(1, [1, 0x60, 0, 0]), ...section(3, [...leb(funcs), ...new Array(funcs).fill(0)]),
      ...section(10, [...leb(funcs), ...code])]);
  };
  const again = () => WebAssembly.compile(module(n++)).then(again);
  again();
})()""")
print("left compiles pending")
"#;
    let left = run_in(&runner, lane, spec(Py, code)).await;
    assert_ran(&left.outcome, 0, "left compiles pending\n");
    honest_after(&runner, lane, Some(false)).await;
}

/// Timers, tasks, finalizers and waiters a job leaves behind never write
/// into the next job of its lane: the realm's timers are the harness's,
/// cleared when the job ends, and its `print` is dead from then on. Each
/// writes with the realm's own `print`, the path a bare realm has.
#[tokio::test]
async fn a_jobs_leftovers_never_write_into_the_next() {
    let runner = lane_runner().await;
    let lane = "realms-leftovers";
    let code = r#"
import asyncio, js
js.setTimeout(js.Function("print('LATE from a timer')"), 150)
js.eval("setTimeout(function again() { print('LATE again'); setTimeout(again, 40); }, 100)")
js.eval("Promise.resolve().then(() => setTimeout(() => printErr('LATE on stderr'), 200))")
js.eval("globalThis.registry = new FinalizationRegistry(() => print('LATE from a finalizer'))")
# Targets the realm keeps: they die with it, and the registry with them.
js.eval("globalThis.targets = []; for (let i = 0; i < 1000; i++) registry.register(targets[i] = {}, i)")
if js.eval("typeof Atomics.waitAsync") == "function":
    js.eval("Atomics.waitAsync(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 250).value.then(() => print('LATE from a waiter'))")
async def later():
    await asyncio.sleep(0.3)
    print("LATE from a task")
asyncio.ensure_future(later())
print("left them")
"#;
    let left = run_in(&runner, lane, spec(Py, code)).await;
    // What fires before the job has ended is its own output.
    assert_eq!((left.outcome.status, left.outcome.exit_code), (Status::Completed, Some(0)), "{left:#?}");
    assert!(left.outcome.stdout.starts_with("left them\n"), "{left:#?}");
    honest_after(&runner, lane, Some(true)).await;
}

/// A program that makes Pyodide give up (a fatal error: nothing is left
/// to wait for, and nothing will answer) ends with status 1 and Pyodide's
/// message; in a lane, the next job runs exactly as it should.
#[tokio::test]
async fn a_stalled_pyodide_ends_with_status_1() {
    let code = "import ctypes\nprint('before', flush=True)\nctypes.string_at(0xffffffff, 10)\nprint('after')";
    let outcome = run(Py, code).await;
    assert_stalled(&outcome, "before\n");
    assert!(outcome.stderr.contains("Pyodide has suffered a fatal error"), "{outcome:#?}");

    let runner = lane_runner().await;
    let lane = "realms-stalled";
    let stalled = run_in(&runner, lane, spec(Py, code)).await;
    assert_stalled(&stalled.outcome, "before\n");
    honest_after(&runner, lane, None).await;
    // A program that waits on a promise nothing will settle stalls too.
    let waits = "import js\nprint('waiting', flush=True)\nawait js.Promise.new(lambda resolve, reject: None)";
    let waited = run_in(&runner, lane, spec(Py, waits)).await;
    assert_ran(&waited.outcome, 1, "waiting\n");
    honest_after(&runner, lane, None).await;
}

/// Ended with status 1 after printing `first` (Pyodide's fatal error
/// handler then prints the Python stack on stdout), and went no further.
#[track_caller]
fn assert_stalled(outcome: &Outcome, first: &str) {
    assert_eq!((outcome.status, outcome.exit_code, outcome.signal), (Status::Completed, Some(1), None), "{outcome:#?}");
    assert!(outcome.stdout.starts_with(first) && !outcome.stdout.contains("after"), "{outcome:#?}");
}

/// One job's data does not reach the next job's heap: each realm's wasm
/// memory is new, and the snapshot is copied into it, never shared. The
/// scan finds the marker in the heap of the job that wrote it.
#[tokio::test]
async fn one_jobs_data_never_reaches_the_next_jobs_heap() {
    let runner = lane_runner().await;
    let lane = "realms-heap";
    // The marker is never written whole in a program's source.
    let fill = "marker = (b'LEFT-' + b'Q7Z9' * 4) * (1 << 18)\nkeep = [bytearray(marker) for _ in range(8)]\n";
    let left = run_in(&runner, lane, spec(Py, &format!("{fill}{HEAP_SCAN}"))).await;
    assert_ran(&left.outcome, 0, "scanned, found some\n");
    let scanned = run_in(&runner, lane, spec(Py, HEAP_SCAN)).await;
    assert_ran(&scanned.outcome, 0, "scanned, found none\n");
}

/// A job's wasm memory, once its realm is freed, serves the next job's
/// instance (the kernel has its pages already), with every byte
/// rewritten: the snapshot's image where it is not zero, and zeros
/// everywhere else. The marker here is written where the image has only
/// zeros, without growing the memory (a grown memory is never reused): at
/// the memory's end, after the image's last page that is not zero, and in
/// the deeper half of the longest run of zero pages the job finds (the C
/// stack's unused depth), between two such pages. So a restore that
/// skipped the image's zero pages, as one into fresh memory does, or the
/// zeros between the pages it copies, would leave it (checked: with either
/// left out, the scan found the marker).
#[tokio::test]
async fn a_reused_memory_keeps_no_byte_of_the_last_job() {
    let runner = lane_runner().await;
    let lane = "realms-reused-heap";
    let write = r#"
import js, pyodide_js
js.probe_module = pyodide_js._module
print(js.eval("""(() => {
  const heap = probe_module.HEAPU8;
  const length = heap.length;
  const marker = [..."9Z7Q-TFEL"].reverse().map((c) => c.charCodeAt(0));
  for (let at = length - 65536; at + 16 <= length; at += 16) heap.set(marker, at);
  const words = new Uint32Array(heap.buffer);
  const zero = (page) => words.subarray(page * 1024, page * 1024 + 1024).every((word) => word === 0);
  let longest = [0, 0];
  for (let page = 0, start = 0; page <= length / 4096 - 16; page++) {
    if (!zero(page)) start = page + 1;
    else if (page + 1 - start > longest[1] - longest[0]) longest = [start, page + 1];
  }
  const [first, end] = longest;
  for (let page = first; page < first + (end - first) / 2; page++) heap.set(marker, page * 4096 + 2048);
  const pages = Math.floor((end - first) / 2);
  return `${probe_module.HEAPU8.length === length ? "wrote, same size" : "grew"}, ${pages > 100 ? "in the stack" : pages}`;
})()"""))
"#;
    let left = run_in(&runner, lane, spec(Py, write)).await;
    assert_ran(&left.outcome, 0, "wrote, same size, in the stack\n");
    let scanned = run_in(&runner, lane, spec(Py, HEAP_SCAN)).await;
    assert_ran(&scanned.outcome, 0, "scanned, found none\n");
    assert!(scanned.outcome.warm, "{:#?}", scanned.outcome);
}

/// The wasm memory a job's realm gets is made by the harness in a context
/// of its own, with the realm's prototypes, and reused by the next realm
/// only if the job left nothing on it: each job here changes the heap's
/// buffer (a property, a symbol, its prototype, a freeze, growth) and the
/// next finds a buffer of its own realm, extensible and bare, whether it
/// was reused or not. The buffer is what a program reaches (Pyodide's
/// `HEAPU8.buffer`); the memory object gets the same treatment. Each change
/// is tried in a lane of its own, so that each check runs in the child the
/// change was made in. (In one child, the process's native heap grew by
/// about 60 MB two jobs after the freeze, not its wasm memories, and on a
/// busy machine that was past what an idle child may hold over its boot,
/// so the child was replaced and a check ran in a new one.)
#[tokio::test]
async fn a_reused_memory_carries_nothing_of_the_last_job() {
    let runner = lane_runner().await;
    let check = buffer_check();
    let leave = [
        "probe_module.HEAPU8.buffer.marker = 'LEFT'",
        "probe_module.HEAPU8.buffer[Symbol.for('runbox-probe')] = 'LEFT'",
        "Object.setPrototypeOf(probe_module.HEAPU8.buffer, { marker: 'LEFT' })",
        "Object.freeze(probe_module.HEAPU8.buffer)",
        "Object.preventExtensions(probe_module.HEAPU8.buffer)",
        "Object.preventExtensions(Object.setPrototypeOf(probe_module.HEAPU8.buffer, null))",
    ];
    for (i, leave) in leave.iter().enumerate() {
        let lane = &format!("realms-reused-memory-{i}");
        let code =
            format!("import js, pyodide_js\njs.probe_module = pyodide_js._module\njs.eval(\"{leave}\")\nprint('left')");
        let left = run_in(&runner, lane, spec(Py, &code)).await;
        assert_ran(&left.outcome, 0, "left\n");
        let checked = run_in(&runner, lane, spec(Py, &check)).await;
        assert_ran(&checked.outcome, 0, "own prototype extensible keys: none\n");
        assert!(checked.outcome.warm, "after {i}: {:#?}", checked.outcome);
    }
    // A grown memory (a new buffer, made by the realm's own grow) is the
    // job's own, and never reused.
    let grow = with_foreign(
        r#"
import pyodide_js
js.probe_module = pyodide_js._module
before = js.eval("probe_module.HEAPU8.length")
keep = bytearray(64 << 20)
print(js.eval("probe_module.HEAPU8.length") > before, js.eval("foreign(probe_module.HEAPU8.buffer)"))
"#,
    );
    let lane = "realms-reused-memory-grown";
    let grown = run_in(&runner, lane, spec(Py, &grow)).await;
    assert_ran(&grown.outcome, 0, "True False\n");
    let checked = run_in(&runner, lane, spec(Py, &check)).await;
    assert_ran(&checked.outcome, 0, "own prototype extensible keys: none\n");
}

/// The same, for a job whose leftovers run after its realm was retired:
/// a promise chain, queued as the job ends (through the realm's
/// `JSON.stringify`, which its last answer goes through), that waits for
/// the harness to take the buffer's prototype off and then changes it. A
/// realm that V8 frees at the second collection may have run such a chain
/// for a few milliseconds, within the leftover rule, so whether the memory
/// can serve again is decided once the realm is gone, not at retirement.
/// (Found by a review of the reuse.)
#[tokio::test]
async fn a_reused_memory_is_checked_once_its_realm_is_gone() {
    let runner = lane_runner().await;
    let lane = "realms-reused-late";
    let check = buffer_check();
    for late in
        ["buffer.marker = 'LEFT'", "buffer[Symbol.for('runbox-probe')] = 'LEFT'", "Object.preventExtensions(buffer)"]
    {
        let code = format!(
            r#"
import js, pyodide_js
js.probe_module = pyodide_js._module
js.eval("""(() => {{
  const buffer = probe_module.HEAPU8.buffer;
  const stringify = JSON.stringify;
  JSON.stringify = function (...args) {{
    let turns = 0;
    const poll = () => {{
      if (Object.getPrototypeOf(buffer) === null) return void ({late});
      if (++turns < 100000) Promise.resolve().then(poll);
    }};
    Promise.resolve().then(poll);
    return stringify.apply(this, args);
  }};
}})()""")
print("left")
"#
        );
        let left = run_in(&runner, lane, spec(Py, &code)).await;
        assert_ran(&left.outcome, 0, "left\n");
        let checked = run_in(&runner, lane, spec(Py, &check)).await;
        assert_ran(&checked.outcome, 0, "own prototype extensible keys: none\n");
    }
}

/// Whether a job that ends on a MemoryError was out of memory (its heap at
/// half its cap or more) is read by the harness, with its own getters: a
/// program that replaces its realm's `WebAssembly.Memory.prototype.buffer`
/// to report a huge heap, then raises MemoryError, ends as a plain error,
/// and its child serves the next job. (Found by a review: the realm read
/// the size through that getter, and the harness then kept the child only
/// for the runner to measure.)
#[tokio::test]
async fn a_jobs_heap_size_is_the_harnesss_to_read() {
    let runner = lane_runner().await;
    let lane = "realms-heap-size";
    let code = r#"
import js
js.eval("""Object.defineProperty(WebAssembly.Memory.prototype, "buffer", {
  configurable: true,
  get() { return { byteLength: 4 * 1024 * 1024 * 1024 }; },
})""")
raise MemoryError("pretend")
"#;
    let pretended = run_in(&runner, lane, spec(Py, code)).await;
    assert_eq!((pretended.outcome.status, pretended.outcome.exit_code), (Status::Completed, Some(1)), "{pretended:#?}");
    assert!(pretended.outcome.stderr.contains("MemoryError: pretend"), "{pretended:#?}");
    honest_after(&runner, lane, Some(true)).await;
}

/// Python that describes the job's heap buffer: whether it is of the
/// job's realm, with the realm's prototype, extensible, and its own keys.
fn buffer_check() -> String {
    with_foreign(
        r#"
import pyodide_js
js.probe_module = pyodide_js._module
print(js.eval("""(() => {
  const buffer = probe_module.HEAPU8.buffer;
  return [
    foreign(buffer) ? "foreign" : "own",
    Object.getPrototypeOf(buffer) === ArrayBuffer.prototype ? "prototype" : "another prototype",
    Object.isExtensible(buffer) ? "extensible" : "not extensible",
    `keys: ${Reflect.ownKeys(buffer).map(String).join(",") || "none"}`,
  ].join(" ");
})()"""))
"#,
    )
}

/// The standard library's and the packages' zips are read from the
/// harness where a job reads them, not copied into its realm. They read
/// as files do, a few bytes at a time and mapped whole (MEMFS reads up to
/// 8 bytes by index and maps a whole file as it is, which a review found
/// gave zeros). A job that changes them, in place, by appending and by
/// truncating, changes its own file system only: the next job in the same
/// child finds both whole (every member's CRC checked) and imports from
/// them.
#[tokio::test]
async fn a_jobs_changes_to_the_zips_stay_in_its_realm() {
    let runner = lane_runner().await;
    let lane = "realms-zips";
    let change = r#"
import mmap, os, sys
stdlib = next(p for p in sys.path if p.endswith(".zip") and "/python3" in p)
for path in (stdlib, "/lib/packages.zip"):
    fd = os.open(path, os.O_RDONLY)
    assert os.read(fd, 4) == b"PK\x03\x04", path
    assert os.pread(fd, 4, os.fstat(fd).st_size - 22) == b"PK\x05\x06", path
    os.close(fd)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as whole:
        assert whole[:4] == b"PK\x03\x04" and whole[-22:-18] == b"PK\x05\x06", path
    with open(path, "r+b") as f:
        f.seek(0)
        f.write(b"LEFT" * 64)
    with open(path, "ab") as f:
        f.write(b"LEFT")
    with open(path, "rb") as f:
        assert f.read(4) == b"LEFT"
os.truncate(stdlib, 100)
print("changed")
"#;
    let check = r#"
import os, sys, zipfile
stdlib = next(p for p in sys.path if p.endswith(".zip") and "/python3" in p)
for path in (stdlib, "/lib/packages.zip"):
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None, path
        assert len(z.namelist()) > 500, path
import tabulate, tomllib
print(tabulate.tabulate([[tomllib.loads("a = 1")["a"]]]).strip())
"#;
    let changed = run_in(&runner, lane, spec(Py, change)).await;
    assert_ran(&changed.outcome, 0, "changed\n");
    let checked = run_in(&runner, lane, spec(Py, check)).await;
    assert_ran(&checked.outcome, 0, "-\n1\n-\n");
    assert!(checked.outcome.warm, "{:#?}", checked.outcome);
}

/// Every job's realm puts the small-object allocator (small-objects.wat)
/// under CPython's object and memory domains, and leaves the raw domain to
/// dlmalloc; a run of allocations, frees and reallocations of every small
/// size gives what CPython gives natively (the digest is native CPython's,
/// as 3.11 and 3.13 print it). Twice in one child: each realm installs its
/// own.
#[tokio::test]
async fn every_jobs_realm_allocates_small_objects_as_cpython_expects() {
    let runner = lane_runner().await;
    let lane = "realms-small-objects";
    let code = r#"
import ctypes, gc, hashlib, random
class Allocator(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("ctx", "malloc", "calloc", "realloc", "free")]
def allocator(domain):
    found = Allocator()
    ctypes.pythonapi.PyMem_GetAllocator(ctypes.c_int(domain), ctypes.byref(found))
    return found
raw, mem, obj = allocator(0), allocator(1), allocator(2)
print(raw.ctx is None, obj.ctx is not None and mem.ctx == obj.ctx, obj.malloc not in (None, raw.malloc))
random.seed(7)
keep = {}
for i in range(30000):
    k = random.randrange(2000)
    r = random.random()
    if r < 0.3:
        keep[k] = [random.random() for _ in range(random.randrange(40))]
    elif r < 0.5:
        s = ""
        for _ in range(random.randrange(20)): s += str(random.randrange(10**9))
        keep[k] = s
    elif r < 0.6:
        b = bytearray()
        for _ in range(random.randrange(30)): b += bytes([random.randrange(256)]) * random.randrange(50)
        keep[k] = bytes(b)
    elif r < 0.8:
        keep[k] = {j: (j, str(j)) for j in range(random.randrange(30))}
    elif r < 0.9:
        keep.pop(k, None)
    else:
        keep[k] = tuple(range(random.randrange(100))) + (10**random.randrange(60),)
    if i % 5000 == 0: gc.collect()
digest = hashlib.sha256()
for k in sorted(keep): digest.update(repr((k, keep[k])).encode())
print(len(keep), digest.hexdigest()[:16])
"#;
    for run in 0..2 {
        let report = run_in(&runner, lane, spec(Py, code)).await;
        assert_ran(&report.outcome, 0, "True True True\n1798 4eb2e7b9807f47f1\n");
        assert!(run == 0 || report.outcome.warm, "{:#?}", report.outcome);
    }
}

/// CPython's own calls into the small-object allocator take its common
/// cases inline (pyodide-wasm.mjs, `inlineSmallObjects`), but only while
/// the domain's allocator is the realm's: an allocator a program puts over
/// it, as tracemalloc does, still gets every allocation and free, and the
/// program allocates as before once tracemalloc has stopped. (With the
/// check left out, the inlined path took tracemalloc's state for the
/// allocator's and the job died on a memory access out of bounds.)
#[tokio::test]
async fn an_allocator_put_over_the_small_objects_gets_every_call() {
    let runner = lane_runner().await;
    let code = r#"
import tracemalloc
tracemalloc.start()
x = [str(i) * 3 for i in range(20000)]
held, _ = tracemalloc.get_traced_memory()
del x
left, _ = tracemalloc.get_traced_memory()
tracemalloc.stop()
y = [str(i) * 3 for i in range(20000)]
print(held > 700_000, left < 10_000, len(y))
"#;
    for run in 0..2 {
        let report = run_in(&runner, "realms-small-objects-traced", spec(Py, code)).await;
        assert_ran(&report.outcome, 0, "True True 20000\n");
        assert!(run == 0 || report.outcome.warm, "{:#?}", report.outcome);
    }
}

/// The small-object allocator's pools serve only the size they were made
/// for, so they are capped (a sixteenth of the memory): a job that fills
/// its memory with objects of one size, frees them, and fills it with
/// objects of another holds as many as with dlmalloc alone. (A review
/// found that with pools capped at a quarter, this job ran out of memory
/// at 5.5 million, where dlmalloc alone held 6 million.)
#[tokio::test]
async fn freed_small_objects_leave_room_for_objects_of_another_size() {
    let runner = lane_runner().await;
    let code =
        "x = [float(i) for i in range(4_000_000)]\ndel x\ny = [(1 << 40) + i for i in range(5_500_000)]\nprint(len(y))";
    let report = run_in(&runner, "realms-pool-cap", JobSpec { memory_mb: Some(256), ..spec(Py, code) }).await;
    assert_ran(&report.outcome, 0, "5500000\n");
}

/// Python that scans the job's wasm heap for the marker "LEFT-Q7Z9".
const HEAP_SCAN: &str = r#"
import js, pyodide_js
js.probe_module = pyodide_js._module
print(js.eval("""(() => {
  const heap = probe_module.HEAPU8;
  const marker = [..."9Z7Q-TFEL"].reverse().map((c) => c.charCodeAt(0));
  let found = 0;
  scan: for (let i = 0; i + marker.length <= heap.length && found < 10; i++) {
    if (heap[i] !== marker[0]) continue;
    for (let j = 1; j < marker.length; j++) if (heap[i + j] !== marker[j]) continue scan;
    found++;
  }
  return `${heap.length > (8 << 20) ? "scanned" : "scanned only " + heap.length}, found ${found ? "some" : "none"}`;
})()"""))
"#;

/// A job's zero-delay timers (which run at the event loop's next turn,
/// through setImmediate) never run once its realm is retired: not a chain
/// that re-arms itself, not an asyncio task looping on `sleep(0)`, not
/// timers set by the job's own code after retirement (a microtask chain,
/// queued as the job ends, that waits for the harness to take the heap
/// buffer's prototype off). Each burns 3 s if it finds the realm retired,
/// past the time a child has to retire a job, so a timer that ran then
/// would get the child replaced; the next job must run in the same child.
/// (Written by a review of the zero-delay timers.)
#[tokio::test]
async fn a_jobs_zero_delay_timers_never_outlive_it() {
    let runner = lane_runner().await;
    let lane = "realms-zero-delay-leftovers";
    let code = r#"
import asyncio, js, pyodide_js
js.probe_buffer = pyodide_js._module.HEAPU8.buffer
js.eval("""(() => {
  const buffer = probe_buffer;
  const retired = () => Object.getPrototypeOf(buffer) === null;
  globalThis.burnIfRetired = (tag) => {
    if (!retired()) return;
    print('LATE ' + tag);
    const t = performance.now();
    while (performance.now() - t < 3000) {}
  };
  setTimeout(function chain() { burnIfRetired('chain'); setTimeout(chain, 0); }, 0);
  const late = (tag) => function again() { burnIfRetired(tag); setTimeout(again, 0); };
  let turns = 0;
  const poll = () => {
    if (retired()) {
      setTimeout(late('0 after retire'), 0);
      setTimeout(late('-1 after retire'), -1);
      return;
    }
    if (++turns < 100000) Promise.resolve().then(poll);
  };
  const stringify = JSON.stringify;
  JSON.stringify = function (...args) { Promise.resolve().then(poll); return stringify.apply(this, args); };
})()""")
async def spin():
    while True:
        js.burnIfRetired("asyncio")
        await asyncio.sleep(0)
asyncio.ensure_future(spin())
await asyncio.sleep(0.02)
print("left them")
"#;
    for round in 0..2 {
        let left = run_in(&runner, lane, spec(Py, code)).await;
        assert_ran(&left.outcome, 0, "left them\n");
        let next = run_in(&runner, lane, spec(Py, "print('honest')")).await;
        assert_ran(&next.outcome, 0, "honest\n");
        assert_eq!(next.outcome.stderr, "", "{next:#?}");
        assert!(next.outcome.warm, "round {round}: {next:#?}");
    }
}
