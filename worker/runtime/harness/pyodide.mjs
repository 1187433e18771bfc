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
function require(name) {
  const module = BUILTINS[String(name).replace(/^node:/, "")];
  if (!module) throw new Error(`Cannot find module '${name}'`);
  return module;
}

/** Loads Pyodide from `dir` (an absolute path) with extra `options`. */
export async function loadPyodideFrom(dir, options = {}) {
  globalThis.require = require;
  // Read while the script loads, then removed: they name a host path.
  const shims = { __dirname: dir, __filename: `${dir}/pyodide.asm.js` };
  Object.assign(globalThis, shims);
  try {
    const { loadPyodide } = await import(`file://${dir}/pyodide.mjs`);
    return await loadPyodide({ indexURL: `${dir}/`, ...options });
  } finally {
    for (const name of Object.keys(shims)) delete globalThis[name];
  }
}
