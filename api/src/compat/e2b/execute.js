// The helper of the E2B-compatible API in a JavaScript context, run once
// as the first exec of the context's runbox session (see interpreter.rs).
// Each `run_code` is then an exec that calls it with the code as a string:
//
//   __runbox_e2b(source, cell, marker)
//
// The source runs as the session runs an exec (`vm.runInThisContext`), so
// its top-level declarations last into the next call; its completion value
// is shown, after a promise settles, and an exception is caught and
// described. What is shown is printed after the code's own output as one
// line: the marker, then JSON, which the api cuts from the stream. Code
// that replaces the helper or forges a marker changes only its own answers.
const { runInThisContext } = await import("node:vm");
const encode = TextEncoder.prototype.encode.bind(new TextEncoder());
const write = Deno.stdout.writeSync.bind(Deno.stdout);
const inspect = Deno.inspect;

globalThis.__runbox_e2b = (source, cell, marker) => {
  const report = (shown) => write(encode(`\n${marker}${JSON.stringify(shown)}\n`));
  const failed = (error) =>
    report({
      text: null,
      error: {
        name: String(error?.name ?? "Error"),
        value: String(error?.message ?? error),
        traceback: String(error?.stack ?? error),
      },
    });
  // As E2B shows a value: a string as it is, anything else inspected.
  const shown = (value) => report({ text: value === undefined ? null : typeof value === "string" ? value : inspect(value), error: null });
  let value;
  try {
    value = runInThisContext(source, { filename: `<cell-${cell}>` });
  } catch (error) {
    if (!(error instanceof SyntaxError) || !/\bawait\b/.test(source)) return failed(error);
    // Top-level await: the code runs as an async function, whose
    // declarations are its own and whose last value is not shown.
    try {
      value = runInThisContext(`(async () => {\n${source}\n})()`, { filename: `<cell-${cell}>` }).then(() => undefined);
    } catch (error) {
      return failed(error);
    }
  }
  if (value !== null && typeof value?.then === "function") return value.then(shown, failed);
  shown(value);
};
