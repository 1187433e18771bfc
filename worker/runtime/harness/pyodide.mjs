// Loads Pyodide from the runtime's pyodide/ directory, a copy that
// `runtime/prepare` makes outside node_modules: the Python child runs with
// npm resolution off, since Deno skips its read check for paths with a
// node_modules segment when it is on.
import * as childProcess from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as tty from "node:tty";

// pyodide.asm.js is an Emscripten script written for CommonJS: it calls
// `require` for these Node built-ins, some of them lazily (random numbers,
// os.system), so this `require` stays. It serves nothing else: no file,
// no package, so it opens no way around the read check.
const BUILTINS = { child_process: childProcess, crypto, fs, path, tty };

/** The runtime's pinned packages: the file in the Pyodide directory
 * (`runtime/prepare` builds it) and where jobs find it, on sys.path. */
export const PACKAGES_FILE = "packages.zip";
export const PACKAGES_ZIP = "/lib/packages.zip";
function require(name) {
  const module = BUILTINS[String(name).replace(/^node:/, "")];
  if (!module) throw new Error(`Cannot find module '${name}'`);
  return module;
}

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

/**
 * For the shared lane: reads Pyodide's files and the memory snapshot from
 * `dir` while the child still has read access, and returns a function that
 * builds a new, independent Pyodide instance, restored from its own copy of
 * the snapshot, with no file access at all. Each call costs about a third
 * of a fresh child's boot: the compiled wasm module is shared, and the
 * files come from memory.
 *
 * Pyodide reads its files through `node:fs/promises` and offers no hook for
 * that, so the instances come from a copy of `pyodide.mjs`, imported from a
 * `blob:` URL, whose one import of `node:fs/promises` is replaced by a
 * module that serves the files read here. Both blob URLs are revoked once
 * imported, so a job cannot import either module again.
 */
export async function pyodideFactory(dir, snapshotPath) {
  const read = (name) => Deno.readFileSync(`${dir}/${name}`);
  const wasm = read("pyodide.asm.wasm");
  const lock = new TextDecoder().decode(read("pyodide-lock.json"));
  const snapshot = snapshotPath ? Deno.readFileSync(snapshotPath) : null;
  const packages = readPackages(dir);

  const files = blobModule(`
    export const files = new Map();
    export async function readFile(path, options) {
      const bytes = files.get(String(path));
      if (!bytes) throw new Error("runbox: Pyodide asked for a file it was not given: " + path);
      return options ? new TextDecoder().decode(bytes) : bytes;
    }`);
  const served = await import(files.url);
  files.revoke();
  served.files.set(`${dir}/pyodide.asm.wasm`, wasm);
  served.files.set(`${dir}/python_stdlib.zip`, read("python_stdlib.zip"));

  const PATCH_POINT = 'import("node:fs/promises")';
  const source = new TextDecoder().decode(read("pyodide.mjs"));
  if (source.split(PATCH_POINT).length !== 2) {
    throw new Error(`pyodide.mjs no longer has exactly one ${PATCH_POINT}: update pyodideFactory for this Pyodide`);
  }
  const patched = blobModule(source.replace(PATCH_POINT, `import(${JSON.stringify(files.url)})`));
  const { loadPyodide } = await import(patched.url);
  patched.revoke();

  // Compiled once; Pyodide's instantiate call is redirected to it while an
  // instance is being built.
  const compiled = await WebAssembly.compile(wasm);
  const instantiate = WebAssembly.instantiate;
  return async (options = {}) => {
    WebAssembly.instantiate = function (source, imports) {
      if (source?.buffer === wasm.buffer) {
        return instantiate(compiled, imports).then((instance) => ({ instance, module: compiled }));
      }
      return Reflect.apply(instantiate, WebAssembly, arguments);
    };
    try {
      const pyodide = await withShims(dir, () =>
        loadPyodide({
          indexURL: `${dir}/`,
          lockFileContents: lock,
          ...(snapshot ? { _loadSnapshot: snapshot } : {}),
          ...options,
        }));
      // Restoring copied the snapshot into the instance's own memory. The
      // buffer itself is shared by every instance, so the reference Pyodide
      // keeps to it, which a job could reach and write through, is dropped.
      pyodide._api.config._loadSnapshot = undefined;
      return installPackages(pyodide, packages);
    } finally {
      WebAssembly.instantiate = instantiate;
    }
  };
}

/**
 * Loads Pyodide's Emscripten script now, while the child may still read
 * it: an instance built later, after read access is gone, finds it loaded.
 */
export async function preloadScript(dir) {
  await withShims(dir, () => import(`file://${dir}/pyodide.asm.js`));
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

function blobModule(source) {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  return { url, revoke: () => URL.revokeObjectURL(url) };
}
