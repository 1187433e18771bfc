// What the harness reads off Pyodide's wasm module and changes in it,
// once per child, so that a job's realm links its instance for less.
//
// Emscripten's loader links the main module in every realm: it gives each
// exported function a table slot (updateGOT), and the instance makes a
// function object for each of the module's 9,708 exports, a third of the
// instantiation. Both depend only on the module, so they are settled here:
//
// - the table slots the loader would fill one `table.set` at a time are
//   an element segment of the module, filled by the instantiation;
// - the module exports only the symbols the loader's glue reads; every
//   other one (which a C extension's link, `dlsym` or ctypes may ask for)
//   is found by name in `symbols`, as the table slot its function is in or
//   the address of its data, and read from the instance when asked for
//   (python-realm.js);
// - the glue's definition of a symbol that no JS code of the glue reads
//   (`var _f=Module["_f"]=wasmExports["f"];`, 3,500 of its 3,605) is left
//   out: `Module._f`, for whoever asks for it (`ccall`, a program), and a
//   bare `_f` in code the glue evaluates in its own scope (a side module's
//   EM_JS, `emscripten_run_script`) are found the same way, when asked for.
//
// And one change that is not about linking: CPython's calls into its
// allocator take the small-object allocator's common cases inline
// (`inlineSmallObjects`), once a realm has installed it.

const decoder = new TextDecoder();

const SECTION = { import: 2, global: 6, export: 7, element: 9, code: 10 };
const KIND = { function: 0, table: 1, memory: 2, global: 3, tag: 4 };

/**
 * Module `bytes` (pyodide.asm.wasm) as a realm links it, for glue `glue`
 * (pyodide.asm.js, patched): `bytes`, the changed module; `glue`, the glue
 * making its table with room for the slots the module now fills, without
 * the definitions of the symbols the module no longer exports;
 * `tableSize`, the table's size, which it keeps once linked; `symbols`,
 * name to `{ slot }` or `{ address }` (less the memory base) for each
 * symbol the module no longer exports.
 */
export function linkModule(bytes, glue) {
  const module = readModule(bytes);
  const tableStart = initialTableSize(glue);
  const tableBase = globalValue(glue, "___table_base");
  const internal = internalSymbols(glue);
  const { named, definitions } = readsOfGlue(glue);

  // The element segments' slots, where the module's own code expects them.
  const slots = new Map();
  for (const { offset, functions } of module.elements) {
    const start = offset.const ?? (module.importedGlobals[offset.global] === "__table_base" ? tableBase : null);
    if (start === null) throw new Error("an element segment at an offset pyodide-wasm.mjs cannot place");
    functions.forEach((index, position) => {
      if (!slots.has(index)) slots.set(index, start + position);
    });
  }
  // The slots updateGOT gives the other exported functions, in export
  // order, after the table's initial size (see `tableLayout`).
  const layout = tableLayout(module, internal, slots);
  layout.forEach((index, position) => slots.set(index, tableStart + position));

  const kept = [];
  const moved = new Map();
  for (const entry of module.exports) {
    const { name, kind, index } = entry;
    const mustKeep = named.has(name) || isInternal(internal, name);
    if (!mustKeep && kind === KIND.function && slots.has(index)) {
      moved.set(name, { slot: slots.get(index) });
    } else if (!mustKeep && kind === KIND.global && module.globals[index]?.constant !== undefined) {
      moved.set(name, { address: module.globals[index].constant });
    } else {
      kept.push(entry);
    }
  }
  // The small-object allocator's switch (see `inlineSmallObjects`): a
  // global of the module's own, after every other.
  const smallObjects = module.globals.length;
  kept.push({ name: SMALL_OBJECTS, kind: KIND.global, index: smallObjects });
  const symbols = new SymbolTable(moved);
  const changed = replaceSections(bytes, module.sections, {
    [SECTION.global]: concat([leb(module.globals.length - module.importedGlobals.length + 1), module.globalBytes, SWITCH_GLOBAL]),
    [SECTION.export]: exportSection(kept),
    [SECTION.element]: elementSection(module, layout, tableStart),
    [SECTION.code]: inlineSmallObjects(bytes, module, smallObjects),
  });
  const tableSize = tableStart + layout.length;
  // A definition whose symbol is no longer exported is left out.
  const defined = glue.replace(DEFINITION, (statement, name) => (symbols.has(name) ? "" : statement));
  if (![...definitions].some((name) => symbols.has(name))) throw new Error("pyodide-wasm.mjs left out no definition");
  const sized = defined.replace(
    `wasmTable=new WebAssembly.Table({initial:${tableStart},`,
    `wasmTable=new WebAssembly.Table({initial:${tableSize},`,
  );
  return { bytes: changed, glue: sized, tableSize, symbols };
}

/**
 * The symbols the module no longer exports, by name: `get(name)` is
 * `{ slot }` or `{ address }`, or undefined. Nearly 10,000 of them, held
 * in one string and a few typed arrays rather than a Map of strings and
 * objects: a shared child keeps the table for its life and V8 marks every
 * object the child keeps in each of its collections, one per job.
 */
class SymbolTable {
  #names;
  #starts;
  #values;
  #isSlot;
  #buckets;

  /** From `entries`, a Map of name to `{ slot }` or `{ address }`. */
  constructor(entries) {
    const names = [...entries.keys()];
    this.#names = names.join("");
    this.#starts = new Uint32Array(names.length + 1);
    this.#values = new Uint32Array(names.length);
    this.#isSlot = new Uint8Array(names.length);
    // Open addressing, at most half full; a bucket holds an entry's index + 1.
    this.#buckets = new Uint32Array(2 ** Math.ceil(Math.log2(names.length * 2 + 2)));
    let at = 0;
    names.forEach((name, i) => {
      const { slot, address } = entries.get(name);
      this.#starts[i] = at;
      at += name.length;
      this.#isSlot[i] = slot === undefined ? 0 : 1;
      this.#values[i] = slot ?? address;
      this.#buckets[this.#free(name)] = i + 1;
    });
    this.#starts[names.length] = at;
  }

  get(name) {
    const i = this.#buckets[this.#bucket(name)] - 1;
    if (i < 0) return undefined;
    return this.#isSlot[i] ? { slot: this.#values[i] } : { address: this.#values[i] };
  }

  has(name) {
    return this.#buckets[this.#bucket(name)] !== 0;
  }

  /** The bucket holding `name`, or the empty one where it would go. */
  #bucket(name) {
    const mask = this.#buckets.length - 1;
    for (let b = hash(name) & mask; ; b = (b + 1) & mask) {
      const entry = this.#buckets[b];
      if (entry === 0) return b;
      const start = this.#starts[entry - 1];
      if (this.#starts[entry] - start === name.length && this.#names.startsWith(name, start)) return b;
    }
  }

  #free(name) {
    const b = this.#bucket(name);
    if (this.#buckets[b] !== 0) throw new Error(`symbol ${name} twice`);
    return b;
  }
}

/** FNV-1a over `text`'s UTF-16 code units. */
function hash(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The table size the glue makes its table with, before any link grows it. */
function initialTableSize(glue) {
  const found = glue.match(/wasmTable=new WebAssembly\.Table\(\{initial:(\d+),element:"anyfunc"\}\)/g) ?? [];
  if (found.length !== 1) throw new Error("pyodide.asm.js no longer makes its table as pyodide-wasm.mjs reads it");
  return Number(found[0].match(/initial:(\d+)/)[1]);
}

/** The value the glue gives immutable global `name` (`___table_base`, say). */
function globalValue(glue, name) {
  const found = glue.match(new RegExp(`${name}=new WebAssembly\\.Global\\(\\{value:"i32",mutable:false\\},(\\d+)\\)`));
  if (!found) throw new Error(`pyodide.asm.js no longer makes ${name} as pyodide-wasm.mjs reads it`);
  return Number(found[1]);
}

/** The symbols Emscripten's updateGOT leaves out, read from the glue's isInternalSym. */
function internalSymbols(glue) {
  const found = glue.match(/var isInternalSym=symName=>\[([^\]]*)\]\.includes\(symName\)\|\|symName\.startsWith\("(\w+)"\)/);
  if (!found) throw new Error("pyodide.asm.js no longer has isInternalSym as pyodide-wasm.mjs reads it");
  return { names: JSON.parse(`[${found[1]}]`), prefix: found[2] };
}

function isInternal(internal, name) {
  return internal.names.includes(name) || name.startsWith(internal.prefix);
}

/** The glue's definition of the variable and `Module` property for export `$1` (Emscripten's assignWasmExports). */
const DEFINITION = /var _([\w$]+)=Module\["_\1"\]=wasmExports\["\1"\];/g;

/**
 * What the glue reads of the exports: `named`, the exports its code reads
 * by name (`wasmExports["name"]`, `wasmExports.name`) or through the
 * variable of a definition (any `_name` identifier outside the
 * definitions, taken as a read); `definitions`, every export the glue
 * defines a variable for. It reads every other export only through the
 * loader's symbol lookup (`wasmImports`) or `Module`, which python-realm.js
 * serves from `symbols`.
 */
function readsOfGlue(glue) {
  const definitions = new Set(Array.from(glue.matchAll(DEFINITION), ([, name]) => name));
  if (definitions.size < 1000) throw new Error("pyodide.asm.js no longer defines its exports as pyodide-wasm.mjs expects");
  const rest = glue.replace(DEFINITION, "");
  const named = new Set();
  for (const [, name] of rest.matchAll(/wasmExports\["([^"]+)"\]/g)) named.add(name);
  for (const [, name] of rest.matchAll(/wasmExports\.([A-Za-z_$][\w$]*)/g)) named.add(name);
  for (const [, name] of rest.matchAll(/(?<![\w$.])_([\w$]+)/g)) if (definitions.has(name)) named.add(name);
  return { named, definitions };
}

/**
 * The function indices that Emscripten's updateGOT gives a table slot
 * when it links the module, in slot order: each function export, in
 * export order, that the element segments do not already put in the
 * table (`inTable`), once per function, less the internal symbols. A
 * wrong list fails every Python job at its first indirect call; this one
 * was checked against the table a full link builds for Pyodide 0.29.4
 * (the same 5,468 slots).
 */
function tableLayout(module, internal, inTable) {
  const layout = [];
  const placed = new Set();
  for (const { name, kind, index } of module.exports) {
    if (kind !== KIND.function || isInternal(internal, name) || inTable.has(index) || placed.has(index)) continue;
    placed.add(index);
    layout.push(index);
  }
  return layout;
}

/** A reader of the binary `bytes` from offset `at`. */
function reader(bytes, at = 0) {
  const r = {
    at,
    byte: () => bytes[r.at++],
    u32: () => r.leb(false) >>> 0,
    s32: () => r.leb(true),
    /** A LEB128 number of at most 32 bits, `signed` or not. */
    leb(signed) {
      let result = 0;
      let shift = 0;
      let byte;
      do {
        byte = bytes[r.at++];
        result |= (byte & 0x7f) << shift;
        shift += 7;
      } while (byte & 0x80);
      return signed && shift < 32 && byte & 0x40 ? result | (-1 << shift) : result;
    },
    name() {
      const length = r.u32();
      r.at += length;
      return decoder.decode(bytes.subarray(r.at - length, r.at));
    },
    /** A constant expression: `{const}` for `i32.const N`, `{global}` for `global.get G`, else `{}`. */
    expression() {
      let value = {};
      let ops = 0;
      for (let op = r.byte(); op !== 0x0b; op = r.byte(), ops++) {
        if (op === 0x41) value = { const: r.s32() };
        else if (op === 0x23) value = { global: r.u32() };
        else if (op === 0xd2) r.u32();
        else throw new Error(`unexpected opcode ${op} in a constant expression`);
      }
      return ops === 1 ? value : {};
    },
  };
  return r;
}

/**
 * The parts of the module this file reads: where each section is, how
 * many functions it imports, the names of its imported globals by index,
 * its defined globals' constant values (for the immutable i32 ones) and
 * their bytes, its exports, and its element segments (each active, on
 * table 0, as a list of function indices).
 */
function readModule(bytes) {
  const r = reader(bytes, 8);
  const sections = new Map();
  const importedGlobals = [];
  let importedFunctions = 0;
  const globals = [];
  const exports = [];
  const elements = [];
  let elementBytes = null;
  let globalBytes = null;
  while (r.at < bytes.length) {
    const header = r.at;
    const id = r.byte();
    const size = r.u32();
    const start = r.at;
    sections.set(id, { header, end: start + size });
    if (id === SECTION.import) {
      for (let n = r.u32(); n > 0; n--) {
        r.name();
        const field = r.name();
        const kind = r.byte();
        if (kind === KIND.function) {
          r.u32();
          importedFunctions++;
        } else if (kind === KIND.table) {
          r.byte();
          limits(r);
        } else if (kind === KIND.memory) limits(r);
        else if (kind === KIND.global) {
          r.byte();
          r.byte();
          importedGlobals.push(field);
        } else if (kind === KIND.tag) {
          r.byte();
          r.u32();
        } else throw new Error(`import kind ${kind}: update pyodide-wasm.mjs`);
      }
    } else if (id === SECTION.global) {
      const count = r.u32();
      globalBytes = bytes.subarray(r.at, start + size);
      for (let n = count; n > 0; n--) {
        const type = r.byte();
        const mutable = r.byte();
        const value = r.expression();
        globals.push(type === 0x7f && mutable === 0 && value.const !== undefined ? { constant: value.const } : {});
      }
    } else if (id === SECTION.export) {
      for (let n = r.u32(); n > 0; n--) exports.push({ name: r.name(), kind: r.byte(), index: r.u32() });
    } else if (id === SECTION.element) {
      const count = r.u32();
      const segmentsStart = r.at;
      for (let n = count; n > 0; n--) {
        const flags = r.u32();
        if (flags !== 0) throw new Error(`element segment kind ${flags}: update pyodide-wasm.mjs`);
        const offset = r.expression();
        const functions = [];
        for (let k = r.u32(); k > 0; k--) functions.push(r.u32());
        elements.push({ offset, functions });
      }
      elementBytes = bytes.subarray(segmentsStart, start + size);
    }
    r.at = start + size;
  }
  if (exports.length === 0 || elements.length === 0) throw new Error("pyodide.asm.wasm has no exports or no element segments");
  // Global indices count the imported ones first.
  return {
    sections,
    importedFunctions,
    importedGlobals,
    globals: [...importedGlobals.map(() => ({})), ...globals],
    exports,
    elements,
    elementBytes,
    globalBytes,
  };
}

function limits(r) {
  const flags = r.byte();
  r.u32();
  if (flags & 1) r.u32();
}

function leb(n) {
  const out = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n) byte |= 0x80;
    out.push(byte);
  } while (n);
  return out;
}

function sleb(n) {
  const out = [];
  for (;;) {
    const byte = n & 0x7f;
    n >>= 7;
    if ((n === 0 && !(byte & 0x40)) || (n === -1 && byte & 0x40)) return [...out, byte];
    out.push(byte | 0x80);
  }
}

const encoder = new TextEncoder();

/** A wasm module's first bytes: its magic number and version 1. */
const HEADER = [0x00, 0x61, 0x73, 0x6d, 1, 0, 0, 0];

/** `text` as a wasm name: its UTF-8 length, then its bytes. */
function nameBytes(text) {
  const bytes = encoder.encode(text);
  return [...leb(bytes.length), ...bytes];
}

function exportSection(entries) {
  const parts = [leb(entries.length)];
  for (const { name, kind, index } of entries) parts.push(nameBytes(name), [kind], leb(index));
  return concat(parts);
}

/** An element segment that puts functions `indices` in table 0 from slot `start` on. */
function functionSegment(indices, start) {
  // Flags 0: active, on table 0, of functions; offset `i32.const start`.
  return [0, 0x41, ...sleb(start), 0x0b, ...leb(indices.length), ...indices.flatMap((index) => leb(index))];
}

/** The module's element segments, and one more: functions `indices` from slot `start` on. */
function elementSection(module, indices, start) {
  return concat([leb(module.elements.length + 1), module.elementBytes, functionSegment(indices, start)]);
}

/** `bytes` with the bodies of the sections in `bodies` (by id) replaced. */
function replaceSections(bytes, sections, bodies) {
  const parts = [];
  let at = 0;
  const ids = Object.keys(bodies)
    .map(Number)
    .sort((a, b) => sections.get(a).header - sections.get(b).header);
  for (const id of ids) {
    const { header, end } = sections.get(id);
    parts.push(bytes.subarray(at, header), [id], leb(bodies[id].length), bodies[id]);
    at = end;
  }
  parts.push(bytes.subarray(at));
  return concat(parts);
}

function concat(parts) {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/**
 * A wasm module with nothing but `module`'s dylink.0 section: the loader
 * reads its memory and table layout from the module it is handed, which
 * must be of the job's realm (the shared module is of this one, and its
 * constructor would lead here).
 */
export function dylinkStub(module) {
  const section = new Uint8Array(WebAssembly.Module.customSections(module, "dylink.0")[0]);
  const body = concat([nameBytes("dylink.0"), section]);
  return concat([HEADER, [0], leb(body.length), body]);
}

/** Emscripten's signature letters as wasm value types (as its generateFuncType has them). */
const VALUE_TYPE = { i: 0x7f, p: 0x7f, j: 0x7e, f: 0x7d, d: 0x7c, e: 0x6f };

/**
 * A module that puts JS functions of `signatures` (Emscripten's, such as
 * "vii") in a table from slot `start` on, when instantiated with the table
 * (`t.table`) and the functions (`f.0`, `f.1`, …): one element segment.
 * Emscripten's loader does this one function at a time, compiling and
 * instantiating a module of one function for each and growing the table
 * by one; the harness compiles this once per child and every realm
 * instantiates it.
 */
export function jsSlotsModule(signatures, start) {
  const types = [...new Set(signatures)];
  const typeBodies = types.map((signature) => {
    if (!/^[vipjfde][ipjfde]*$/.test(signature)) throw new Error(`not an Emscripten signature: ${signature}`);
    const [result, ...params] = signature;
    const results = result === "v" ? [0] : [1, VALUE_TYPE[result]];
    return [0x60, ...leb(params.length), ...params.map((param) => VALUE_TYPE[param]), ...results];
  });
  const imports = [
    // A table of funcref, at least as long as the slots it fills.
    [...nameBytes("t"), ...nameBytes("table"), KIND.table, 0x70, 0, ...leb(start + signatures.length)],
    ...signatures.map((signature, i) => [
      ...nameBytes("f"),
      ...nameBytes(String(i)),
      KIND.function,
      ...leb(types.indexOf(signature)),
    ]),
  ];
  // The imported functions are the module's functions 0 to n - 1.
  const element = [1, ...functionSegment(signatures.map((_, i) => i), start)];
  const section = (id, body) => [id, ...leb(body.length), ...body];
  return new Uint8Array([
    ...HEADER,
    ...section(1, [...leb(types.length), ...typeBodies.flat()]),
    ...section(SECTION.import, [...leb(imports.length), ...imports.flat()]),
    ...section(SECTION.element, element),
  ]);
}

/**
 * The export a realm turns the inlined small-object allocator on with: a
 * mutable i32 global, 0 (off) until the realm's allocator is installed,
 * then the table slot of its `alloc` (its `free` is 3 slots on; see
 * `installSmallObjects` in python-realm.js).
 */
const SMALL_OBJECTS = "runbox_small_objects";

/** The switch's definition: a mutable i32, initially 0. */
const SWITCH_GLOBAL = [0x7f, 0x01, 0x41, 0x00, 0x0b];

/**
 * The functions whose allocator call is inlined: CPython's object domain
 * and its memory domain (both set to the harness's small-object
 * allocator, small-objects.wat), each as `alloc` or `free`.
 */
const ALLOCATOR_CALLS = [
  { name: "PyObject_Malloc", kind: "alloc" },
  { name: "PyObject_Free", kind: "free" },
  { name: "PyMem_Malloc", kind: "alloc" },
  { name: "PyMem_Free", kind: "free" },
];

/**
 * The code section with the small-object allocator's fast path inlined
 * where CPython calls it, the globals' switch at `switchIndex`.
 *
 * Each of the functions in ALLOCATOR_CALLS reads its domain's allocator
 * (a PyMemAllocatorEx: ctx, malloc, calloc, realloc, free) and makes an
 * indirect call, to another instance's function: for a CPU-bound program,
 * which makes and drops an int object for every number above 256, a
 * fifth of its time went to those calls and the allocator's functions.
 * Each now first checks that the domain's function is the realm's
 * allocator's (the switch says which slot that is), and then does what the
 * allocator would for the common case: `alloc` takes a block of 1 to 512
 * bytes off its class's free list, `free` puts a block of one of its pools
 * on its class's list. Anything else (no block on the list, a block of
 * dlmalloc's, another allocator installed, as tracemalloc does) goes on to
 * the function's own code, unchanged. The layout of `ctx` is
 * small-objects.wat's.
 */
function inlineSmallObjects(bytes, module, switchIndex) {
  const { header, end } = module.sections.get(SECTION.code);
  const r = reader(bytes, header + 1);
  r.u32();
  const count = r.u32();
  const wanted = new Map();
  for (const { name, kind } of ALLOCATOR_CALLS) {
    const entry = module.exports.find((e) => e.name === name && e.kind === KIND.function);
    if (!entry) throw new Error(`pyodide.asm.wasm no longer exports ${name}`);
    wanted.set(entry.index - module.importedFunctions, { name, kind });
  }
  const parts = [leb(count)];
  let copied = r.at;
  let found = 0;
  for (let i = 0; i < count; i++) {
    const at = r.at;
    const size = r.u32();
    const body = bytes.subarray(r.at, r.at + size);
    r.at += size;
    const call = wanted.get(i);
    if (!call) continue;
    const changed = withFastPath(body, call, switchIndex);
    parts.push(bytes.subarray(copied, at), leb(changed.length), changed);
    copied = r.at;
    found++;
  }
  if (r.at !== end || found !== wanted.size) throw new Error("pyodide.asm.wasm's code section is not as pyodide-wasm.mjs reads it");
  parts.push(bytes.subarray(copied, end));
  return concat(parts);
}

/**
 * small-objects.wat's layout, as the fast path reads it: `ctx` holds a
 * free list's head, 4 bytes, per class of 16 bytes (class c at c * 4) up to
 * 512 bytes, and from `ctx + MAP` a byte per 16 KiB of memory, the class of
 * the pool there or 0. The realm puts the allocator's functions in four
 * table slots in a row (python-realm.js): alloc, calloc, realloc, free.
 */
const SMALL = { classBits: 4, largest: 512, map: 1024, poolBits: 14, freeSlot: 3 };

// The few instructions the fast path is made of.
const op = {
  block: [0x02, 0x40],
  end: [0x0b],
  brIf: [0x0d, 0x00],
  ret: [0x0f],
  get: (local) => [0x20, ...leb(local)],
  tee: (local) => [0x22, ...leb(local)],
  global: (index) => [0x23, ...leb(index)],
  load: (offset = 0) => [0x28, 0x02, ...leb(offset)],
  loadByte: (offset) => [0x2d, 0x00, ...leb(offset)],
  store: [0x36, 0x02, 0x00],
  i32: (n) => [0x41, ...sleb(n)],
  eqz: [0x45],
  ne: [0x47],
  gtU: [0x4b],
  add: [0x6a],
  sub: [0x6b],
  shl: [0x74],
  shrU: [0x76],
};

/**
 * `body`, one of CPython's functions that call their domain's allocator,
 * with the fast path of `call.kind` before its own code, which is kept as
 * it is. Its one local (1) keeps its index; the fast path's are 2, 3, 4.
 * Local 0 is the function's argument: the size, or the block.
 */
function withFastPath(body, call, switchIndex) {
  const r = reader(body);
  if (r.u32() !== 1 || r.u32() !== 1 || r.byte() !== 0x7f) {
    throw new Error(`${call.name} no longer has the locals pyodide-wasm.mjs expects`);
  }
  const code = body.subarray(r.at);
  const { global, context, function: slot } = allocatorCall(code, call);
  // Leave the block (and run the function's own code) unless the switch is
  // on and the domain's function is the realm's allocator's; local 2 is the
  // domain's allocator (a PyMemAllocatorEx) from here on.
  const guard = [
    ...op.global(switchIndex), ...op.eqz, ...op.brIf,
    ...op.global(global), ...op.tee(2), ...op.load(slot),
    ...op.global(switchIndex), ...(call.kind === "free" ? [...op.i32(SMALL.freeSlot), ...op.add] : []),
    ...op.ne, ...op.brIf,
  ];
  const fast =
    call.kind === "alloc"
      ? [
          // 1 to 512 bytes only: size - 1 > 511 (unsigned) leaves.
          ...op.get(0), ...op.i32(1), ...op.sub, ...op.i32(SMALL.largest - 1), ...op.gtU, ...op.brIf,
          // head (3) = ctx + ((size + 15) >> 4) * 4; block (4) = *head; none: leave.
          ...op.get(2), ...op.load(context),
          ...op.get(0), ...op.i32((1 << SMALL.classBits) - 1), ...op.add, ...op.i32(SMALL.classBits), ...op.shrU,
          ...op.i32(2), ...op.shl, ...op.add,
          ...op.tee(3), ...op.load(), ...op.tee(4), ...op.eqz, ...op.brIf,
          // *head = *block; return block.
          ...op.get(3), ...op.get(4), ...op.load(), ...op.store, ...op.get(4), ...op.ret,
        ]
      : [
          // A null block leaves.
          ...op.get(0), ...op.eqz, ...op.brIf,
          // ctx (2, in place of the allocator); class (3) = the map's byte
          // for the block's 16 KiB; 0 (not a pool's) leaves.
          ...op.get(2), ...op.load(context), ...op.tee(2),
          ...op.get(0), ...op.i32(SMALL.poolBits), ...op.shrU, ...op.add, ...op.loadByte(SMALL.map),
          ...op.tee(3), ...op.eqz, ...op.brIf,
          // head (4) = ctx + class * 4; *block = *head; *head = block; return.
          ...op.get(0), ...op.get(2), ...op.get(3), ...op.i32(2), ...op.shl, ...op.add, ...op.tee(4), ...op.load(), ...op.store,
          ...op.get(4), ...op.get(0), ...op.store, ...op.ret,
        ];
  // Locals: the function's own i32, then the fast path's three.
  return concat([[0x02, 0x01, 0x7f, 0x03, 0x7f], op.block, guard, fast, op.end, code]);
}

/**
 * Where `code`, the whole of a function of `call.kind`, reads its domain's
 * allocator: the global holding the runtime state's address, and the
 * offsets of the allocator's ctx and of the function it calls. The code
 * must be exactly what CPython 3.13's PyObject_Malloc (a size check, then
 * the call) or PyObject_Free (the call) compiles to, so that the fast path
 * skips nothing else the function does.
 */
function allocatorCall(code, call) {
  const r = reader(code);
  const expect = (...bytes) => bytes.every((byte) => r.byte() === byte);
  let found = null;
  // alloc: local.get 0; i32.const 0; i32.ge_s; if (result i32)
  if (call.kind === "free" || expect(0x20, 0x00, 0x41, 0x00, 0x4e, 0x04, 0x7f)) {
    // global.get G; local.tee 1; i32.load CTX; local.get 0; local.get 1;
    // i32.load FN; call_indirect (type T, table 0)
    const global = r.byte() === 0x23 ? r.u32() : -1;
    const context = expect(0x22, 0x01, 0x28, 0x02) ? r.u32() : -1;
    const slot = expect(0x20, 0x00, 0x20, 0x01, 0x28, 0x02) ? r.u32() : -1;
    if (global >= 0 && context >= 0 && slot >= 0 && r.byte() === 0x11) {
      r.u32();
      if (r.byte() === 0x00) found = { global, context, function: slot };
    }
  }
  // alloc: else local.get 1 (NULL) end; then the function's end.
  const rest = call.kind === "alloc" ? [0x05, 0x20, 0x01, 0x0b, 0x0b] : [0x0b];
  if (!found || !expect(...rest) || r.at !== code.length) {
    throw new Error(`${call.name} no longer calls its allocator as pyodide-wasm.mjs reads it`);
  }
  return found;
}
