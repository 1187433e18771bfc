//! What a job can put on the worker's disk is bounded. `--deny-write`
//! does not cover Deno's own storage: web storage from a Worker, and the
//! caches Deno keeps of every module a program imports (`data:` and
//! `blob:` URLs). These probes flood each while a sampler measures the
//! bytes really on disk under the job directories.

use runbox_common::Status;

use crate::util::*;

/// A Worker that stores 200 KB entries in CacheStorage for about 3 s, then
/// imports `data:` and `blob:` modules of MODULE_BYTES each (100 of each
/// at most) for 3 s, and says how far it got.
const FLOOD: &str = r#"
const src = `
const big = "y".repeat(200000);
const source = "z".repeat(MODULE_BYTES);
const started = Date.now();
let stored = 0, storeError = "none";
try {
  const cache = await caches.open("flood");
  while (Date.now() - started < 3000) { await cache.put("https://x.test/" + stored, new Response(big)); stored++; }
} catch (e) { storeError = String(e).slice(0, 60); }
let imported = 0;
// A bounded count, not only a time: an unbounded flood on a fast machine
// reaches the memory cap, which is not what this probe is about.
while (imported < 100 && Date.now() - started < 6000) {
  await import("data:text/javascript," + encodeURIComponent("export const v" + imported + " = '" + source + "';"));
  await import(URL.createObjectURL(new Blob(["export const w" + imported + " = '" + source + "';"], { type: "text/javascript" })));
  imported++;
}
postMessage({ stored, storeError, imported });`;
const w = new Worker(URL.createObjectURL(new Blob([src], { type: "text/javascript" })), { type: "module" });
const result = await new Promise((resolve) => (w.onmessage = (e) => resolve(e.data)));
w.terminate();
console.log(JSON.stringify(result));
"#;

#[tokio::test]
async fn js_storage_and_module_caches_stay_off_disk() {
    let (outcome, DiskUse { peak, .. }) = peak_disk_use(Js, &FLOOD.replace("MODULE_BYTES", "200000")).await;
    assert_status(&outcome, Status::Completed);
    assert!(outcome.stdout.contains("\"stored\":0"), "{outcome:#?}");
    assert!(outcome.stdout.contains("Failed to create cache storage"), "{outcome:#?}");
    // The flood imported modules for seconds; their caches stayed in memory.
    assert!(!outcome.stdout.contains("\"imported\":0"), "{outcome:#?}");
    assert!(peak < 1024 * 1024, "a JS job put {peak} bytes on disk: {outcome:#?}");
}

#[tokio::test]
async fn python_storage_and_module_caches_stay_bounded() {
    let code = format!(
        "from pyodide.code import run_js\nimport js\nprint(await run_js({:?}))",
        format!(
            "(async () => {{ {} }})()",
            FLOOD
                .replace("console.log(JSON.stringify(result));", "return JSON.stringify(result);")
                .replace("MODULE_BYTES", "20000")
        )
    );
    let (outcome, DiskUse { peak, .. }) = peak_disk_use(Py, &code).await;
    assert_status(&outcome, Status::Completed);
    // A job's bare realm has no Worker, cache storage or module loader to
    // flood with; a session's Worker has them, and they stay bounded.
    if outcome.exit_code == Some(0) {
        assert!(outcome.stdout.contains("\"stored\":0"), "{outcome:#?}");
        assert!(!outcome.stdout.contains("\"imported\":0"), "{outcome:#?}");
    } else {
        assert_fails_with_any(&outcome, &["Worker is not defined"]);
    }
    // Smaller modules than for JS: the Python child's own 225 MiB leave less
    // room under the memory cap for the caches Deno now keeps in memory.
    // The primed caches (about 4 MiB) are the one thing a Python child may
    // grow: two databases and their journals, each capped by RLIMIT_FSIZE.
    let bound = 4 * runbox_worker::sandbox::MAX_FILE_BYTES + 1024 * 1024;
    assert!(peak < bound, "a Python job put {peak} bytes on disk (bound {bound}): {outcome:#?}");
}
