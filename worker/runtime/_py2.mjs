import { loadPyodide } from "pyodide";
const snap = Deno.readFileSync("/tmp/exp/snap.bin");
const t0 = performance.now();
const py = await loadPyodide({ _loadSnapshot: snap });
console.error("boot ms", performance.now() - t0);
py.runPython("import sys; print(sys.version)");
