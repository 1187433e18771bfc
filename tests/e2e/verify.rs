//! `scripts/verify-sandbox.sh` run against a local stack: every check in it
//! must come out as expected.

use std::time::Duration;

use crate::util::*;

#[tokio::test]
async fn verify_sandbox_script_passes() {
    let stack = Stack::start(&[]).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/verify-sandbox.sh");
    let output = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new("bash").arg(script).arg(&stack.api.base).arg(ALICE).output(),
    )
    .await
    .expect("finished in time")
    .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "verify-sandbox.sh failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let passed = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(passed >= 15, "only {passed} checks ran");
    assert!(!stdout.lines().any(|l| l.starts_with("FAIL ")));
}
