// What one Python job costs a warm child's harness, measured inside one
// Deno process as a shared child spends it: build the job's realm (a
// Pyodide instance from the compiled module and the snapshot), run the
// program, retire the realm and collect it. Run by `scripts/bench
// --realm-only`, once for the harness in this tree and once for a
// baseline's, so the two are compared in the same run.
//
//   deno run -A --v8-flags=--max-old-space-size=N,--expose-gc,--no-concurrent-recompilation \
//     realm-cost.mjs HARNESS_DIR PYODIDE_DIR SNAPSHOT JOBS [CODE]
//
// (the V8 flags a shared Python child starts with: worker/src/sandbox/command.rs)
//
// Prints one JSON line: the median CPU (user + system, every thread) and
// wall time of a job's whole cycle, in ms, and how many realms V8 had not
// freed after two collections (`kept`: a shared child is replaced then).
import process from "node:process";

const [harness, pyodideDir, snapshot, jobs, code = "print(2 + 2)"] = Deno.args;
const { collectGarbage, prepareRealms, PythonRealm } = await import(`file://${harness}/python-realms.mjs`);
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
let kept = 0; const parts = [];
// Output goes to stderr's own sink: the programs' stdout is not measured.
for (let i = 0; i < Number(jobs); i++) {
  const cpuBefore = cpuMs();
  const wallBefore = performance.now();
  const c0 = cpuMs(); const realm = await PythonRealm.boot(assets, 512, runner); const c1 = cpuMs();
  const { status } = await realm.run(job);
  const c2 = cpuMs(); realm.retire();
  // As the harness does: a second, thorough collection before a realm counts as kept.
  let gone = false;
  for (let attempt = 0; attempt < 2 && !gone; attempt++) {
    // Read alive, a WeakRef's target stays alive to the end of the turn.
    if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 0));
    collectGarbage({ thorough: attempt > 0 });
    await new Promise((resolve) => setTimeout(resolve, 0));
    gone = realm.isGone();
  }
  if (status !== 0) throw new Error(`job ${i} ended with status ${status}`);
  // A shared child would be replaced here: counted, not measured.
  if (!gone) kept++;
  parts.push([c1-c0, c2-c1, cpuMs()-c2]); cpu.push(cpuMs() - cpuBefore);
  wall.push(performance.now() - wallBefore);
}
const median = (values) => values.toSorted((a, b) => a - b)[Math.floor(values.length / 2)];
console.error(JSON.stringify({ jobs: cpu.length, cpu_ms: +median(cpu).toFixed(1), wall_ms: +median(wall).toFixed(1), kept }));
const med = (k) => median(parts.slice(5).map((p) => p[k])).toFixed(1);
console.error(`boot ${med(0)} run ${med(1)} collect ${med(2)}`);
