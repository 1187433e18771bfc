// Compiles the runtime's packages for Pyodide's own Python at setup time.
//
// Usage: packages.mjs <pyodide-dir> <sources.zip> <output.zip>
//
// Reads the zip of wheel sources that `packages.py fetch` made and writes
// one with a .pyc beside every .py (zipimport's layout: it cannot use
// __pycache__ inside a zip, nor write bytecode there), compiled by the
// CPython that will run them. Without bytecode, `import pytest` compiles
// its sources in every job.
import { loadPyodideFrom } from "./pyodide.mjs";

const [pyodideDir, sources, output] = Deno.args;
const pyodide = await loadPyodideFrom(pyodideDir);
pyodide.FS.writeFile("/tmp/sources.zip", Deno.readFileSync(sources));
pyodide.runPython(`
import compileall, os, py_compile, zipfile
zipfile.ZipFile("/tmp/sources.zip").extractall("/tmp/tree")
ok = compileall.compile_dir("/tmp/tree", quiet=1, legacy=True,
    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
if not ok:
    raise SystemExit("some package sources did not compile")
with zipfile.ZipFile("/tmp/out.zip", "w", zipfile.ZIP_DEFLATED) as out:
    for root, dirs, files in os.walk("/tmp/tree"):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            out.write(path, os.path.relpath(path, "/tmp/tree"))
`);
Deno.writeFileSync(output, pyodide.FS.readFile("/tmp/out.zip"));
