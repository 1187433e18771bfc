//! No job starts a process. Every probe asks for `touch MARKER` on the host
//! and the test checks that the marker never appeared.

use runbox_common::Language;

use crate::util::*;

async fn no_process(language: Language, code: impl Fn(&str) -> String, needle: &str) {
    no_process_any(language, code, &[needle]).await;
}

async fn no_process_any(language: Language, code: impl Fn(&str) -> String, needles: &[&str]) {
    let dir = outside_dir();
    let marker = dir.path().join("marker");
    let outcome = run(language, &code(&marker.display().to_string())).await;
    assert_fails_with_any(&outcome, needles);
    assert!(!marker.exists(), "a process ran: {outcome:#?}");
}

#[tokio::test]
async fn js_deno_command() {
    no_process(
        Js,
        |m| format!("new Deno.Command('/usr/bin/touch', {{ args: ['{m}'] }}).outputSync()"),
        "Requires run access to \"/usr/bin/touch\"",
    )
    .await;
}

#[tokio::test]
async fn js_deno_command_by_name() {
    // With an empty PATH the lookup fails before the permission check; either
    // way, nothing runs.
    no_process(
        Js,
        |m| format!("await new Deno.Command('touch', {{ args: ['{m}'] }}).output()"),
        "Failed to spawn 'touch'",
    )
    .await;
}

#[tokio::test]
async fn js_node_child_process() {
    no_process(Js, |m| format!("import cp from 'node:child_process'; cp.execSync('/usr/bin/touch {m}')"), "NotCapable")
        .await;
    no_process(
        Js,
        |m| format!("import cp from 'node:child_process'; const r = cp.spawnSync('/usr/bin/touch', ['{m}'], {{ env: {{}} }}); if (r.error) throw r.error;"),
        "NotCapable",
    )
    .await;
}

#[tokio::test]
async fn python_os_system() {
    // Pyodide routes os.system to Node's child_process: a job's bare realm
    // has none, and os.system returns -1; a session's Worker has, and Deno
    // denies it.
    let dir = outside_dir();
    let marker = dir.path().join("marker");
    let outcome = run(Py, &format!("import os\nprint(os.system('/usr/bin/touch {}'))", marker.display())).await;
    if outcome.exit_code == Some(0) {
        assert_eq!(outcome.stdout, "-1\n", "{outcome:#?}");
    } else {
        assert_fails_with_any(&outcome, &["NotCapable"]);
    }
    assert!(!marker.exists(), "a process ran: {outcome:#?}");
}

#[tokio::test]
async fn python_subprocess() {
    no_process(
        Py,
        |m| format!("import subprocess\nsubprocess.run(['/usr/bin/touch', '{m}'])"),
        "does not support processes",
    )
    .await;
}

#[tokio::test]
async fn python_fork_and_spawn() {
    no_process(Py, |_| "import os\nos.fork()".into(), "OSError").await;
    no_process(Py, |m| format!("import os\nos.posix_spawn('/usr/bin/touch', ['touch', '{m}'], {{}})"), "Error").await;
}

#[tokio::test]
async fn python_js_deno_command() {
    no_process_any(
        Py,
        |m| format!("import js\njs.eval(\"new Deno.Command('/usr/bin/touch', {{ args: ['{m}'] }}).outputSync()\")"),
        &[NO_DENO_IN_EVAL, "Requires run access"],
    )
    .await;
}
