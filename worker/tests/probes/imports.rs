//! Code from outside never loads. `--deny-net` does not cover module
//! loading, so each of these is its own probe.

use crate::util::*;

#[tokio::test]
async fn js_dynamic_npm_import() {
    let outcome = run(Js, "await import('npm:left-pad')").await;
    assert_fails_with(&outcome, "npm specifiers were requested; but --no-npm is specified");
}

#[tokio::test]
async fn ts_static_npm_import() {
    let outcome = run(Ts, "import pad from 'npm:left-pad';\nconst s: string = pad('1', 3);\nconsole.log(s);").await;
    assert_fails_with(&outcome, "--no-npm is specified");
}

#[tokio::test]
async fn js_dynamic_https_import() {
    let outcome = run(Js, "await import('https://esm.sh/left-pad')").await;
    assert_fails_with(&outcome, "Requires import access to \"esm.sh:443\"");
}

#[tokio::test]
async fn js_static_https_import() {
    let outcome = run(Js, "import pad from 'https://esm.sh/left-pad';\nconsole.log(pad);").await;
    assert_fails_with(&outcome, "Requires import access to \"esm.sh:443\"");
}

#[tokio::test]
async fn js_jsr_import() {
    let outcome = run(Js, "await import('jsr:@std/path')").await;
    assert_fails_with(&outcome, "Requires import access to \"jsr.io:443\"");
}

#[tokio::test]
async fn js_http_import_on_loopback() {
    let listener = Listener::open();
    let outcome = run(Js, &format!("await import('http://127.0.0.1:{}/mod.js')", listener.port)).await;
    assert_fails_with(&outcome, "Requires import access");
    listener.assert_untouched();
}

#[tokio::test]
async fn js_import_of_a_local_file() {
    let dir = outside_dir();
    let planted = dir.path().join("planted.mjs");
    std::fs::write(&planted, "console.log('planted module ran')").expect("plant");
    let outcome = run(Js, &format!("await import('file://{}')", planted.display())).await;
    assert_fails_with(&outcome, "Requires read access");
    assert!(!outcome.stdout.contains("planted module ran"));
}

#[tokio::test]
async fn python_js_eval_npm_import() {
    // The Python child runs with --no-npm, like the JS child.
    let outcome = run(Py, "import js\nawait js.eval(\"import('npm:left-pad')\")").await;
    // A job's bare realm has no module loader at all; a session's Worker runs with --no-npm.
    assert_fails_with_any(&outcome, &[NO_MODULE_LOADER, "--no-npm is specified"]);
}

#[tokio::test]
async fn python_js_eval_https_import() {
    let outcome = run(Py, "import js\nawait js.eval(\"import('https://esm.sh/left-pad')\")").await;
    assert_fails_with(&outcome, "pyodide.ffi.JsException");
    assert!(!outcome.stdout.contains("function"), "{outcome:#?}");
}
