// Builds the Pyodide memory snapshot at setup time: boots Pyodide once from
// scratch and writes its memory image, which python.mjs restores in ~1/5 of
// the time. The image is tied to the exact Pyodide build that made it.
//
// Usage: snapshot.mjs <pyodide-dir> <output-file>
import { loadPyodideFrom } from "./pyodide.mjs";

const [pyodideDir, output] = Deno.args;
const pyodide = await loadPyodideFrom(pyodideDir, { _makeSnapshot: true });
Deno.writeFileSync(output, pyodide.makeMemorySnapshot());
