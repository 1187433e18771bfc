// Loads Pyodide from the runtime's pyodide/ directory, a copy that
// `runtime/prepare` makes outside node_modules: the Python child runs with
// npm resolution off, since Deno skips its read check for paths with a
// node_modules segment when it is on.
//
// Two ways in:
//
// - `loadPyodideFrom`, for setup-time tools (snapshot.mjs, packages.mjs),
//   which may read the directory.
// - `readAssets` in the harness's realm, while it may still read, then
//   `instanceBuilder` inside a session's Worker (python-job.mjs), which reads
//   nothing: the files come from memory, and the wasm module compiled once
//   in the harness is shared by every Worker (posting a compiled module to
//   a Worker does not compile it again).

// pyodide.asm.js is an Emscripten script written for CommonJS: it calls
// `require` for these Node built-ins, some of them lazily (random numbers,
// os.system), so this `require` stays. It serves nothing else: no file,
// no package, so it opens no way around the read check. Each is loaded
// when first asked for, not imported: a shared child's harness imports
// this file but runs Pyodide's loader only inside its realms, where there
// is no `require`, and V8 marks every object a child keeps in each of its
// collections, one per job (these five held 1.5 MB).
const BUILTINS = new Set(["child_process", "crypto", "fs", "path", "tty"]);

function require(name) {
  const builtin = String(name).replace(/^node:/, "");
  if (!BUILTINS.has(builtin)) throw new Error(`Cannot find module '${name}'`);
  return process.getBuiltinModule(`node:${builtin}`);
}

/** The runtime's pinned packages: the file in the Pyodide directory
 * (`runtime/prepare` builds it) and where jobs find it, on sys.path. */
export const PACKAGES_FILE = "packages.zip";
export const PACKAGES_ZIP = "/lib/packages.zip";

/** The packages zip in Pyodide directory `dir`, or null if it has none. */
export function readPackages(dir) {
  try {
    return Deno.readFileSync(`${dir}/${PACKAGES_FILE}`);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
    throw e;
  }
}

/**
 * Puts the packages zip where the snapshot's sys.path expects it. Call
 * before any Python runs: the snapshot holds its directory, not its bytes.
 */
export function installPackages(pyodide, packages) {
  if (packages) pyodide.FS.writeFile(PACKAGES_ZIP, packages);
  return pyodide;
}

/** Loads Pyodide from `dir` (an absolute path) with extra `options`. */
export async function loadPyodideFrom(dir, options = {}) {
  return await withShims(dir, async () => {
    const { loadPyodide } = await import(`file://${dir}/pyodide.mjs`);
    return await loadPyodide({ indexURL: `${dir}/`, ...options });
  });
}

/** Where Pyodide's loader imports `node:fs/promises`, which a Worker's copy serves from memory. */
const PATCH_POINT = 'import("node:fs/promises")';

/**
 * Reads what a Worker needs to build Pyodide instances (in the harness's
 * realm, while it may read) and compiles the wasm module. Everything in it
 * can be posted to a Worker; the snapshot is copied for each one.
 */
export async function readAssets(dir, snapshotPath) {
  const read = (name) => Deno.readFileSync(`${dir}/${name}`);
  const loader = new TextDecoder().decode(read("pyodide.mjs"));
  if (loader.split(PATCH_POINT).length !== 2) {
    throw new Error(`pyodide.mjs no longer has exactly one ${PATCH_POINT}: update pyodide.mjs for this Pyodide`);
  }
  return {
    dir,
    module: await WebAssembly.compile(read("pyodide.asm.wasm")),
    script: new TextDecoder().decode(read("pyodide.asm.js")),
    loader,
    stdlib: read("python_stdlib.zip"),
    lock: new TextDecoder().decode(read("pyodide-lock.json")),
    packages: readPackages(dir),
    snapshot: snapshotPath ? Deno.readFileSync(snapshotPath) : null,
  };
}

/**
 * In a session's Worker: returns a function that builds a Pyodide instance from
 * `assets` (see `readAssets`), restored from the snapshot (or from
 * `options._loadSnapshot`). `scriptUrl` is where Pyodide's Emscripten
 * script is imported from: its file while the child may still read (Deno
 * then uses its code cache), else a `blob:` URL of `assets.script`.
 */
export async function instanceBuilder(assets, scriptUrl) {
  const { dir } = assets;
  const files = blobModule(`
    export const files = new Map();
    export async function readFile(path, options) {
      const bytes = files.get(String(path));
      if (!bytes) throw new Error("runbox: Pyodide asked for a file it was not given: " + path);
      return options ? new TextDecoder().decode(bytes) : bytes;
    }`);
  const served = await import(files);
  URL.revokeObjectURL(files);
  // Pyodide reads the wasm file and instantiates what it read: it gets a
  // placeholder, which the wrapper below swaps for the compiled module.
  const placeholder = new Uint8Array(1);
  served.files.set(`${dir}/pyodide.asm.wasm`, placeholder);
  served.files.set(`${dir}/python_stdlib.zip`, assets.stdlib);
  const patched = blobModule(assets.loader.replace(PATCH_POINT, `import(${JSON.stringify(files)})`));
  const { loadPyodide } = await import(patched);
  URL.revokeObjectURL(patched);
  await withShims(dir, () => import(scriptUrl));

  const instantiate = WebAssembly.instantiate;
  return async (options = {}) => {
    WebAssembly.instantiate = function (source, imports) {
      if (source === placeholder || source?.buffer === placeholder.buffer) {
        return instantiate(assets.module, imports).then((instance) => ({ instance, module: assets.module }));
      }
      return Reflect.apply(instantiate, WebAssembly, arguments);
    };
    try {
      const pyodide = await withShims(dir, () =>
        loadPyodide({
          indexURL: `${dir}/`,
          lockFileContents: assets.lock,
          ...(assets.snapshot ? { _loadSnapshot: assets.snapshot } : {}),
          ...options,
        }));
      pyodide._api.config._loadSnapshot = undefined;
      return installPackages(pyodide, assets.packages);
    } finally {
      WebAssembly.instantiate = instantiate;
    }
  };
}

/** Runs `load` with the globals Pyodide's Emscripten script expects in Node. */
async function withShims(dir, load) {
  globalThis.require = require;
  // Read while the script loads, then removed: they name a host path.
  const shims = { __dirname: dir, __filename: `${dir}/pyodide.asm.js` };
  Object.assign(globalThis, shims);
  try {
    return await load();
  } finally {
    for (const name of Object.keys(shims)) delete globalThis[name];
  }
}

/** A `blob:` URL for module `source`. */
function blobModule(source) {
  return URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
}
