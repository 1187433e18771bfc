//! A child holds only its three pipes. Descriptors the worker inherited
//! from whatever started it (here a pipe on fd 9 holding a secret) are
//! reachable from a program through `node:net` with no permission check, so
//! the child must never get them.

use std::process::Stdio;

use runbox_common::{Language, Outcome, Status};

use crate::util::*;

const SECRET: &str = "inherited-pipe-secret-41d2";

/// Runs `runbox-worker exec` as a real worker process that inherited fd 9, a
/// pipe with SECRET in it, the way a supervisor's descriptor would be.
async fn exec_with_inherited_pipe(language: Language, code: &str) -> Outcome {
    use tokio::io::AsyncWriteExt;
    let script = format!("exec 9< <(printf %s {SECRET}); exec \"$0\" exec --language {language} -");
    let mut child = tokio::process::Command::new("bash")
        .args(["-c", &script, env!("CARGO_BIN_EXE_runbox-worker")])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn runbox-worker");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(code.as_bytes()).await.expect("write program");
    drop(stdin);
    let output = child.wait_with_output().await.expect("runbox-worker runs");
    assert!(output.status.success(), "runbox-worker exec failed: {output:?}");
    serde_json::from_slice(&output.stdout).expect("outcome JSON")
}

/// Reads fd 9 through node:net and prints what arrived, or the error.
const READ_FD_9: &str = "const net = await import('node:net');\n\
    const text = await new Promise((resolve) => {\n\
      try {\n\
        const s = new net.Socket({ fd: 9, readable: true });\n\
        let got = '';\n\
        s.on('data', (d) => { got += d; if (got.length >= 20) resolve('read:' + got); });\n\
        s.on('error', (e) => resolve('error:' + e.code));\n\
        setTimeout(() => resolve('nothing:' + got), 1500);\n\
      } catch (e) { resolve('error:' + (e.code ?? e.name)); }\n\
    });\n\
    console.log(text);";

#[tokio::test]
async fn js_cannot_use_an_inherited_descriptor() {
    let outcome = exec_with_inherited_pipe(Js, READ_FD_9).await;
    assert_status(&outcome, Status::Completed);
    assert!(!outcome.stdout.contains(SECRET) && !outcome.stderr.contains(SECRET), "{outcome:#?}");
    assert!(outcome.stdout.starts_with("error:"), "{outcome:#?}");
}

#[tokio::test]
async fn python_cannot_use_an_inherited_descriptor() {
    let code = format!(
        "from pyodide.code import run_js\nprint(await run_js({:?}))",
        format!("(async () => {{ {} }})()", READ_FD_9.replace("console.log(text);", "return text;"))
    );
    let outcome = exec_with_inherited_pipe(Py, &code).await;
    assert_status(&outcome, Status::Completed);
    assert!(!outcome.stdout.contains(SECRET) && !outcome.stderr.contains(SECRET), "{outcome:#?}");
    // A job's bare realm cannot even import node:net; a session's Worker can, and gets an error.
    let refused = outcome.exit_code == Some(1) && outcome.stderr.contains(NO_MODULE_LOADER);
    assert!(outcome.stdout.starts_with("error:") || refused, "{outcome:#?}");
}
