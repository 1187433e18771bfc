// Harness for Python jobs: Pyodide (CPython on WebAssembly) inside Deno.
//
// Usage: python.mjs <pyodide-dir> <memory-snapshot|-> <memory-mb> [shared|session]
//
// Boot reads the Pyodide files and the memory snapshot, which is why this
// child alone gets --allow-read (scoped to those paths). Read access is
// revoked before READY, so the program never has it. After the program
// starts, this file uses only what protocol.mjs and RUNNER captured
// beforehand.
//
// With `shared`, the child serves the shared lane: it runs the jobs of one
// batch one after another, each in a new Pyodide instance restored from its
// own copy of the snapshot (a fresh interpreter, `__main__` and in-memory
// file system), built from the wasm module compiled once at boot. The
// instances share this process and its JS realm; see protocol.mjs for how
// the runner tells the jobs' output apart, and `watchRealm` for when the
// child asks to be replaced.
//
// With `session`, the child is one session's interpreter: see session.mjs.
import {
  installPackages,
  loadPyodideFrom,
  PACKAGES_ZIP,
  preloadScript,
  pyodideFactory,
  readPackages,
} from "./pyodide.mjs";
import {
  awaitJob,
  base64,
  dropPersistentStorage,
  exit,
  hideHostDetails,
  readFrame,
  readRest,
  reportOutOfMemory,
  sendFiles,
  signalEnd,
  signalReady,
  wasmMemorySize,
  watchRealm,
  writeAll,
} from "./protocol.mjs";
import { serveSession } from "./session.mjs";

const [pyodideDir, snapshotPath, memoryMb, mode] = Deno.args;
const shared = mode === "shared";
const session = mode === "session";

// Added to the exit status that run_main returns when the program ended on
// a MemoryError.
const ENDED_BY_MEMORY_ERROR = 0x100;

// A shared child collects garbage between jobs once its resident memory has
// grown this far past its size after boot: each finished instance leaves
// its wasm memory behind until V8 collects it, and V8 is in no hurry.
const COLLECT_AFTER_GROWTH = 128 * 1024 * 1024;

const RUNNER = `
import ast, builtins, linecache, os, random, sys, traceback, types

# Pyodide records the path of the script that booted it; not the program's business.
os.environ.pop("_", None)
# The memory snapshot froze one generator state; every child starts from fresh entropy.
random.seed()
# The runtime's packages (already there when the snapshot was built with them).
if os.path.exists("${PACKAGES_ZIP}") and "${PACKAGES_ZIP}" not in sys.path:
    sys.path.insert(0, "${PACKAGES_ZIP}")

def make_runner(
    compile=compile, eval=eval, isinstance=isinstance, type=type, int=int, print=print,
    BaseException=BaseException, SystemExit=SystemExit, MemoryError=MemoryError,
    SyntaxError=SyntaxError, ModuleType=types.ModuleType, sys=sys, modules=sys.modules,
    print_exception=traceback.print_exception, line_cache=linecache.cache,
    builtins=builtins, list=list, flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, memory_flag=${ENDED_BY_MEMORY_ERROR},
):
    def exit_status(code):
        if code is None:
            return 0
        if isinstance(code, int):
            return int(code) & 0xFF
        print(code, file=sys.stderr)
        return 1

    async def run(main, source, name):
        line_cache[name] = (len(source), None, source.splitlines(True), name)
        status = 0
        try:
            code = compile(source, name, "exec", flags=flags, dont_inherit=True)
            result = eval(code, main.__dict__)
            if code.co_flags & 0x80:  # CO_COROUTINE: the program used top-level await
                await result
        except SystemExit as e:
            status = exit_status(e.code)
        except BaseException as e:
            # Drop this runner's frame; a SyntaxError has no program frames at all.
            tb = None if isinstance(e, SyntaxError) else e.__traceback__.tb_next
            try:
                print_exception(type(e), e, tb)
            except BaseException:
                pass
            status = 1 | (memory_flag if isinstance(e, MemoryError) else 0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        return status

    def new_main():
        main = ModuleType("__main__")
        main.__file__ = "main.py"
        main.__builtins__ = builtins
        modules["__main__"] = main
        return main

    async def run_main(source, args):
        sys.argv = ["main.py", *list(args)]
        return await run(new_main(), source, "main.py")

    async def run_in_session(source, name):
        # A session's programs share one __main__, made by its first exec
        # and carried by its checkpoints.
        main = modules.get("__main__")
        if getattr(main, "__file__", None) != "main.py":
            main = new_main()
        sys.argv = ["main.py"]
        return await run(main, source, name)

    return run_main, run_in_session

run_main, run_in_session = make_runner()
`;

const realm = shared ? watchRealm() : null;
const wasmMemories = capWasmMemory(Number(memoryMb));
dropPersistentStorage();

if (session) {
  const newInstance = await pyodideFactory(pyodideDir, snapshotPath === "-" ? null : snapshotPath);
  // The instance is built from what the runner sends after READY, when the
  // child can read nothing any more.
  await preloadScript(pyodideDir);
  Deno.permissions.revokeSync({ name: "read" });
  hideHostDetails("file:///main.py", [], true);
  await serveSession({ newInstance, prepare, runJob });
}

if (!shared) {
  const pyodide = await loadPyodideFrom(pyodideDir, snapshotPath === "-" ? {} : {
    _loadSnapshot: Deno.readFileSync(snapshotPath),
  });
  const instance = prepare(installPackages(pyodide, readPackages(pyodideDir)));
  Deno.permissions.revokeSync({ name: "read" });
  const job = awaitJob();
  // Pyodide has loaded Node's `process` already.
  hideHostDetails("file:///main.py", job.args ?? [], true);
  const status = await runJob(instance, job, readRest());
  exit(status);
}

// From --expose-gc. V8 makes it non-configurable, so jobs can call it too:
// that costs them time and gives them nothing.
const collectGarbage = globalThis.gc;
const newInstance = await pyodideFactory(pyodideDir, snapshotPath === "-" ? null : snapshotPath);
let instance = prepare(await newInstance());
Deno.permissions.revokeSync({ name: "read" });
const { rss } = Deno.memoryUsage();
const collectAbove = rss + COLLECT_AFTER_GROWTH;
signalReady();
for (;;) {
  const job = readFrame();
  hideHostDetails("file:///main.py", job.args ?? [], true);
  realm.begin();
  const status = await runJob(instance, job, new TextEncoder().encode(job.stdin ?? ""));
  instance.retire();
  signalEnd(job.nonce, status, realm.isClean());
  // The next instance is built now, before its job exists, so a job's
  // duration is its program's alone.
  instance = null;
  if (collectGarbage && Deno.memoryUsage().rss > collectAbove) collectGarbage();
  wasmMemories.length = 0;
  instance = prepare(await newInstance());
}

/**
 * Connects a booted Pyodide to this process's stdout and stderr and loads
 * RUNNER into it. `retire()` disconnects it, so that nothing it still has
 * scheduled can write into the next job's output.
 */
function prepare(pyodide) {
  let live = true;
  const sink = (fd) => ({ write: (bytes) => (live && writeAll(fd, bytes), bytes.length) });
  pyodide.setStdout(sink(1));
  pyodide.setStderr(sink(2));
  // Plain exec, not runPython: Pyodide's eval_code parses the source with
  // `ast` first, and the instance's first call after it ran markedly slower
  // (about 25 ms more per instance, measured).
  const globals = pyodide.toPy({});
  pyodide.pyimport("builtins").exec(RUNNER, globals);
  const runMain = globals.get("run_main");
  const runInSession = globals.get("run_in_session");
  return { pyodide, runMain, runInSession, retire: () => (live = false) };
}

/**
 * Runs `job` with `stdin` in a prepared instance; returns the exit status.
 * `run` is the runner's entry point: a fresh `__main__` by default.
 */
async function runJob({ pyodide, runMain }, job, stdin, run = (code, args) => runMain.callPromising(code, args)) {
  writeFiles(pyodide, job.files ?? []);
  // Returned files are found from where the program started, wherever it went.
  const home = pyodide.FS.cwd();
  let consumed = 0;
  pyodide.setStdin({
    read(buffer) {
      const n = Math.min(buffer.length, stdin.length - consumed);
      buffer.set(stdin.subarray(consumed, consumed + n));
      consumed += n;
      return n;
    },
  });
  const halfCap = (job.memory_mb * 1024 * 1024) / 2;
  // callPromising lets the program block on JS promises (run_until_complete,
  // run_sync) through WebAssembly stack switching.
  const result = await run(job.code, job.args ?? []);
  // A MemoryError the program raised itself is just an error; one raised
  // after Python's heap really grew to half the cap or more is out of memory.
  if (result & ENDED_BY_MEMORY_ERROR && largestWasmMemory() >= halfCap) reportOutOfMemory(job.nonce);
  if (job.return_files) sendFiles(job.nonce, filesWritten(pyodide.FS, home, job));
  return result & 0xff;
}

/**
 * The files `job.return_files` asks for, under `home`, in path order: the
 * listed paths that are regular files, or with `true` every regular file
 * (links are not followed) except input files the program left unchanged.
 * At most `max_files` files and `max_bytes` bytes in all are kept.
 */
function filesWritten(FS, home, job) {
  const { want, max_files: maxFiles, max_bytes: maxBytes } = job.return_files;
  const isFile = (path) => {
    try {
      return FS.isFile(FS.lstat(`${home}/${path}`).mode);
    } catch {
      return false;
    }
  };
  const paths = want === true ? walk(FS, home, "") : want.filter(isFile);
  paths.sort();
  const given = new Map((job.files ?? []).map((file) => [file.path, file]));
  const out = { files: [], truncated: false };
  let budget = maxBytes;
  for (const path of paths) {
    const bytes = FS.readFile(`${home}/${path}`);
    if (want === true && given.has(path) && sameBytes(bytes, inputBytes(given.get(path)))) continue;
    if (out.files.length === maxFiles) {
      out.truncated = true;
      break;
    }
    const kept = bytes.subarray(0, budget);
    budget -= kept.length;
    const truncated = kept.length < bytes.length;
    out.truncated ||= truncated;
    out.files.push({ path, content: base64(kept), size: bytes.length, truncated });
  }
  return out;
}

/** Relative paths of the regular files under `dir`, not following links. */
function walk(FS, dir, prefix) {
  const found = [];
  for (const name of FS.readdir(dir)) {
    if (name === "." || name === "..") continue;
    const mode = FS.lstat(`${dir}/${name}`).mode;
    if (FS.isDir(mode)) found.push(...walk(FS, `${dir}/${name}`, `${prefix}${name}/`));
    else if (FS.isFile(mode)) found.push(`${prefix}${name}`);
  }
  return found;
}

function sameBytes(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Puts the job's files in Pyodide's in-memory file system, under the working directory. */
function writeFiles(pyodide, files) {
  const FS = pyodide.FS;
  for (const file of files) {
    const { path } = file;
    const bytes = inputBytes(file);
    const slash = path.lastIndexOf("/");
    if (slash > 0) FS.mkdirTree(path.slice(0, slash));
    FS.writeFile(path, bytes);
  }
}

function inputBytes({ content, encoding }) {
  return encoding === "base64"
    ? Uint8Array.from(atob(content), (c) => c.charCodeAt(0))
    : new TextEncoder().encode(content);
}

function largestWasmMemory() {
  let largest = 0;
  // An indexed loop: the program may have replaced the array iterator.
  for (let i = 0; i < wasmMemories.length; i++) {
    const size = wasmMemorySize(wasmMemories[i]);
    if (size > largest) largest = size;
  }
  return largest;
}

/**
 * Python's heap is WebAssembly memory, which V8's heap limit does not cover.
 * Capping the maximum page count makes growth fail inside the allocator, so
 * Python raises a clean MemoryError instead of the process being killed.
 * Returns the list of memories made, so their size can be read later.
 */
function capWasmMemory(mb) {
  const memories = [];
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
  return memories;
}
