//! A session's home. A JavaScript session's is a directory on the host,
//! the one path its child keeps read and write access to: nothing beside
//! it is reachable, no link can be made in it to lead out, and what its
//! code writes there is capped on disk. A Python exec that is cancelled is
//! interrupted, and its session lives on.

use std::sync::Arc;
use std::time::Duration;

use runbox_common::{JobSpec, Language, SessionOp, SessionTask, Status};
use runbox_worker::sandbox::{Live, Restore, SessionChild};
use tokio_util::sync::CancellationToken;

use crate::util::*;

/// Runs `code` as an exec of `session`, with a long timeout.
async fn exec(session: &mut SessionChild, language: Language, code: &str) -> (runbox_common::Outcome, bool) {
    let task = SessionTask { id: "home".into(), op: SessionOp::Exec };
    let spec = JobSpec { session: Some(task), timeout_ms: Some(60_000), ..spec(language, code) };
    session.exec(&spec, sandbox().await, &CancellationToken::new(), &CancellationToken::new(), &Live::default()).await
}

#[tokio::test]
async fn a_javascript_sessions_home_is_all_it_reaches() {
    let outside = outside_dir();
    let planted = outside.path().join("planted.txt");
    std::fs::write(&planted, "secret").expect("plant");
    let p = planted.display();
    let mut session =
        SessionChild::open(sandbox().await, Language::Javascript, Restore::Fresh).await.expect("session opens");
    let code = format!(
        "const fs = await import('node:fs');\n\
         Deno.writeTextFileSync('mine.txt', 'ok'); console.log(Deno.readTextFileSync('mine.txt'));\n\
         const attempts = {{\n\
           readOutside: () => Deno.readTextFileSync('{p}'),\n\
           readUp: () => Deno.readDirSync('..'),\n\
           readFrames: () => Deno.readFileSync('../frames'),\n\
           writeUp: () => Deno.writeTextFileSync('../up.txt', 'x'),\n\
           writeOutside: () => fs.writeFileSync('{p}', 'x'),\n\
           symlink: () => Deno.symlinkSync('{p}', 'link'),\n\
           nodeSymlink: () => fs.symlinkSync('/', 'root'),\n\
           hardLink: () => Deno.linkSync('{p}', 'hard'),\n\
           rootGranted: () => {{ if (Deno.permissions.querySync({{ name: 'read', path: '/' }}).state === 'granted') return; throw new Error('denied'); }},\n\
         }};\n\
         for (const [name, attempt] of Object.entries(attempts)) {{\n\
           try {{ attempt(); console.log(name, 'DONE'); }} catch (e) {{ console.log(name, 'refused'); }}\n\
         }}"
    );
    let (outcome, alive) = exec(&mut session, Language::Javascript, &code).await;
    assert!(alive, "{outcome:#?}");
    assert_ran(&outcome, 0, &outcome.stdout);
    assert!(outcome.stdout.starts_with("ok\n"), "{outcome:#?}");
    assert!(!outcome.stdout.contains("DONE"), "reached past the home: {}", outcome.stdout);
    assert_eq!(outcome.stdout.matches("refused").count(), 9, "{}", outcome.stdout);
    assert_eq!(std::fs::read_to_string(&planted).expect("planted"), "secret");
}

#[tokio::test]
async fn a_javascript_sessions_home_is_capped_on_disk() {
    let work = tempfile::tempdir().expect("work dir");
    let sandbox =
        Arc::new(runbox_worker::sandbox::Sandbox { work_dir: work.path().to_owned(), ..sandbox().await.clone() });
    let mut session = SessionChild::open(&sandbox, Language::Javascript, Restore::Fresh).await.expect("session opens");
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (path, peak) = (work.path().to_owned(), peak.clone());
        tokio::spawn(async move {
            loop {
                let path = path.clone();
                if let Ok(used) = tokio::task::spawn_blocking(move || disk_usage(&path)).await {
                    peak.fetch_max(used, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // A MiB at a time, for ever: only the cap ends it.
    let flood =
        "const mib = new Uint8Array(1 << 20).fill(1);\nfor (let i = 0; ; i++) Deno.writeFileSync(`f${i}`, mib);";
    let task = SessionTask { id: "flood".into(), op: SessionOp::Exec };
    let spec = JobSpec { session: Some(task), timeout_ms: Some(60_000), ..spec(Language::Javascript, flood) };
    let (outcome, alive) =
        session.exec(&spec, &sandbox, &CancellationToken::new(), &CancellationToken::new(), &Live::default()).await;
    sampler.abort();
    assert!(!alive, "the flood's session lives on: {outcome:#?}");
    assert!(outcome.stderr.contains("the session's files passed"), "{outcome:#?}");
    assert_ne!(outcome.status, Status::Timeout, "the cap, not the timeout, ended it: {outcome:#?}");
    // The cap (32 MiB) plus what a flood writes in the 50 ms between two
    // looks, with room: far below what 60 s of flooding would leave.
    let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
    assert!(peak < 512 << 20, "the home held {peak} bytes");
    drop(session);
    assert_eq!(disk_usage(work.path()), 0, "the home went with the session");
}

#[tokio::test]
async fn a_cancelled_python_exec_is_interrupted_and_its_session_lives_on() {
    let sandbox = sandbox().await;
    let mut session = SessionChild::open(sandbox, Language::Python, Restore::Fresh).await.expect("session opens");
    let (outcome, alive) = exec(&mut session, Language::Python, "kept = 41").await;
    assert!(alive && outcome.exit_code == Some(0), "{outcome:#?}");
    let interrupt = CancellationToken::new();
    let task = SessionTask { id: "loop".into(), op: SessionOp::Exec };
    // Longer than the test's own bound: only the interrupt ends it in time.
    let looping =
        JobSpec { session: Some(task), timeout_ms: Some(600_000), ..spec(Language::Python, "while True: pass") };
    let cancel_soon = {
        let interrupt = interrupt.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            interrupt.cancel();
        })
    };
    let (kill, live) = (CancellationToken::new(), Live::default());
    let ran = session.exec(&looping, sandbox, &kill, &interrupt, &live);
    let (outcome, alive) = tokio::time::timeout(Duration::from_secs(120), ran).await.expect("the interrupt ended it");
    cancel_soon.abort();
    assert!(alive, "an interrupted exec ended its session: {outcome:#?}");
    assert!(outcome.stderr.contains("KeyboardInterrupt"), "{outcome:#?}");
    let (outcome, alive) = exec(&mut session, Language::Python, "print(kept + 1)").await;
    assert!(alive);
    assert_ran(&outcome, 0, "42\n");
}

/// A review's findings: a tree deeper than the worker's stack would walk,
/// thousands of directories (no bytes), and files written by an interval
/// after the exec that set it ended. Each ends the session's process; the
/// worker (this test's process) lives on.
#[tokio::test]
async fn deep_trees_directories_and_writes_between_execs_are_held_to_the_cap() {
    let sandbox = sandbox().await;
    for code in [
        "Deno.mkdirSync('a/'.repeat(1900), { recursive: true }); await new Promise((r) => setTimeout(r, 300));",
        "for (let i = 0; i < 20000; i++) Deno.mkdirSync('d' + i);",
    ] {
        let mut session =
            SessionChild::open(sandbox, Language::Javascript, Restore::Fresh).await.expect("session opens");
        let (outcome, alive) = exec(&mut session, Language::Javascript, code).await;
        assert!(!alive, "{code}: {outcome:#?}");
        assert!(outcome.stderr.contains("the session's files passed"), "{code}: {outcome:#?}");
    }

    let mut session = SessionChild::open(sandbox, Language::Javascript, Restore::Fresh).await.expect("session opens");
    let interval = "const mib = new Uint8Array(1 << 20).fill(1);\nlet i = 0;\n\
                    setInterval(() => Deno.writeFileSync(`f${i++}`, mib), 5);";
    let (outcome, alive) = exec(&mut session, Language::Javascript, interval).await;
    assert!(alive && outcome.exit_code == Some(0), "{outcome:#?}");
    // Between execs, the interval writes on, until the watch ends it.
    let mut waited = 0;
    while session.is_alive() {
        assert!(waited < 600, "the session wrote past its cap for a minute between execs");
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
}

#[tokio::test]
async fn a_checkpoint_refuses_a_name_it_could_not_restore() {
    let mut session =
        SessionChild::open(sandbox().await, Language::Javascript, Restore::Fresh).await.expect("session opens");
    let (outcome, alive) = exec(&mut session, Language::Javascript, "Deno.writeTextFileSync('a\\nb', 'x')").await;
    assert!(alive && outcome.exit_code == Some(0), "{outcome:#?}");
    let refused = session.checkpoint().await.expect_err("a name with a newline");
    assert!(refused.to_string().contains("rename or delete it"), "{refused}");
    let (outcome, _) = exec(&mut session, Language::Javascript, "Deno.removeSync('a\\nb')").await;
    assert_eq!(outcome.exit_code, Some(0), "{outcome:#?}");
    assert!(session.checkpoint().await.is_ok());
}
