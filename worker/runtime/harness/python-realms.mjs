// The harness's side of a Python job's realm (python-realm.js): reads and
// compiles what every realm is built from, once per child, and makes one
// bare V8 context per job, in which a Pyodide instance is built from the
// shared wasm module.
//
// What crosses into a realm: the functions of `host` below, held in the
// realm script's closure, which take numbers, strings and typed arrays of
// that realm, copy what they read with this realm's intrinsics, and return
// only numbers and strings. The exceptions serve only while the realm
// boots, before any program has run in it, and refuse calls after:
// `memory` returns a wasm memory of no realm with the realm's own
// prototypes; `instantiate` and `instantiateHelper` return, and `jsSlots`
// makes, an instance built by the realm's own constructor, from the
// realm's imports (its functions, its table) and a module this realm
// compiled, which no instance exposes. What comes back: plain
// values through `host.finish`, never a promise of that realm, whose
// `then` a program could have replaced (awaiting it would hand the program
// this realm's resolve functions, and through them its Function).
//
// A realm is retired when its job ends: its host functions stop working,
// its timers are cleared, and every reference to it is dropped.
// `PythonRealm.isGone` then tells, after a collection, whether V8 has freed
// it: a realm still alive (a promise or callback of the job's kept it)
// could still run code, and the child is then replaced.
import { clearImmediate, setImmediate } from "node:timers";
import v8 from "node:v8";
import vm from "node:vm";

import { PACKAGES_ZIP, readPackages } from "./pyodide.mjs";
import { dylinkStub, jsSlotsModule, linkModule } from "./pyodide-wasm.mjs";
import { writeAll } from "./protocol.mjs";

const apply = Reflect.apply;
const construct = Reflect.construct;
const TypedArray = Object.getPrototypeOf(Uint8Array);
const typedLength = Object.getOwnPropertyDescriptor(TypedArray.prototype, "length").get;
const typedSet = TypedArray.prototype.set;
const decoder = new TextDecoder();
// This realm's own getters: read through them, a job's memory answers
// with what V8 holds for it, whatever the job did to its own realm.
const memoryBuffer = Object.getOwnPropertyDescriptor(WebAssembly.Memory.prototype, "buffer").get;
const bufferLength = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, "byteLength").get;
const tableLength = Object.getOwnPropertyDescriptor(WebAssembly.Table.prototype, "length").get;
const tableGrow = WebAssembly.Table.prototype.grow;
const heapStatistics = v8.getHeapStatistics;
const setPrototype = Reflect.setPrototypeOf;
const isExtensible = Reflect.isExtensible;
const ownKeys = Reflect.ownKeys;
const getRandomValues = crypto.getRandomValues.bind(crypto);
// V8's own collection, which a child that collects (a shared one) has
// from --expose-gc (shared-python.v8-flags): one mark-compact, or as a
// last resort as many memory-reducing ones as free something. Every
// context made in such a child has a `gc` too, which python-realm.js takes
// from a job's realm before any program runs. (A context made only to get
// a collection of the second kind, as this file once did, was 2,000 more
// objects for every collection to mark.)
const ownCollect = globalThis.gc;
globalThis.gc = undefined;

// Every job realm's wasm memory is made in this bare context, where no
// script ever runs, so that it is no job's: a memory made by a realm's own
// constructor would keep that realm alive as long as it is used. A realm
// gets it with its own prototypes (see PythonRealm's `memory`), and a
// job's memory serves the next job's realm once V8 has freed the job's
// realm (`spareMemory`): the kernel has faulted its pages in already.
const memoryMaker = vm.createContext(vm.constants.DONT_CONTEXTIFY);
const Memory = vm.runInContext("WebAssembly.Memory", memoryMaker);
const PAGE_BYTES = 65536;

/** A pattern that matches `text` as it is. */
const literal = (text) => new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));

/** Pyodide's Emscripten script and loader, changed where a realm needs it. */
const PATCHES = [
  {
    file: "pyodide.mjs",
    // An ES module; a context evaluates scripts, so the export becomes a global.
    find: /export\s*\{\s*(\w+) as loadPyodide\s*,[^}]*\};?/,
    replace: "globalThis.loadPyodide = $1;",
  },
  {
    file: "pyodide.mjs",
    // The standard library's zip (2.4 MB) is not read and copied into the
    // file system: the realm places it there, read from the harness where
    // a program reads it (see placeLazily in python-realm.js).
    find: /function (\w+)\((\w)\)\{let (\w)=\w+\(\2\);return async (\w)=>\{(.*?)try\{let (\w)=await \3;\4\.FS\.writeFile\(`\/lib\/python\$\{(\w)\}\$\{(\w)\}\.zip`,\6\)\}/,
    replace: "function $1($2){return async $4=>{$5try{globalThis.__runboxPlaceStdlib($4.FS,`/lib/python${$7}${$8}.zip`)}",
  },
  {
    file: "pyodide.asm.js",
    // A file whose bytes the realm reads from the harness (placeLazily in
    // python-realm.js) is read through its `subarray`, however few bytes
    // are read: MEMFS reads up to 8 bytes by index, which only a typed
    // array has.
    find: literal("if(size>8&&contents.subarray){buffer.set(contents.subarray(position,position+size),offset)}"),
    replace:
      "if((size>8||!ArrayBuffer.isView(contents))&&contents.subarray){buffer.set(contents.subarray(position,position+size),offset)}",
  },
  {
    file: "pyodide.asm.js",
    // ... and mapped through it too, even whole: MEMFS copies a whole
    // file's contents into the mapping as they are.
    find: literal("if(position>0||position+length<contents.length){if(contents.subarray)"),
    replace: "if(position>0||position+length<contents.length||!ArrayBuffer.isView(contents)){if(contents.subarray)",
  },
  {
    file: "pyodide.asm.js",
    // The module factory adds some 1,700 properties to `Module`, each
    // statement once per realm. V8 keeps an object that takes named
    // properties in fast mode for its first thousand or so, copying its
    // descriptors on every add: 3 ms of each realm. Deleting a property
    // that is not the last one added puts it in dictionary mode first,
    // where an add is a hash insert. Its prototype finds the symbols whose
    // definitions the glue no longer has (pyodide-wasm.mjs, python-realm.js).
    find: /var Module=moduleArg;/,
    replace:
      "var Module=moduleArg;Module.__runboxA=0;Module.__runboxB=0;delete Module.__runboxA;delete Module.__runboxB;Object.setPrototypeOf(Module,__runboxModuleSymbols(Object.getPrototypeOf(Module)));",
  },
  {
    file: "pyodide.asm.js",
    // Pyodide's bootstrap fetches four Python objects through eval_code,
    // which parses its source with `ast` and compiles it, 3.5 ms of CPU of
    // every realm: they are imported instead. runPythonInternal_dict, the
    // globals of those snippets (the loader runs no other), gets the names
    // they bound.
    find: literal(
      'API.runPythonInternal_dict=API._pyodide._base.eval_code("{}"),API.importlib=API.runPythonInternal("import importlib; importlib");let o=API.importlib.import_module;API.sys=o("sys"),API.os=o("os");let i=API.runPythonInternal("import __main__; __main__.__dict__"),s=API.runPythonInternal("import builtins; builtins.__dict__");',
    ),
    replace:
      'API.importlib=API._pyodide._base.import_module("importlib");let o=API.importlib.import_module;API.sys=o("sys"),API.os=o("os");let i=o("__main__").__dict__,s=o("builtins").__dict__;API.runPythonInternal_dict=o("builtins").dict();for(let n of["importlib","__main__","builtins"])API.runPythonInternal_dict.set(n,o(n));',
  },
  {
    file: "pyodide.asm.js",
    // The package index's Python half: two globals of `_pyodide._importhook`
    // set from the lock file, which the memory snapshot already holds (it
    // was made after Pyodide set them, from the same lock file). Set again,
    // from a JS Map converted entry by entry, they cost each realm about a
    // twelfth of its boot; without a snapshot they are still set.
    find: literal(
      "API._pyodide._importhook.register_module_not_found_hook(API._import_name_to_package_name,API.lockfile_unvendored_stdlibs_and_test),",
    ),
    replace:
      "API.config._loadSnapshot||API._pyodide._importhook.register_module_not_found_hook(API._import_name_to_package_name,API.lockfile_unvendored_stdlibs_and_test),",
  },
  {
    file: "pyodide.asm.js",
    // restoreSnapshot copies the image into the heap; the harness does (see restoreMemory).
    find: /Module\.HEAP8\.set\((\w+)\),(\w+)\}/,
    replace: "globalThis.__runboxRestore(),$2}",
  },
  {
    file: "pyodide.asm.js",
    // In a shell, Pyodide loads packages by path only. A URL is fetched
    // with the realm's `fetch`, which only a job with egress rules has
    // (python-fetch.js); the proxy checks the package's hash.
    find: /function (\w+)\((\w),(\w)\)\{if\(\2\.startsWith\("file:\/\/"\)&&\(\2=\2\.slice\(7\)\),\2\.includes\(":\/\/"\)\)throw new Error\("Shell cannot fetch urls"\);/,
    replace:
      'function $1($2,$3){if($2.startsWith("file://")&&($2=$2.slice(7)),$2.includes("://"))return{response:fetch($2,$3?{integrity:$3}:{})};',
  },
  {
    file: "pyodide.asm.js",
    // ... and a package's file name is resolved against packageBaseUrl
    // (in a shell Pyodide takes the name as it is, a path).
    find: /d\.IN_SHELL\?(\w+)=a\(t=>t,"resolvePath"\)/,
    replace: 'd.IN_SHELL?$1=a((t,e)=>e&&e.includes("://")&&!t.includes("://")?e+t:t,"resolvePath")',
  },
  {
    file: "pyodide.asm.js",
    // In a shell, Emscripten draws entropy through d8's os.system; the
    // realm's crypto.getRandomValues (the harness's, by copy) serves instead.
    find: /if\(ENVIRONMENT_IS_SHELL\)\{return view=>\{if\(!os\.system\)/,
    replace: "if(false){return view=>{if(!os.system)",
  },
  // Emscripten's dynamic linking, done once per realm, cost more than half
  // of building one (see docs/performance.md). What no one reads is not
  // built; what is read is found where it already is:
  {
    file: "pyodide.asm.js",
    // The main module's exports are relocated, but not each entered in the
    // GOT with a table slot of its own, which only a side module's link
    // or dlsym would read: both resolve a symbol through wasmImports (see
    // the next patch) and give a function its slot when they first ask.
    // The slots updateGOT would have given the exports are still filled,
    // in the same order, by the instantiation itself (pyodide-wasm.mjs
    // adds them to the module's element segments): the memory snapshot
    // holds function pointers into them.
    find: /wasmExports=relocateExports\(wasmExports,1024\);/,
    replace: "wasmExports=__runboxRelocate(wasmExports,1024,wasmTable);",
  },
  {
    file: "pyodide.asm.js",
    // wasmImports resolves every symbol of the main module it does not
    // define itself, as mergeLibSymbols made it do by copying all 9,708,
    // through its prototype: the exports, then the symbols the module no
    // longer exports (pyodide-wasm.mjs), each found when first asked for.
    find: /mergeLibSymbols\(wasmExports,"main"\);/,
    replace: "Object.setPrototypeOf(wasmImports,__runboxSymbols(wasmExports,wasmTable));",
  },
  {
    file: "pyodide.asm.js",
    // A JS function the module takes the address of (the 280 GOT.func
    // imports, nearly all WebGL stubs) is not in the table: it gets a slot
    // without first mapping the whole table to look for it, one per
    // function (20 of the names are aliases), remembered in `addFunction.js`.
    find: /entry\.value=addFunction\(value,value\.sig\)/,
    replace:
      'entry.value=typeof value.sig!="string"?addFunction(value,value.sig):(addFunction.js??=new Map).get(value)??(slot=>(addFunction.js.set(value,slot),slot))(jsSlots?(jsSlots.start??=wasmTable.length,jsSlots.push(value),jsSlots.start+jsSlots.length-1):(slot=>(setWasmTableEntry(slot,convertJsFunctionToWasm(value,value.sig)),slot))(getEmptyTableSlot()))',
  },
  {
    file: "pyodide.asm.js",
    // ... and while the realm boots, those slots are filled together,
    // after the loop, by one instance of a module the harness compiled
    // once per child (see `jsSlots`), where the loader compiled a module
    // and made an instance for each function, and grew the table by one.
    // A library loaded later (a job's C extension) is linked as before.
    find: literal("var reportUndefinedSymbols=()=>{for(var[symName,entry]of Object.entries(GOT)){"),
    replace:
      "var reportUndefinedSymbols=()=>{var jsSlots=globalThis.__runboxJsSlots&&[];reportUndefinedSymbolsTo(jsSlots);if(jsSlots?.length)globalThis.__runboxJsSlots(jsSlots,jsSlots.start,wasmTable)};var reportUndefinedSymbolsTo=jsSlots=>{for(var[symName,entry]of Object.entries(GOT)){",
  },
  {
    file: "pyodide.asm.js",
    // ... so that the table's map, once something builds it, knows them.
    find: /functionsInTableMap=new WeakMap;/,
    replace: "functionsInTableMap=new WeakMap(addFunction.js);",
  },
  {
    file: "pyodide.asm.js",
    // dlsym on the main module finds every export: they are wasmImports'
    // through its prototype, not its own (see above).
    find: /if\(!lib\.exports\.hasOwnProperty\(symbol\)\|\|lib\.exports\[symbol\]\.stub\)/,
    replace:
      "if(!(lib.exports.hasOwnProperty(symbol)||lib.exports===wasmImports&&Object.hasOwn(Object.getPrototypeOf(wasmImports),symbol))||lib.exports[symbol].stub)",
  },
  {
    file: "pyodide.asm.js",
    // The exports with a few wrapped: the rest are found through the
    // prototype instead of copied one by one (nothing lists them).
    find: /function applySignatureConversions\(wasmExports\)\{wasmExports=Object\.assign\(\{\},wasmExports\);/,
    replace: "function applySignatureConversions(wasmExports){wasmExports=Object.create(wasmExports);",
  },
  {
    file: "pyodide.asm.js",
    // Its wrapper module is compiled once per signature, not once per function.
    find: /var module=new WebAssembly\.Module\(new Uint8Array\(bytes\)\);/,
    replace: "var module=(convertJsFunctionToWasm.modules??={})[sig]??=new WebAssembly.Module(new Uint8Array(bytes));",
  },
  {
    file: "pyodide.asm.js",
    // The module that counts a function's arguments for CPython's call
    // trampoline is the same in every realm: while a realm boots it is
    // compiled once per child (see `instantiateHelper`).
    find: literal("const mod=new WebAssembly.Module(code);const inst=new WebAssembly.Instance(mod,{e:{t:wasmTable}});"),
    replace:
      "const inst=globalThis.__runboxInstantiate?.(code,{e:{t:wasmTable}})??new WebAssembly.Instance(new WebAssembly.Module(code),{e:{t:wasmTable}});",
  },
  {
    file: "pyodide.asm.js",
    // CPython's call trampoline is a new function: it needs a slot, not a search.
    find: /return addFunction\(inst\.exports\.f\)/,
    replace: "return(slot=>(setWasmTableEntry(slot,inst.exports.f),slot))(getEmptyTableSlot())",
  },
];

/** A copy, in this realm, of the typed array `bytes` of a job's realm. */
function own(bytes) {
  const copy = new Uint8Array(apply(typedLength, bytes, []));
  apply(typedSet, copy, [bytes]);
  return copy;
}

/**
 * Reads Pyodide's files, the snapshot and the realm script from `dir` and
 * `snapshotPath` (while the child may still read) and compiles the wasm
 * module and the scripts: everything a realm is built from. `fetchSource`
 * (python-fetch.js) runs only in the realm of a job with egress rules.
 */
export async function prepareRealms(dir, snapshotPath, realmSource, fetchSource = "undefined") {
  const read = (name) => Deno.readFileSync(`${dir}/${name}`);
  const sources = {};
  for (const { file, find, replace } of PATCHES) {
    const text = sources[file] ?? decoder.decode(read(file));
    const found = text.match(new RegExp(find.source, "g")) ?? [];
    if (found.length !== 1) {
      throw new Error(`${file} no longer has exactly one match for ${find}: update python-realms.mjs for this Pyodide`);
    }
    sources[file] = text.replace(find, replace);
  }
  const linked = linkModule(read("pyodide.asm.wasm"), sources["pyodide.asm.js"]);
  sources["pyodide.asm.js"] = linked.glue;
  const module = await WebAssembly.compile(linked.bytes);
  // Without a snapshot (setup not run), Pyodide boots from scratch in every realm.
  const snapshot = snapshotPath ? Deno.readFileSync(snapshotPath) : new Uint8Array(8);
  const headerLength = snapshotPath ? new DataView(snapshot.buffer, snapshot.byteOffset).getUint32(4, true) : 8;
  return {
    module,
    fetchScript: new vm.Script(fetchSource, { filename: "python-fetch.js" }),
    scripts: [
      new vm.Script(realmSource, { filename: "python-realm.js" }),
      new vm.Script(sources["pyodide.asm.js"], { filename: "pyodide.asm.js" }),
      new vm.Script(sources["pyodide.mjs"], { filename: "pyodide.mjs" }),
    ],
    files: new Map([
      // Pyodide reads the wasm file and instantiates what it read: it gets
      // an 8-byte placeholder, which the realm swaps for the shared module.
      ["/pyodide/pyodide.asm.wasm", new Uint8Array(8)],
      ["/pyodide/python_stdlib.zip", read("python_stdlib.zip")],
      ["dylink.wasm", dylinkStub(module)],
      ["packages.zip", readPackages(dir) ?? new Uint8Array(0)],
      // The small-object allocator each realm installs (small-objects.wat).
      ["small-objects.wasm", read("small-objects.wasm")],
    ]),
    lock: decoder.decode(read("pyodide-lock.json")),
    tableSize: linked.tableSize,
    symbols: linked.symbols,
    header: snapshot.slice(0, headerLength),
    image: snapshot.subarray(headerLength),
    size: snapshotPath ? snapshot.length : 0,
    // Found by the first realm's restore (see `sparseCopy` and `imageRanges`).
    pages: null,
    imageRanges: null,
    // Compiled while the first realm boots (see `jsSlots` and `instantiateHelper`).
    jsSlots: null,
    helpers: [],
  };
}

const PAGE = 4096;
/** The name a realm reads the runner's compiled code by (see `keepCompiledRunner`). */
const COMPILED_RUNNER = "runner.marshal";

/**
 * The [start, end) byte ranges, in whole pages, that restoring `image`
 * into `heap`, the memory of a freshly instantiated module, must copy:
 * every page that is not zero in both. A page the image has all zero is
 * skipped only if instantiation left it zero too (its data segments
 * could have written it); every instance of one module starts alike, so
 * the first realm's answer serves every later one.
 */
function sparseCopy(image, heap) {
  return pageRanges(image.length, (from, to) => !isZero(image, from, to) || !isZero(heap, from, to));
}

/**
 * The [start, end) byte ranges, in whole pages, where `image` is not all
 * zero: a reused memory gets these copied and zeros everywhere else,
 * which is cheaper than copying the zeros.
 */
function imageRanges(image) {
  return pageRanges(image.length, (from, to) => !isZero(image, from, to));
}

/** The pages of `length` bytes that `wanted(from, to)` picks, as merged [start, end) ranges. */
function pageRanges(length, wanted) {
  const ranges = [];
  for (let page = 0; page * PAGE < length; page++) {
    const from = page * PAGE;
    const to = Math.min(from + PAGE, length);
    if (!wanted(from, to)) continue;
    const last = ranges[ranges.length - 1];
    if (last && last[1] === from) last[1] = to;
    else ranges.push([from, to]);
  }
  return ranges;
}

function isZero(bytes, from, to) {
  for (let i = from; i < to; i++) if (bytes[i] !== 0) return false;
  return true;
}

/** One job's realm, with a Pyodide instance of its own. */
export class PythonRealm {
  #live = true;
  #timers = new Set();
  #api;
  #gone;
  #finish = null;
  #ended = () => {};
  /** The realm itself, from boot until its job starts. */
  #context = null;
  #fetchScript = null;
  /** The egress proxy's client (egress.mjs), for a job that may use it. */
  #egress = null;
  /** Answers' bodies the realm has yet to take, by request id. */
  #answers = new Map();
  #nextRequest = 1;
  /**
   * The instance's wasm memory (`{memory, buffer, pages, maximum}`: its
   * buffer and size as the realm got it), made by the harness (`memory`
   * below), which the snapshot was copied into (`restored`).
   */
  #heap = null;
  #restored = false;
  /** The memory, once the job is over, if it can serve the next realm (see `retire`). */
  #spare = null;

  /**
   * Builds a realm from `assets` (see prepareRealms); `memoryMb` caps its
   * wasm memory. The instance gets the memory `previous` (a retired realm)
   * left, if there is one (see `spareMemory`), or a new one.
   */
  static async boot(assets, memoryMb, runner, packagesUrl = "", previous = null) {
    const realm = new PythonRealm();
    await realm.#boot(assets, memoryMb, runner, packagesUrl, previous?.spareMemory() ?? null);
    return realm;
  }

  async #boot(assets, memoryMb, runner, packagesUrl, spare) {
    const context = vm.createContext(vm.constants.DONT_CONTEXTIFY);
    this.#gone = new WeakRef(context);
    // Taken before any script runs in the realm, so nothing can have changed them.
    const Instance = vm.runInContext("WebAssembly.Instance", context);
    const memoryPrototype = vm.runInContext("WebAssembly.Memory.prototype", context);
    const bufferPrototype = vm.runInContext("ArrayBuffer.prototype", context);
    const live = () => this.#live;
    let booting = true;
    const host = {
      fileSize: (name) => assets.files.get(String(name))?.length ?? -1,
      // A file's bytes from `position` on, as many as fit `into`; returns
      // how many it wrote.
      readPart: (name, position, into) => {
        const bytes = assets.files.get(String(name));
        if (!live() || !bytes || !Number.isSafeInteger(position) || position < 0 || position > bytes.length) return 0;
        const count = Math.min(apply(typedLength, into, []), bytes.length - position);
        apply(typedSet, into, [bytes.subarray(position, position + count)]);
        return count;
      },
      decode: (bytes) => decoder.decode(own(bytes)),
      write: (fd, bytes) => {
        if (live() && (fd === 1 || fd === 2)) writeAll(fd, own(bytes));
      },
      now: () => performance.now(),
      randomFill: (array) => void getRandomValues(array),
      startTimer: (id, ms) => {
        if (!live()) return;
        const delay = Math.max(0, Number(ms));
        const fire = () => {
          this.#timers.delete(timer);
          if (!live()) return;
          try {
            this.#api.fireTimer(id);
          } catch {
            // The program's callback threw: its own business.
          }
        };
        // A timer of no delay runs at the event loop's next turn. Through
        // setTimeout it would not: a timer set from a timer's callback is
        // held to 4 ms past five levels (HTML's rule, which Deno keeps),
        // and Pyodide's event loop runs every `call_soon` through a timer
        // of 0 ms in a realm (its other ways need globals a realm lacks),
        // so each job's asyncio waited about 4 ms doing nothing.
        const timer = delay === 0 ? { immediate: setImmediate(fire) } : setTimeout(fire, delay);
        this.#timers.add(timer);
      },
      finish: (status, memoryError, files) => this.#settle(status, memoryError, files),
      fetchStart: (metaJson, body) => this.#fetchStart(metaJson, body),
      fetchBody: (id, into) => {
        const bytes = this.#answers.get(id);
        this.#answers.delete(id);
        if (bytes && apply(typedLength, into, []) === bytes.length) apply(typedSet, into, [bytes]);
      },
      // The instance's memory, asked for once, while the realm boots: the
      // memory `spare` if it has the size asked for, or a new one.
      memory: (initial, maximum) => {
        if (!booting || this.#heap) throw new Error("a realm has one heap, made while it boots");
        const pages = Math.trunc(Number(initial));
        const limit = Math.trunc(Number(maximum));
        const reused = spare !== null && assets.size > 0 && spare.pages === pages && spare.maximum === limit;
        const memory = reused ? spare.memory : construct(Memory, [{ initial: pages, maximum: limit }]);
        spare = null;
        const buffer = apply(memoryBuffer, memory, []);
        if (!setPrototype(memory, memoryPrototype) || !setPrototype(buffer, bufferPrototype)) {
          throw new Error("the memory is not bare");
        }
        this.#heap = { memory, buffer, pages, maximum: limit, reused };
        return memory;
      },
      instantiate: (imports) => {
        // The module imports its memory (env.memory): it must be the one
        // the harness gave, which it restores and measures.
        if (!booting || !this.#heap || wasmMemoryOf(imports) !== this.#heap.memory) {
          throw new Error("not the realm's memory");
        }
        return construct(Instance, [assets.module, imports]);
      },
      // The runner's code, compiled by the first realm while it boots
      // (before any program has run in it), for every later realm to load.
      keepCompiledRunner: (bytes) => {
        if (booting && !assets.files.has(COMPILED_RUNNER)) assets.files.set(COMPILED_RUNNER, own(bytes));
      },
      // The JS functions the module takes the address of (nearly all of
      // them WebGL stubs), put in `table` from slot `start`, its end, on,
      // while the realm boots: a module of the harness's, compiled once
      // per child (jsSlotsModule), instantiated by the realm with them.
      jsSlots: (functions, start, table) => {
        if (!booting || apply(tableLength, table, []) !== start) throw new Error("not the table's end");
        // No program has run in the realm yet: its functions are Pyodide's,
        // each with its signature as an own string.
        const signature = (f) => {
          const sig = Reflect.getOwnPropertyDescriptor(f, "sig")?.value;
          if (typeof sig !== "string") throw new Error("a JS function without a signature");
          return sig;
        };
        if (!Array.isArray(functions)) throw new Error("not a list of functions");
        const listed = Array.from(functions);
        const signatures = listed.map(signature);
        const key = `${start}:${signatures.join()}`;
        if (assets.jsSlots?.key !== key) {
          assets.jsSlots = { key, module: new WebAssembly.Module(jsSlotsModule(signatures, start)) };
        }
        apply(tableGrow, table, [signatures.length]);
        const imports = { t: { table }, f: Object.fromEntries(listed.map((f, i) => [String(i), f])) };
        construct(Instance, [assets.jsSlots.module, imports]);
      },
      // An instance of one of the few small modules every realm makes the
      // same (`bytes`: the small-object allocator's, the trampoline's
      // argument counter), with `imports`, while the realm boots: each is
      // compiled once per child, not once per realm.
      instantiateHelper: (bytes, imports) => {
        if (!booting) throw new Error("only while the realm boots");
        const wanted = own(bytes);
        const same = ({ bytes }) => bytes.length === wanted.length && bytes.every((byte, i) => byte === wanted[i]);
        let helper = assets.helpers.find(same);
        if (!helper) assets.helpers.push((helper = { bytes: wanted, module: new WebAssembly.Module(wanted) }));
        return construct(Instance, [helper.module, imports]);
      },
      // Where the module's symbols it no longer exports are (pyodide-wasm.mjs).
      symbolSlot: (name) => assets.symbols.get(String(name))?.slot ?? -1,
      symbolAddress: (name) => assets.symbols.get(String(name))?.address ?? -1,
      restoreMemory: () => {
        if (!this.#heap || this.#restored) throw new Error("no memory to restore");
        const heap = new Uint8Array(apply(memoryBuffer, this.#heap.memory, []));
        if (this.#heap.reused) {
          // Another job's memory: every byte is written, the image's where
          // it is not zero and zeros everywhere else, so nothing of that
          // job's is left.
          assets.imageRanges ??= imageRanges(assets.image);
          let at = 0;
          for (const [start, end] of assets.imageRanges) {
            heap.fill(0, at, start);
            heap.set(assets.image.subarray(start, end), start);
            at = end;
          }
          heap.fill(0, at);
        } else {
          // Fresh wasm memory is zero but for what instantiation wrote: only
          // the image's other pages are copied (see `sparseCopy`).
          assets.pages ??= sparseCopy(assets.image, heap);
          for (const [start, end] of assets.pages) heap.set(assets.image.subarray(start, end), start);
        }
        this.#restored = true;
      },
    };
    const [realmScript, ...pyodideScripts] = assets.scripts;
    const made = realmScript.runInContext(context)(host);
    this.#api = { run: made.run, fireTimer: made.fireTimer, useFetch: made.useFetch, fetched: made.fetched };
    // Held until the job starts: python-fetch.js may have to run in it.
    this.#context = context;
    this.#fetchScript = assets.fetchScript;
    for (const script of pyodideScripts) script.runInContext(context);
    // No program has run in this realm yet, so its promise is Pyodide's own.
    await made.boot({
      memoryMb,
      lock: assets.lock,
      header: assets.header,
      size: assets.size,
      runner,
      packagesZip: PACKAGES_ZIP,
      tableSize: assets.tableSize,
      packagesUrl: String(packagesUrl),
    });
    booting = false;
    if (this.#heap?.reused && !this.#restored) throw new Error("a reused memory was not restored");
  }

  /**
   * Runs `job` (plain data, rebuilt by the harness); resolves with
   * `{status, memoryError, files}`, read from plain values. `memoryError`:
   * the program ended on a MemoryError with its heap at half its cap or
   * more (a program that raises one itself is not out of memory).
   */
  run(job, egress = null) {
    const context = this.#context;
    this.#context = null;
    if (job.egress === true && egress) {
      // Before any code of the job: see python-fetch.js.
      this.#egress = egress;
      this.#api.useFetch(this.#fetchScript.runInContext(context));
    }
    return new Promise((resolve) => {
      this.#finish = (status, memoryError, files) => {
        let parsed = null;
        try {
          parsed = typeof files === "string" ? JSON.parse(files) : null;
        } catch {
          parsed = null;
        }
        resolve({
          status: typeof status === "number" ? status & 0xff : 1,
          memoryError: memoryError === true && this.memoryBytes() >= (Number(job.memory_mb) * 1024 * 1024) / 2,
          files: parsed,
        });
      };
      // A program that leaves nothing to wait for and never ends (Pyodide
      // gave up on a fatal error, say) would let Deno exit: it has ended,
      // with status 1, and Deno keeps running.
      const stalled = (event) => {
        event.preventDefault();
        this.#settle(1, false, null);
      };
      addEventListener("beforeunload", stalled);
      this.#ended = () => removeEventListener("beforeunload", stalled);
      try {
        this.#api.run(JSON.stringify(job));
      } catch {
        this.#settle(1, false, null);
      }
    });
  }

  /**
   * Sends a request of the job's to the proxy (`metaJson`: method, url,
   * headers, redirect; `body` a typed array of the realm's, copied) and
   * returns its id; the answer reaches the realm through `fetched`.
   */
  #fetchStart(metaJson, body) {
    if (!this.#live || !this.#egress) throw new Error("no egress");
    const meta = JSON.parse(String(metaJson));
    const request = {
      method: String(meta.method),
      url: String(meta.url),
      headers: Array.from(meta.headers ?? [], ([name, value]) => [String(name), String(value)]),
      redirect: String(meta.redirect ?? "follow"),
      integrity: String(meta.integrity ?? ""),
    };
    const id = this.#nextRequest++;
    const answered = (answer, bytes) => {
      if (!this.#live) return;
      this.#answers.set(id, bytes);
      try {
        this.#api.fetched(id, answer, bytes.length);
      } catch {
        // The program's own business.
      }
      this.#answers.delete(id);
    };
    this.#egress.send(request, own(body)).then(
      ({ meta: got, body: bytes }) => answered(JSON.stringify(got), bytes),
      (error) => answered(JSON.stringify({ error: String(error?.message ?? error) }), new Uint8Array(0)),
    );
    return id;
  }

  /** Ends the running job with what it answered (or what the harness decided), once. */
  #settle(status, memoryError, files) {
    const finish = this.#finish;
    this.#finish = null;
    this.#ended();
    finish?.(status, memoryError, files);
  }

  /**
   * Bytes of the instance's wasm memory, which holds the interpreter and
   * every Python object: its peak, since wasm memory only grows. Read in
   * this realm, through this realm's getters, from the memory taken at
   * boot; nothing the job can reach takes part.
   */
  memoryBytes() {
    try {
      return apply(bufferLength, apply(memoryBuffer, this.#heap.memory, []), []);
    } catch {
      return 0;
    }
  }

  /** Ends the realm's use: its host functions and timers stop, and it is no longer referenced. */
  retire() {
    this.#live = false;
    // Held with the realm's prototypes, the memory would keep the realm
    // alive: they are taken off now, and whether the memory can serve
    // again is decided once the realm is gone (`spareMemory`). One that
    // could not serve now (grown, or left with a property or made
    // inextensible by the job) is let go, so that the collection which
    // frees the realm frees it too: held until then, it would be resident
    // beside the next realm's new memory.
    const heap = this.#heap;
    this.#heap = null;
    this.#spare = heap && released(heap) ? heap : null;
    this.#context = null;
    this.#egress?.clear();
    this.#egress = null;
    this.#answers.clear();
    for (const timer of this.#timers) timer.immediate ? clearImmediate(timer.immediate) : clearTimeout(timer);
    this.#timers.clear();
    this.#api = null;
  }

  /** Whether V8 has freed the realm, after a collection (call `collectGarbage` first). */
  isGone() {
    return this.#gone.deref() === undefined;
  }

  /**
   * The wasm memory the retired realm's job left, for the next realm's
   * instance, if it is `released`. Only once V8 has freed this realm: until
   * then the job's leftovers (a promise chain, say) may still run and
   * change it, and after that no code of the job's is left. Taken once.
   */
  spareMemory() {
    if (!this.isGone()) return null;
    const spare = this.#spare;
    this.#spare = null;
    return spare && released(spare) ? spare : null;
  }
}

/**
 * Whether `heap`'s memory, its job over and its realm freed, can serve
 * another realm: it and its buffer have no prototype (the job's realm's
 * were taken off), no property of their own and are still extensible, and
 * the buffer is the same at the same size (a memory grown or made
 * resizable is not reused). Its bytes are rewritten by the next realm's
 * restore. A private field a job stamped on either (a class constructor
 * can return any object) stays, but no later job can name it.
 */
function released(heap) {
  const bare = (object) => setPrototype(object, null) && isExtensible(object) && ownKeys(object).length === 0;
  return bare(heap.memory) && bare(heap.buffer) && sameSize(heap);
}

/** Whether `heap`'s memory still has the buffer and size it was handed over with. */
function sameSize({ memory, buffer, pages }) {
  try {
    return apply(memoryBuffer, memory, []) === buffer && apply(bufferLength, buffer, []) === pages * PAGE_BYTES;
  } catch {
    return false;
  }
}

/**
 * The wasm memory in `imports` (env.memory), checked to be one by this
 * realm's getter, or null.
 */
function wasmMemoryOf(imports) {
  try {
    const memory = imports.env.memory;
    apply(memoryBuffer, memory, []);
    return memory;
  } catch {
    return null;
  }
}

/** Bytes of V8 heap in use now, this realm's and every job realm's (one isolate). */
export function heapInUse() {
  return heapStatistics().used_heap_size;
}

/**
 * Resolves at the event loop's next turn, with no timer between (a
 * setTimeout of 0 ms idled about a millisecond): where a WeakRef read
 * after a collection sees what the collection freed.
 */
export function nextTurn() {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * A full collection of the process's heap: one mark-compact, or with
 * `thorough` as many memory-reducing ones as free something. Only in a
 * child started with --expose-gc.
 */
export function collectGarbage({ thorough = false } = {}) {
  if (!ownCollect) throw new Error("runbox: a child that collects starts with --expose-gc");
  ownCollect({ type: "major", execution: "sync", ...(thorough ? { flavor: "last-resort" } : {}) });
}
