//! The job learns nothing about its host: not the worker's environment
//! (the child's is empty, checked here through the real CLI with a secret in
//! the worker's own environment), not native code, not system details.

use crate::util::*;

const SECRET: &str = "s3cr3t-worker-value";

async fn env_probe(language: runbox_common::Language, code: &str) -> runbox_common::Outcome {
    let (outcome, _) =
        exec_cli(language, code, &[("PROBE_WORKER_SECRET", SECRET), ("AWS_SECRET_ACCESS_KEY", SECRET)], &[]).await;
    assert!(!outcome.stdout.contains(SECRET) && !outcome.stderr.contains(SECRET), "secret leaked: {outcome:#?}");
    outcome
}

#[tokio::test]
async fn js_env_is_invisible() {
    let o = env_probe(Js, "console.log(Deno.env.get('PROBE_WORKER_SECRET'))").await;
    assert_fails_with(&o, "Requires env access to \"PROBE_WORKER_SECRET\"");
    let o = env_probe(Js, "console.log(JSON.stringify(Deno.env.toObject()))").await;
    assert_fails_with(&o, "Requires env access");
    let o = env_probe(Js, "console.log(JSON.stringify(process.env))").await;
    assert_fails_with(&o, "Requires env access");
    let o = env_probe(Js, "console.log(process.env.AWS_SECRET_ACCESS_KEY)").await;
    assert_fails_with(&o, "Requires env access");
}

#[tokio::test]
async fn python_env_is_invisible() {
    let o = env_probe(Py, "import os\nprint(dict(os.environ))\nprint(os.environ.get('PROBE_WORKER_SECRET'))").await;
    assert_status(&o, runbox_common::Status::Completed);
    assert!(o.stdout.ends_with("None\n"), "{o:#?}");
    let o = env_probe(Py, "import js\nprint(js.Deno.env.get('PROBE_WORKER_SECRET'))").await;
    assert_fails_with_any(&o, &[NO_DENO, "Requires env access"]);
    let o = env_probe(Py, "import js\nprint(js.process.env.PROBE_WORKER_SECRET)").await;
    assert_fails_with_any(&o, &[NO_PROCESS, "Requires env access"]);
}

#[tokio::test]
async fn js_dlopen() {
    assert_fails_with(&run(Js, "Deno.dlopen('libc.so.6', {})").await, "Requires ffi access");
}

#[tokio::test]
async fn js_system_details() {
    assert_fails_with(&run(Js, "console.log(Deno.hostname())").await, "Requires sys access to \"hostname\"");
    assert_fails_with(&run(Js, "console.log(Deno.osRelease())").await, "Requires sys access to \"osRelease\"");
    assert_fails_with(&run(Js, "console.log(Deno.networkInterfaces())").await, "Requires sys access");
}

#[tokio::test]
async fn js_permission_request_is_denied() {
    let listener = Listener::open();
    let code = format!(
        "for (const name of ['net', 'read', 'run', 'env', 'write', 'ffi', 'sys']) {{\n\
           console.log(name, (await Deno.permissions.request({{ name }})).state);\n\
         }}\n\
         await fetch('http://127.0.0.1:{}/');",
        listener.port
    );
    let outcome = run(Js, &code).await;
    assert_fails_with(&outcome, "Requires net access");
    assert_eq!(
        outcome.stdout,
        "net denied\nread denied\nrun denied\nenv denied\nwrite denied\nffi denied\nsys denied\n"
    );
    listener.assert_untouched();
}

#[tokio::test]
async fn python_read_access_is_revoked_before_the_program() {
    // The Python child reads Pyodide's files and the snapshot while it
    // boots; the program must find that access gone, for exactly those paths.
    let runtime = &sandbox().await.runtime;
    let snapshot = runtime.snapshot.as_ref().expect("snapshot").display().to_string();
    let wasm = runtime.pyodide_dir.join("pyodide.asm.wasm").display().to_string();
    for path in [runtime.pyodide_dir.display().to_string(), wasm.clone(), snapshot.clone()] {
        let code = format!(
            "import js\nprint(js.Deno.permissions.querySync(js.Object.fromEntries([['name', 'read'], ['path', {path:?}]])).state)"
        );
        let outcome = run(Py, &code).await;
        // A job's realm has no Deno to ask; a session's Worker has, without the access.
        if outcome.exit_code == Some(0) {
            assert_eq!(outcome.stdout, "prompt\n", "read access to {path}: {outcome:#?}");
        } else {
            assert_fails_with_any(&outcome, &[NO_DENO]);
        }
    }
    for path in [wasm, snapshot] {
        let outcome = run(Py, &format!("import js\nprint(js.Deno.readFileSync({path:?}).length)")).await;
        assert_fails_with_any(&outcome, &[NO_DENO, "Requires read access"]);
    }
}

#[tokio::test]
async fn webgpu_is_unavailable() {
    // A WebGPU adapter loads the host's graphics drivers (Mesa, LLVM),
    // which write a shader cache; no job gets one, in a Worker either.
    let code = "const worker = new Worker(URL.createObjectURL(new Blob(\n\
                  ['postMessage(String(await navigator.gpu?.requestAdapter()))'], { type: 'text/javascript' })), { type: 'module' });\n\
                const inWorker = await new Promise((resolve) => (worker.onmessage = (e) => resolve(e.data)));\n\
                worker.terminate();\n\
                console.log(typeof navigator.gpu, inWorker);";
    let outcome = run(Js, code).await;
    assert_eq!(outcome.stdout, "undefined null\n", "{outcome:#?}");
    let code = "import js\nprint(js.eval('typeof navigator === \"undefined\" ? \"undefined\" : typeof navigator.gpu'))";
    let outcome = run(Py, code).await;
    assert_eq!(outcome.stdout, "undefined\n", "{outcome:#?}");
}

#[tokio::test]
async fn host_paths_are_hidden_where_cheap() {
    let runtime_dir = sandbox().await.runtime.dir.display().to_string();
    let code = "console.log(Deno.mainModule, JSON.stringify(process.argv), JSON.stringify(Deno.args));\n\
                console.log(Deno.execPath(), process.execPath);\n\
                throw new Error('where am I');";
    let outcome = run(Js, code).await;
    assert_eq!(outcome.stdout, "file:///main.js [\"deno\",\"/main.js\"] []\ndeno deno\n", "{outcome:#?}");
    assert!(outcome.stderr.contains("where am I"), "{outcome:#?}");
    assert!(!outcome.stderr.contains(&runtime_dir), "harness path in the error: {outcome:#?}");
    let code = "import js\nprint(js.Deno.mainModule, list(js.process.argv), list(js.Deno.args))";
    let outcome = run(Py, code).await;
    // A job's realm has no Deno or process to name a path; a session's Worker hides them.
    if outcome.exit_code == Some(0) {
        assert_eq!(outcome.stdout, "file:///main.py ['deno', '/main.py'] []\n", "{outcome:#?}");
    } else {
        assert_fails_with_any(&outcome, &[NO_DENO]);
    }
    assert!(!outcome.stdout.contains(&runtime_dir) && !outcome.stderr.contains(&runtime_dir), "{outcome:#?}");
}
