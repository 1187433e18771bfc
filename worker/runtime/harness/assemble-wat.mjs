// Assembles a WebAssembly text file into a module, at setup time, with
// wabt from the runtime's node_modules (a dev dependency of the lockfile).
// The harness's one such file is small-objects.wat.
//
// Usage: assemble-wat.mjs <wabt-package-dir> <input.wat> <output.wasm>
import { createRequire } from "node:module";

const [wabtDir, input, output] = Deno.args;
const wabt = await createRequire(import.meta.url)(`${wabtDir}/index.js`)();
const module = wabt.parseWat(input, Deno.readTextFileSync(input), { bulk_memory: true });
try {
  module.validate();
  Deno.writeFileSync(output, module.toBinary({}).buffer);
} finally {
  module.destroy();
}
