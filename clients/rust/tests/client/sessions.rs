//! Sessions: state kept from one exec to the next, checkpoint and fork,
//! destroy, and the typed error for an exec in a closed session.

use runbox_client::{Exec, Language, NewSession, SessionStatus, Status};

use crate::util::*;

#[tokio::test]
async fn a_session_keeps_its_state_across_execs_until_destroyed() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let session = runbox.create_session(&NewSession::new(Language::Python)).await.expect("create");
    assert_eq!((session.status, session.language), (SessionStatus::Idle, Language::Python));

    let first = runbox.exec(&session.id, &Exec::new("xs = [3, 1, 4]")).await.expect("exec");
    assert_eq!((first.job.status, first.job.exit_code), (Status::Completed, Some(0)));
    let second = runbox.exec(&session.id, &Exec::new("print(sorted(xs))")).await.expect("exec");
    assert_eq!(second.job.stdout.as_deref(), Some("[1, 3, 4]\n"));
    assert_eq!((second.session.id.as_str(), second.session.status), (session.id.as_str(), SessionStatus::Idle));
    // A failing exec is a result, and the session lives on.
    let failing = runbox.exec(&session.id, &Exec::new("raise ValueError('no')")).await.expect("exec");
    assert_eq!(failing.job.exit_code, Some(1));
    assert!(failing.job.stderr.unwrap_or_default().contains("ValueError: no"));

    let read = runbox.get_session(&session.id).await.expect("get");
    assert_eq!(read.execs, 3);
    let listed = runbox.list_sessions().await.expect("list");
    assert!(listed.iter().any(|s| s.id == session.id), "{listed:?}");

    let checkpoint = runbox.checkpoint(&session.id).await.expect("checkpoint");
    assert!(checkpoint.size_bytes > 0, "{checkpoint:?}");
    let fork = runbox.fork(&session.id).await.expect("fork");
    assert_ne!(fork.id, session.id);
    let cleared = runbox.exec(&fork.id, &Exec::new("xs.clear(); print(len(xs))")).await.expect("exec");
    assert_eq!(cleared.job.stdout.as_deref(), Some("0\n"));
    let kept = runbox.exec(&session.id, &Exec::new("print(len(xs))")).await.expect("exec");
    assert_eq!(kept.job.stdout.as_deref(), Some("3\n"), "the fork went its own way");

    for id in [&fork.id, &session.id] {
        let closed = runbox.destroy_session(id).await.expect("destroy");
        assert!(closed.status == SessionStatus::Closed && closed.ended(), "{closed:?}");
    }
    let error = runbox.exec(&session.id, &Exec::new("print(1)")).await.expect_err("closed");
    assert_eq!((error.status().map(|s| s.as_u16()), error.code()), (Some(410), Some("session_closed")), "{error}");
}
