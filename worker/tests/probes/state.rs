//! Nothing a run leaves behind is visible to the next run, and every job's
//! directory (its DENO_DIR included) is gone once it ends.

use runbox_common::{Language, Status};

use crate::util::*;

/// Runs `first` then `second` in a sandbox with its own work dir, and
/// checks that no job directory is left behind.
async fn two_runs(language: Language, first: &str, second: &str) -> (runbox_common::Outcome, runbox_common::Outcome) {
    let work = tempfile::tempdir().expect("work dir");
    let runner = runner_with(limits(), work.path()).await;
    let one = run_on(&runner, &spec(language, first)).await;
    let two = run_on(&runner, &spec(language, second)).await;
    drop(runner);
    let left: Vec<_> = std::fs::read_dir(work.path()).expect("read work dir").collect();
    assert!(left.is_empty(), "job directories left behind: {left:?}");
    (one, two)
}

#[tokio::test]
async fn js_globals() {
    let (one, two) =
        two_runs(Js, "globalThis.leak = 42; console.log(globalThis.leak)", "console.log(typeof globalThis.leak)").await;
    assert_eq!(one.stdout, "42\n");
    assert_eq!(two.stdout, "undefined\n");
}

#[tokio::test]
async fn python_globals_and_modules() {
    let (one, two) = two_runs(
        Py,
        "import builtins, sys\nbuiltins.leak = 42\nsys.modules['leaky'] = sys\nprint(builtins.leak)",
        "import builtins, sys\nprint(hasattr(builtins, 'leak'), 'leaky' in sys.modules)",
    )
    .await;
    assert_eq!(one.stdout, "42\n");
    assert_eq!(two.stdout, "False False\n", "{two:#?}");
}

#[tokio::test]
async fn python_in_memory_filesystem() {
    let (one, two) = two_runs(
        Py,
        "open('/tmp/leak.txt', 'w').write('x')\nopen('/home/pyodide/leak.txt', 'w').write('x')\nprint('written')",
        "import os\nprint(os.path.exists('/tmp/leak.txt'), os.path.exists('/home/pyodide/leak.txt'))",
    )
    .await;
    assert_eq!(one.stdout, "written\n", "{one:#?}");
    assert_eq!(two.stdout, "False False\n", "{two:#?}");
}

#[tokio::test]
async fn js_local_storage() {
    let (one, two) = two_runs(
        Js,
        "console.log(typeof localStorage); localStorage.setItem('leak', '1');",
        "console.log(typeof localStorage, globalThis.localStorage?.getItem('leak'));",
    )
    .await;
    assert_eq!(one.stdout, "undefined\n");
    assert_fails_with(&one, "localStorage is not defined");
    assert_eq!(two.stdout, "undefined undefined\n");
}

#[tokio::test]
async fn js_cache_storage() {
    let (one, two) =
        two_runs(Js, "console.log(typeof caches); await caches.open('leak');", "console.log(typeof caches);").await;
    assert_fails_with(&one, "caches is not defined");
    assert_eq!(two.stdout, "undefined\n");
}

#[tokio::test]
async fn js_cache_storage_from_a_worker() {
    // A Worker's global scope still has CacheStorage, where the harness
    // cannot remove it; the runner blocks where Deno would store it, so
    // nothing is stored, let alone seen by the next run.
    let worker = |body: &str| {
        format!(
            "const src = `try {{ {body} }} catch (e) {{ postMessage(String(e).slice(0, 37)); }}`;\n\
             const w = new Worker(URL.createObjectURL(new Blob([src], {{ type: 'text/javascript' }})), {{ type: 'module' }});\n\
             await new Promise((done) => (w.onmessage = (e) => {{ console.log(e.data); w.terminate(); done(); }}));"
        )
    };
    let (one, two) = two_runs(
        Js,
        &worker("const c = await caches.open('leak'); await c.put('https://x.test/', new Response('stored')); postMessage('put');"),
        &worker("const c = await caches.open('leak'); const r = await c.match('https://x.test/'); postMessage(String(r && await r.text()));"),
    )
    .await;
    assert_status(&one, Status::Completed);
    assert_eq!(one.stdout, "Error: Failed to create cache storage\n", "{one:#?}");
    assert_eq!(two.stdout, "Error: Failed to create cache storage\n", "{two:#?}");
}

#[tokio::test]
async fn python_local_storage_through_js() {
    let (one, two) = two_runs(
        Py,
        "import js\nprint(hasattr(js, 'localStorage'))",
        "import js\nprint(hasattr(js, 'localStorage'), hasattr(js, 'caches'))",
    )
    .await;
    assert_eq!(one.stdout, "False\n", "{one:#?}");
    assert_eq!(two.stdout, "False False\n", "{two:#?}");
}

#[tokio::test]
async fn job_directory_is_removed_after_a_timeout_too() {
    let work = tempfile::tempdir().expect("work dir");
    let runner = runner_with(limits(), work.path()).await;
    let mut job = spec(Js, "for (;;) {}");
    job.timeout_ms = Some(300);
    let outcome = run_on(&runner, &job).await;
    drop(runner);
    assert_status(&outcome, Status::Timeout);
    assert_eq!(std::fs::read_dir(work.path()).expect("read").count(), 0);
}
