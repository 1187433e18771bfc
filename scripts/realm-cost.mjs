// What one Python job costs a warm child's harness, measured inside one
// Deno process as a shared child spends it: build the job's realm (a
// Pyodide instance from the compiled module and the snapshot), run the
// program, retire the realm and collect it. Run by `scripts/bench
// --realm-only`, once for the harness in this tree and once for a
// baseline's, so the two are compared in the same run.
//
//   deno run -A --v8-flags=--max-old-space-size=N,FLAGS \
//     realm-cost.mjs HARNESS_DIR PYODIDE_DIR SNAPSHOT WARMUP JOBS [CODE]
//
// (FLAGS: those a shared Python child starts with, in
// worker/runtime/shared-python.v8-flags, comma-separated)
//
// Runs WARMUP jobs first, unmeasured: a new child's first jobs cost more
// while V8 compiles CPython's hot functions with TurboFan (about two and a
// half times as much over its first ten, half again over the next thirty;
// docs/performance.md), and a warm child is what this measures.
// Prints one JSON line: the median CPU (user + system, every thread) and
// wall time of the next JOBS jobs' whole cycle, in ms, and how many realms
// V8 had not freed after two collections (`kept`: a shared child is
// replaced then), over all of them.
import process from "node:process";

const [harness, pyodideDir, snapshot, warmup, jobs, code = "print(2 + 2)"] = Deno.args;
const realms = await import(`file://${harness}/python-realms.mjs`);
const { collectGarbage, prepareRealms, PythonRealm } = realms;
// As the harness waits for a turn; a baseline's from before `nextTurn`
// waited with a timer of 0 ms.
const nextTurn = realms.nextTurn ?? (() => new Promise((resolve) => setTimeout(resolve, 0)));
const read = (name) => Deno.readTextFileSync(`${harness}/${name}`);
const assets = await prepareRealms(pyodideDir, snapshot, read("python-realm.js"));
const runner = read("runner.py");
const job = { code, args: [], files: [], stdin: "", memory_mb: 512, return_files: null };

const cpuMs = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
};
const cpu = [];
const wall = [];
let kept = 0;
// As a shared child does: each realm gets the memory the previous one's job left.
let previous = null;
// Output goes to stderr's own sink: the programs' stdout is not measured.
for (let i = 0; i < Number(warmup) + Number(jobs); i++) {
  const cpuBefore = cpuMs();
  const wallBefore = performance.now();
  const realm = await PythonRealm.boot(assets, 512, runner, "", previous);
  const { status } = await realm.run(job);
  realm.retire();
  // As the harness does: a second, thorough collection before a realm counts as kept.
  let gone = false;
  for (let attempt = 0; attempt < 2 && !gone; attempt++) {
    // Read alive, a WeakRef's target stays alive to the end of the turn.
    if (attempt > 0) await nextTurn();
    collectGarbage({ thorough: attempt > 0 });
    await nextTurn();
    gone = realm.isGone();
  }
  if (status !== 0) throw new Error(`job ${i} ended with status ${status}`);
  // A shared child would be replaced here: counted, not measured.
  if (!gone) kept++;
  previous = realm;
  if (i < Number(warmup)) continue;
  cpu.push(cpuMs() - cpuBefore);
  wall.push(performance.now() - wallBefore);
}
const median = (values) => values.toSorted((a, b) => a - b)[Math.floor(values.length / 2)];
console.error(JSON.stringify({ jobs: cpu.length, cpu_ms: +median(cpu).toFixed(1), wall_ms: +median(wall).toFixed(1), kept }));
