//! Issue 43: whatever a job makes crosses the child's channel as bytes,
//! so no value of the job's can break the protocol and turn the job's
//! doing into runbox's failure. (Rows 1 to 4, seen through the api, are in
//! `tests/e2e/job_made.rs`.)

use runbox_common::{JobSpec, Language, SessionOp, SessionTask};
use runbox_worker::sandbox::{Live, Restore, SessionChild, SessionError};
use tokio_util::sync::CancellationToken;

use crate::util::*;

async fn exec(session: &mut SessionChild, code: &str) -> runbox_common::Outcome {
    let task = SessionTask { id: "exec".into(), op: SessionOp::Exec };
    let spec = JobSpec { session: Some(task), ..spec(Language::Python, code) };
    let (outcome, alive) = session
        .exec(&spec, sandbox().await, &CancellationToken::new(), &CancellationToken::new(), &Live::default())
        .await;
    assert!(alive, "{outcome:#?}");
    outcome
}

/// Row 8: a session's checkpoint fails for a reason the session's code
/// made, 8,191 `a`s and an emoji, which the harness once cut through the
/// emoji's surrogate pair into a report the runner refused: the session
/// was lost. The reason now crosses as bytes, cut on bytes; the checkpoint
/// fails, and the session lives on with its state.
#[tokio::test]
async fn a_checkpoint_failing_for_a_reason_cut_through_a_character_keeps_the_session() {
    let sandbox = sandbox().await;
    let mut session = SessionChild::open(sandbox, Language::Python, Restore::Fresh).await.expect("session opens");
    let setup = "import js, pyodide_js\nkept = 7\n\
        pyodide_js.makeMemorySnapshot = js.eval(\"() => { throw new Error('a'.repeat(8191) + '\\\\u{1F600}') }\")";
    assert_ran(&exec(&mut session, setup).await, 0, "");
    match session.checkpoint().await {
        Err(SessionError::Failed(reason)) => {
            assert!(reason.contains(&"a".repeat(8191)), "{:.200}", reason);
            assert!(!reason.contains('\u{1F600}'), "the reason is cut at its cap");
        }
        other => panic!("the checkpoint should fail with the session's reason: {:?}", other.map(|b| b.len())),
    }
    assert_ran(&exec(&mut session, "print(kept)").await, 0, "7\n");
}
