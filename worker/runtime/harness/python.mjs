// Harness for Python jobs: Pyodide (CPython on WebAssembly) inside Deno.
//
// Usage: python.mjs <pyodide-dir> <memory-snapshot|-> <memory-mb>
//
// Boot reads the Pyodide files and the memory snapshot, which is why this
// child alone gets --allow-read (scoped to those paths). Read access is
// revoked before READY, so the program never has it.
import { loadPyodide } from "pyodide";
import { awaitJob, dropPersistentStorage, MEMORY_EXIT, readRest, writeAll } from "./protocol.mjs";

const [pyodideDir, snapshotPath, memoryMb] = Deno.args;

// Runs the program as __main__ and returns the process exit status. Top-level
// `await` is allowed, as in Pyodide's own runPythonAsync. Frames of
// this runner are cut from tracebacks so they read as if python ran main.py.
const RUNNER = `
import ast, linecache, os, sys, traceback

# Pyodide records the path of the script that booted it; not the program's business.
os.environ.pop("_", None)

async def run_main(source):
    linecache.cache["main.py"] = (len(source), None, source.splitlines(True), "main.py")
    status = 0
    try:
        code = compile(source, "main.py", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__})
        if code.co_flags & 0x80:  # CO_COROUTINE: the program used top-level await
            await result
    except SystemExit as e:
        status = exit_status(e.code)
    except BaseException as e:
        # Drop this runner's frame; a SyntaxError has no program frames at all.
        tb = None if isinstance(e, SyntaxError) else e.__traceback__.tb_next
        traceback.print_exception(type(e), e, tb)
        status = ${MEMORY_EXIT} if isinstance(e, MemoryError) else 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    return status

def exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1

run_main
`;

capWasmMemory(Number(memoryMb));
dropPersistentStorage();

const pyodide = await loadPyodide({
  indexURL: pyodideDir,
  ...(snapshotPath === "-" ? {} : { _loadSnapshot: Deno.readFileSync(snapshotPath) }),
});
pyodide.setStdout({ write: (bytes) => (writeAll(Deno.stdout, bytes), bytes.length) });
pyodide.setStderr({ write: (bytes) => (writeAll(Deno.stderr, bytes), bytes.length) });
const runMain = pyodide.runPython(RUNNER);
Deno.permissions.revokeSync({ name: "read" });

const job = awaitJob();
const stdin = readRest();
let consumed = 0;
pyodide.setStdin({
  read(buffer) {
    const n = Math.min(buffer.length, stdin.length - consumed);
    buffer.set(stdin.subarray(consumed, consumed + n));
    consumed += n;
    return n;
  },
});
// callPromising lets the program block on JS promises (run_until_complete,
// run_sync) through WebAssembly stack switching.
Deno.exit(await runMain.callPromising(job.code));

/**
 * Python's heap is WebAssembly memory, which V8's heap limit does not cover.
 * Capping the maximum page count makes growth fail inside the allocator, so
 * Python raises a clean MemoryError instead of the process being killed.
 */
function capWasmMemory(mb) {
  if (!(mb > 0)) return;
  const maxPages = Math.floor((mb * 1024 * 1024) / 65536);
  const Memory = WebAssembly.Memory;
  function CappedMemory(descriptor) {
    const maximum = Math.min(descriptor.maximum ?? maxPages, maxPages);
    const initial = Math.min(descriptor.initial, maximum);
    return new Memory({ ...descriptor, initial, maximum });
  }
  CappedMemory.prototype = Memory.prototype;
  WebAssembly.Memory = CappedMemory;
}
