// Builds the Pyodide memory snapshot at setup time: boots Pyodide once from
// scratch and writes its memory image, which python.mjs restores in ~1/5 of
// the time. The image is tied to the exact Pyodide build that made it.
//
// With the runtime's packages (see packages.mjs), they are put on sys.path
// and the heavy ones imported first, so a job's `import pytest` finds them
// in memory. Their files live in Pyodide's in-memory file system, which a
// snapshot does not carry: python.mjs writes the same zip back to the same
// path before anything can read it.
//
// Usage: snapshot.mjs <pyodide-dir> <output-file>
import { installPackages, loadPyodideFrom, PACKAGES_ZIP, readPackages } from "./pyodide.mjs";

// Imported before the snapshot: the packages whose import takes seconds in
// a restored runtime (pytest about 1.5 s, hypothesis about 1 s, measured).
const PRELOADED = ["pytest", "hypothesis"];

const [pyodideDir, output] = Deno.args;
const pyodide = await loadPyodideFrom(pyodideDir, { _makeSnapshot: true });
const packages = readPackages(pyodideDir);
if (packages) {
  installPackages(pyodide, packages);
  pyodide.runPython(`
import gc, importlib, sys, zipfile
sys.path.insert(0, ${JSON.stringify(PACKAGES_ZIP)})
${PRELOADED.map((name) => `import ${name}`).join("\n")}
del ${PRELOADED.join(", ")}
# Open zip files would hold descriptors that do not survive a restore.
importlib.invalidate_caches()
gc.collect()
for leftover in gc.get_objects():
    if isinstance(leftover, zipfile.ZipFile):
        leftover.close()
del leftover
gc.collect()
`);
}
Deno.writeFileSync(output, pyodide.makeMemorySnapshot());
