// The realm of one Python job: a bare V8 context (node:vm, made with
// DONT_CONTEXTIFY), in which this script, Pyodide's loader and its
// Emscripten script are evaluated, and one Pyodide instance is built from
// the wasm module the harness compiled once. The context has the
// language's intrinsics and nothing of Deno: no `Deno`, no `fetch`, no
// file or network API of any kind. `import js` reaches this realm's
// global, which holds only what this file puts there.
//
// Nothing here is trusted. The harness (pyodide.mjs) evaluates this
// script, which is one function expression, and calls it with `host`: a
// few functions of the harness's realm that take and return only numbers,
// strings and typed arrays of this realm (but for a few that serve only
// while the realm boots, and build its instances: see python-realms.mjs),
// and are disabled when the job ends. They are kept in this closure and
// never stored where a program could read them; an error out of one is
// replaced by an Error of this realm (see `guard`), since one of the
// harness's realm would lead to its Function constructor.
//
// Pyodide runs here as in a JS shell (`read`, `readbuffer` and `load`
// defined), so it looks for no Node, Deno or browser API. Its files come
// from the harness through `host.fileSize`/`host.readPart`; the memory
// snapshot is copied by the harness straight into the instance's memory.
(function pythonRealm(host) {
  "use strict";
  const realm = globalThis;
  // Taken now, before any program runs: every call into the harness goes
  // through these, so a program that replaces Reflect.apply later never
  // sees a host function.
  const apply = Reflect.apply;
  const { max, min, trunc } = Math;
  const Bytes = Uint8Array;
  delete realm.console;
  closeDenoHooks();

  /**
   * Deno's hooks into V8 are the isolate's, so they serve this context
   * too, and two of them hand a program objects of the harness's realm:
   * with a function at `globalThis.Error.prepareStackTrace`, Deno calls
   * it with call sites whose prototype is the harness's; and
   * `WebAssembly.compileStreaming`/`instantiateStreaming` call Deno's
   * fetch code, which rejects with a TypeError of its own. So
   * `globalThis.Error` and its `prepareStackTrace` (an own property, or
   * one on Function.prototype would be found) are fixed, and the two
   * streaming functions removed, before any other code runs here; so is
   * Atomics.waitAsync, whose waiters outlive the realm (see below).
   */
  function closeDenoHooks() {
    const fixed = (object, name, value) =>
      Object.defineProperty(object, name, { value, writable: false, enumerable: false, configurable: false });
    fixed(realm, "Error", Error);
    fixed(Error, "prepareStackTrace", undefined);
    delete WebAssembly.compileStreaming;
    delete WebAssembly.instantiateStreaming;
    // An Atomics.waitAsync waiter is V8's, not the realm's: its timeout
    // fires after the realm is collected (the child still reports clean),
    // so a job could leave work for the next job's time. No other thread
    // shares this realm's memory, so there is nothing to wait for anyway.
    delete Atomics.waitAsync;
    // A shared child starts with V8's `gc` exposed (python-realms.mjs), so
    // every context gets one, which cannot be deleted: a forced full
    // collection is the harness's to call, between jobs. The name stays
    // the program's to use, as it is where no `gc` is exposed.
    if (Object.hasOwn(realm, "gc")) realm.gc = undefined;
  }

  /** `f` with any error replaced by one of this realm: see above. */
  const guard = (f) =>
    function () {
      try {
        return apply(f, undefined, arguments);
      } catch {
        throw new Error("runbox: the harness refused the call");
      }
    };
  const fileSize = guard(host.fileSize);
  const readPart = guard(host.readPart);
  const decode = guard(host.decode);
  const write = guard(host.write);
  const now = guard(host.now);
  const randomFill = guard(host.randomFill);
  const startTimer = guard(host.startTimer);
  const instantiate = guard(host.instantiate);
  const restoreMemory = guard(host.restoreMemory);
  const heapMemory = guard(host.memory);
  const symbolSlot = guard(host.symbolSlot);
  const symbolAddress = guard(host.symbolAddress);
  const finish = guard(host.finish);
  const fetchStart = guard(host.fetchStart);
  const fetchBody = guard(host.fetchBody);
  const keepCompiledRunner = guard(host.keepCompiledRunner);
  const jsSlots = guard(host.jsSlots);
  const instantiateHelper = guard(host.instantiateHelper);

  const encoder = {
    encode(text) {
      const bytes = unescape(encodeURIComponent(String(text ?? "")));
      const out = new Uint8Array(bytes.length);
      for (let i = 0; i < bytes.length; i++) out[i] = bytes.charCodeAt(i);
      return out;
    },
  };

  // What Pyodide and Emscripten use of a host, on this realm's terms.
  realm.read = (path) => decode(fileBytes(path));
  realm.readbuffer = (path) => fileBytes(path).buffer;
  realm.load = (path) => {
    throw new Error(`runbox: no script to load at ${path}`);
  };
  realm.print = (text) => write(1, encoder.encode(`${text}\n`));
  realm.printErr = (text) => write(2, encoder.encode(`${text}\n`));
  const log = (fd) => (...parts) => write(fd, encoder.encode(`${parts.map(String).join(" ")}\n`));
  realm.console = { log: log(1), info: log(1), debug: log(1), warn: log(2), error: log(2) };
  realm.performance = { now: () => now() };
  realm.crypto = {
    getRandomValues(array) {
      randomFill(array);
      return array;
    },
  };
  realm.TextDecoder = class TextDecoder {
    decode(bytes) {
      return bytes === undefined ? "" : decode(ArrayBuffer.isView(bytes) ? bytes : new Uint8Array(bytes));
    }
  };
  realm.TextEncoder = class TextEncoder {
    encode(text) {
      return encoder.encode(text);
    }
    encodeInto(text, into) {
      const bytes = encoder.encode(text);
      const written = Math.min(bytes.length, into.length);
      into.set(bytes.subarray(0, written));
      return { read: String(text).length, written };
    }
  };
  const timers = new Map();
  let nextTimer = 1;
  realm.setTimeout = (callback, ms, ...args) => {
    const id = nextTimer++;
    timers.set(id, () => callback(...args));
    startTimer(id, Number(ms) || 0);
    return id;
  };
  realm.clearTimeout = (id) => void timers.delete(id);
  /** Called by the harness when timer `id` is due. */
  const fireTimer = (id) => {
    const callback = timers.get(id);
    timers.delete(id);
    if (callback) callback();
  };

  function fileBytes(path) {
    const name = String(path);
    const size = fileSize(name);
    if (size < 0) throw new Error(`runbox: Pyodide asked for a file it was not given: ${name}`);
    const bytes = new Uint8Array(size);
    readPart(name, 0, bytes);
    return bytes;
  }

  /**
   * Puts the harness's file `name` at `path` in the in-memory file system,
   * its bytes read from the harness only where a program reads them
   * (through `subarray`, which a patch in python-realms.mjs has MEMFS use
   * for every read and mapping of such a file). The packages zip is
   * 7.4 MB and the standard library's 2.4 MB, of which a job that imports
   * nothing the snapshot has not imported reads nothing; copying them into
   * every realm cost about 2 ms of CPU (docs/performance.md). A program
   * that changes the file gets a copy of its own first: MEMFS grows
   * contents through `subarray` and writes in place through `set`.
   */
  function placeLazily(FS, path, name) {
    const size = fileSize(name);
    if (size < 0) throw new Error(`runbox: no file ${name} to place at ${path}`);
    FS.writeFile(path, new Bytes(0));
    const node = FS.lookupPath(path).node;
    node.contents = {
      length: size,
      subarray(start = 0, end = size) {
        const from = max(0, min(size, trunc(start)));
        const bytes = new Bytes(max(0, min(size, trunc(end)) - from));
        readPart(name, from, bytes);
        return bytes;
      },
      set(source, offset) {
        const copy = this.subarray();
        copy.set(source, offset);
        node.contents = copy;
      },
    };
    node.usedBytes = size;
  }

  /**
   * Puts the small-object allocator (small-objects.wat) under CPython's
   * object and memory domains, before the runner or any program runs:
   * CPython here has no pymalloc, and dlmalloc took a third of a CPU-bound
   * program's time (docs/performance.md). It wraps the allocator it
   * replaces, freeing the blocks that one made through it, as tracemalloc's
   * hooks do. Its functions go in new table slots, its state in a block of
   * the instance's memory: nothing of it outlives the job.
   */
  function installSmallObjects(module) {
    const PAGE = 65536;
    const allocator = instantiateHelper(fileBytes("small-objects.wasm"), {
      env: { memory: heap.memory, malloc: module._malloc, free: module._free, realloc: module._realloc, memalign: module._memalign },
    });
    // PyMemAllocatorEx (ctx, malloc, calloc, realloc, free), then the
    // allocator's state and its map, a byte per 16 KiB of the memory's
    // maximum.
    const struct = module._calloc(1, 32 + 1024 + heap.maximum * (PAGE / 16384));
    if (!struct) throw new Error("runbox: no memory for the small-object allocator");
    const ctx = struct + 32;
    const table = module.wasmTable;
    const slot = table.grow(4);
    const { alloc, calloc, realloc, free } = allocator.exports;
    // In this order: the inlined fast path finds `free` 3 slots after `alloc`.
    [alloc, calloc, realloc, free].forEach((f, i) => table.set(slot + i, f));
    const words = new Uint32Array(heap.memory.buffer);
    words.set([ctx, slot, slot + 1, slot + 2, slot + 3], struct >>> 2);
    // The most the pools may take: a sixteenth of the memory's maximum.
    words[(ctx + 780) >>> 2] = (heap.maximum * PAGE) / 16;
    const PYMEM_DOMAIN_MEM = 1;
    const PYMEM_DOMAIN_OBJ = 2;
    module._PyMem_SetAllocator(PYMEM_DOMAIN_MEM, struct);
    module._PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, struct);
    // CPython's own calls into the allocator take its common cases inline
    // from now on (pyodide-wasm.mjs, `inlineSmallObjects`).
    smallObjectsSwitch.value = slot;
  }

  /** The module's switch for its inlined small-object allocator, and its export's name (SMALL_OBJECTS in pyodide-wasm.mjs). */
  let smallObjectsSwitch = null;
  const SMALL_OBJECTS = "runbox_small_objects";

  // The harness's name for the runner's compiled code, once it has it.
  const COMPILED_RUNNER = "runner.marshal";
  // Added to the exit status the runner returns when the program ended on a MemoryError.
  const MEMORY_FLAG = 0x100;
  let instance = null;

  /** The instance's memory and its maximum in pages, once made. */
  let heap = null;

  /**
   * Python's heap is WebAssembly memory, which V8's heap limit does not
   * cover. Capping its page count makes growth fail inside the allocator,
   * so Python raises a clean MemoryError instead of the process dying.
   */
  function capWasmMemory(mb) {
    const maxPages = mb > 0 ? Math.floor((mb * 1024 * 1024) / 65536) : 65536;
    const Memory = WebAssembly.Memory;
    function CappedMemory(descriptor) {
      const maximum = Math.min(descriptor.maximum ?? maxPages, maxPages);
      const initial = Math.min(descriptor.initial, maximum);
      // Pyodide's one-page shared memory (for Atomics.wait) is not its
      // heap, which the harness makes (a memory no realm owns).
      if (descriptor.shared) return new Memory({ ...descriptor, initial, maximum });
      const memory = heapMemory(initial, maximum);
      heap = { memory, maximum };
      return memory;
    }
    CappedMemory.prototype = Memory.prototype;
    WebAssembly.Memory = CappedMemory;
  }

  /**
   * Builds the instance: Pyodide's own loader, in shell mode, with its
   * wasm instantiated by the harness from the shared module, and its
   * memory image put in place by the harness (`header` is the snapshot's
   * header and JSON, which Pyodide reads; `size` the whole snapshot's;
   * `packagesZip` where the runtime's packages go, on sys.path).
   */
  async function boot({ memoryMb, lock, header, size, runner, packagesZip, tableSize, packagesUrl }) {
    capWasmMemory(memoryMb);
    const wasm = WebAssembly;
    const original = wasm.instantiate;
    // Pyodide reads the wasm file (a placeholder) and instantiates it:
    // the harness builds the instance from the module it compiled.
    wasm.instantiate = function (source, imports) {
      if (!(source instanceof Uint8Array) || source.length !== 8) return Reflect.apply(original, wasm, arguments);
      const stub = fileBytes("dylink.wasm");
      const made = instantiate(imports);
      smallObjectsSwitch = made.exports[SMALL_OBJECTS];
      if (!(smallObjectsSwitch instanceof wasm.Global)) throw new Error("runbox: the module has no small-object switch");
      return Promise.resolve({ instance: made, module: new wasm.Module(stub) });
    };
    // Pyodide sizes the memory from the snapshot's length and reads its
    // header; the harness copies the image (see restoreMemory).
    // A buffer that reserves its size and commits none of it until touched:
    // a plain one of 30 MB is zeroed byte by byte in every realm.
    const length = Math.max(size, header.length);
    const reserved = new ArrayBuffer(header.length, { maxByteLength: length });
    reserved.resize(length);
    const snapshot = new Uint8Array(reserved);
    snapshot.set(header);
    realm.__runboxRestore = () => restoreMemory();
    realm.__runboxPlaceStdlib = (FS, path) => placeLazily(FS, path, "/pyodide/python_stdlib.zip");
    realm.__runboxJsSlots = (functions, start, table) => jsSlots(functions, start, table);
    realm.__runboxInstantiate = (bytes, imports) => instantiateHelper(new Bytes(bytes), imports);
    // The exports relocated as Emscripten's relocateExports does, without
    // the GOT entries (see the patches in python-realms.mjs). The table
    // slots its updateGOT would have given them are filled already, by the
    // instantiation: the table must still end where they do.
    let memoryBase = 0;
    realm.__runboxRelocate = (exports, base, table) => {
      if (table.length !== tableSize) throw new Error(`runbox: the table has ${table.length} slots, not ${tableSize}`);
      memoryBase = base;
      const relocated = {};
      for (const name in exports) {
        // The small-object switch is a global of the harness's, not data.
        if (name === SMALL_OBJECTS) continue;
        const value = exports[name];
        relocated[name] = typeof value === "object" ? value.value + base : value;
      }
      return relocated;
    };
    // The module's symbols: its exports, and those it no longer exports
    // (pyodide-wasm.mjs), each added to them when first asked for, as the
    // function in its table slot or the address of its data.
    let linked = null;
    const find = (name) => {
      if (!linked || typeof name !== "string" || Object.hasOwn(linked.exports, name)) return;
      const slot = symbolSlot(name);
      if (slot >= 0) linked.exports[name] = linked.table.get(slot);
      else {
        const address = symbolAddress(name);
        if (address >= 0) linked.exports[name] = address + memoryBase;
      }
    };
    realm.__runboxSymbols = (exports, table) => {
      linked = { exports, table };
      return new Proxy(exports, {
        get(target, name, receiver) {
          find(name);
          return Reflect.get(target, name, receiver);
        },
        has(target, name) {
          find(name);
          return Reflect.has(target, name);
        },
        getOwnPropertyDescriptor(target, name) {
          find(name);
          return Reflect.getOwnPropertyDescriptor(target, name);
        },
      });
    };
    // The symbols whose definitions the glue no longer has (pyodide-wasm.mjs)
    // are found as above when asked for, behind `prototype`, and kept on
    // the object that asked. The glue's `Module` gets this prototype, for
    // whoever asks there (`ccall`, a program), and so does the realm's
    // global object, for code the glue evaluates in its own scope, which
    // names them as bare variables (a side module's EM_JS and EM_ASM,
    // `emscripten_run_script`). It reports `prototype` as its own.
    const symbolsBehind = (prototype) =>
      new Proxy(Object.create(prototype), {
        get(target, name, receiver) {
          const value = symbolNamed(name);
          if (value === undefined) return Reflect.get(target, name, receiver);
          Object.defineProperty(receiver, name, { value, writable: true, enumerable: true, configurable: true });
          return value;
        },
        has(target, name) {
          return symbolNamed(name) !== undefined || Reflect.has(target, name);
        },
      });
    /** Symbol `f` for the name `_f`, once the instance is linked, or undefined. */
    const symbolNamed = (name) => {
      if (!linked || typeof name !== "string" || !name.startsWith("_")) return undefined;
      const symbol = name.slice(1);
      find(symbol);
      return Object.hasOwn(linked.exports, symbol) ? linked.exports[symbol] : undefined;
    };
    realm.__runboxModuleSymbols = symbolsBehind;
    Object.setPrototypeOf(realm, symbolsBehind(Object.getPrototypeOf(realm)));
    let pyodide;
    try {
      pyodide = await realm.loadPyodide({
        indexURL: "/pyodide/",
        packageBaseUrl: packagesUrl || undefined,
        lockFileContents: lock,
        ...(size > 0 ? { _loadSnapshot: snapshot } : {}),
        stdout: realm.print,
        stderr: realm.printErr,
      });
    } finally {
      wasm.instantiate = original;
      delete realm.__runboxRestore;
      delete realm.__runboxPlaceStdlib;
      delete realm.__runboxJsSlots;
      delete realm.__runboxInstantiate;
      delete realm.__runboxRelocate;
      delete realm.__runboxSymbols;
      delete realm.__runboxModuleSymbols;
      delete realm.loadPyodide;
    }
    pyodide._api.config._loadSnapshot = undefined;
    placeLazily(pyodide.FS, packagesZip, "packages.zip");
    installSmallObjects(pyodide._module);
    const sink = (fd) => ({
      write(bytes) {
        write(fd, bytes);
        return bytes.length;
      },
    });
    pyodide.setStdout(sink(1));
    pyodide.setStderr(sink(2));
    // Plain exec, not runPython: Pyodide's eval_code parses the source with
    // `ast` first, and the instance's first call after it ran markedly slower.
    // The runner is compiled by a child's first realm, which hands its code
    // to the harness as marshal's bytes; every later realm loads those
    // (0.3 ms, where compiling it took about 2).
    const globals = pyodide.toPy({ PACKAGES_ZIP: packagesZip, MEMORY_FLAG });
    const builtins = pyodide.pyimport("builtins");
    const marshal = pyodide.pyimport("marshal");
    let code;
    if (fileSize(COMPILED_RUNNER) >= 0) code = marshal.loads(pyodide.toPy(fileBytes(COMPILED_RUNNER)));
    else {
      code = builtins.compile(runner, "<string>", "exec");
      keepCompiledRunner(marshal.dumps(code).toJs());
    }
    builtins.exec(code, globals);
    instance = { pyodide, runMain: globals.get("run_main") };
  }

  /**
   * Runs one program (`job` is the frame's JSON, as the harness rebuilt
   * it) and tells the harness (`finish`) its exit status, whether it ended
   * on a MemoryError, and its returned files as JSON (or "null"). The
   * harness takes the first answer only.
   */
  function run(jobJson) {
    const job = JSON.parse(jobJson);
    const answer = (status, memoryError, files) => finish(status, memoryError, files);
    execute(job).then(
      ({ status, memoryError, files }) => answer(status, memoryError, JSON.stringify(files)),
      (error) => {
        write(2, encoder.encode(`runbox: ${String(error?.message ?? error)}\n`));
        answer(1, false, "null");
      },
    );
  }

  async function execute(job) {
    const { pyodide, runMain } = instance;
    writeFiles(pyodide.FS, job.files);
    // Returned files are found from where the program started, wherever it went.
    const home = pyodide.FS.cwd();
    const stdin = encoder.encode(job.stdin);
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
    const result = await runMain.callPromising(job.code, job.args);
    // Whether the heap was near its cap too, the harness decides: it reads
    // the memory's size with getters no program can replace.
    const memoryError = (result & MEMORY_FLAG) !== 0;
    const files = job.return_files ? filesWritten(pyodide.FS, home, job) : null;
    return { status: result & 0xff, memoryError, files };
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
    const given = new Map(job.files.map((file) => [file.path, file]));
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

  /** Puts files in Pyodide's in-memory file system (relative paths: under the working directory). */
  function writeFiles(FS, files) {
    for (const file of files) {
      const { path } = file;
      const slash = path.lastIndexOf("/");
      if (slash > 0) FS.mkdirTree(path.slice(0, slash));
      FS.writeFile(path, inputBytes(file));
    }
  }

  function inputBytes({ content, encoding }) {
    return encoding === "base64" ? fromBase64(content) : encoder.encode(content);
  }

  // Base64 by hand: a bare realm has no atob or btoa.
  const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const SEXTETS = new Map([...ALPHABET].map((c, i) => [c, i]));

  function base64(bytes) {
    const parts = [];
    for (let at = 0; at < bytes.length; at += 3) {
      const n = (bytes[at] << 16) | ((bytes[at + 1] ?? 0) << 8) | (bytes[at + 2] ?? 0);
      const left = bytes.length - at;
      parts.push(
        ALPHABET[n >> 18] + ALPHABET[(n >> 12) & 63] + (left > 1 ? ALPHABET[(n >> 6) & 63] : "=") +
          (left > 2 ? ALPHABET[n & 63] : "="),
      );
    }
    return parts.join("");
  }

  /** The api checked `content` is base64; anything else decodes as zeros. */
  function fromBase64(text) {
    const clean = String(text).replace(/=+$/, "");
    const out = new Uint8Array(Math.floor((clean.length * 3) / 4));
    let bits = 0;
    let value = 0;
    let at = 0;
    for (const c of clean) {
      value = (value << 6) | (SEXTETS.get(c) ?? 0);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out[at++] = (value >> bits) & 0xff;
      }
    }
    return out;
  }

  /**
   * A job whose token has egress rules: `installFetch` (python-fetch.js,
   * evaluated in this realm by the harness) defines `fetch` and its
   * classes here, sending each request through the harness to the proxy.
   */
  const waiting = new Map();
  function useFetch(installFetch) {
    const send = (meta, body) =>
      new Promise((resolve, reject) => {
        const id = fetchStart(JSON.stringify(meta), body);
        waiting.set(id, { resolve, reject });
      });
    installFetch(realm, send);
    // Pyodide turns a package's sha256 into integrity metadata with btoa.
    realm.btoa = (binary) => {
      const text = String(binary);
      const bytes = new Uint8Array(text.length);
      for (let i = 0; i < text.length; i++) {
        const code = text.charCodeAt(i);
        if (code > 255) throw new Error("btoa: a character past Latin-1");
        bytes[i] = code;
      }
      return base64(bytes);
    };
  }

  /** Called by the harness when request `id` is answered (`answer` is JSON; the body follows). */
  const fetched = (id, answer, length) => {
    const request = waiting.get(id);
    if (!request) return;
    waiting.delete(id);
    const meta = JSON.parse(answer);
    if (typeof meta.error === "string") {
      request.reject(new TypeError(meta.error));
      return;
    }
    const body = new Uint8Array(length);
    fetchBody(id, body);
    request.resolve({ meta, body });
  };

  return { boot, run, fireTimer, useFetch, fetched };
});
