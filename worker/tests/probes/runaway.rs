//! Programs that never end are killed at their timeout, promptly, and leave
//! no process behind.

use std::time::{Duration, Instant};

use runbox_common::{Language, Status};
use runbox_worker::sandbox::{BootedChild, Live};
use tokio_util::sync::CancellationToken;

use crate::util::*;

const TIMEOUT_MS: u64 = 1500;

async fn times_out(language: Language, code: &str) {
    let sandbox = sandbox().await;
    let child = BootedChild::boot(sandbox, language).await.expect("boots");
    let pid = child.pid().expect("child has a pid");
    let mut job = spec(language, code);
    job.timeout_ms = Some(TIMEOUT_MS);
    let started = Instant::now();
    let outcome = child.run(&job, sandbox, &CancellationToken::new(), &Live::default()).await;
    let elapsed = started.elapsed();

    assert_status(&outcome, Status::Timeout);
    assert_eq!(outcome.exit_code, None);
    assert!(outcome.duration_ms >= TIMEOUT_MS, "{outcome:#?}");
    assert!(elapsed < Duration::from_millis(TIMEOUT_MS + 500), "ended {elapsed:?} after the handoff");
    let group = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits"));
    assert_eq!(nix::sys::signal::killpg(group, None), Err(nix::errno::Errno::ESRCH), "a process of the group is alive");
}

#[tokio::test]
async fn js_infinite_loop() {
    times_out(Js, "for (;;) {}").await;
}

#[tokio::test]
async fn js_atomics_wait_forever() {
    times_out(Js, "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0)").await;
}

#[tokio::test]
async fn js_timer_keeps_it_alive() {
    times_out(Js, "setInterval(() => {}, 10)").await;
}

#[tokio::test]
async fn ts_promise_that_never_settles_with_a_worker() {
    times_out(
        Ts,
        "const url: string = URL.createObjectURL(new Blob(['for (;;) {}'], { type: 'text/javascript' }));\n\
         new Worker(url, { type: 'module' });\n\
         await new Promise(() => setInterval(() => {}, 1000));",
    )
    .await;
}

#[tokio::test]
async fn python_sleep_past_the_timeout() {
    times_out(Py, "import time\ntime.sleep(100)").await;
}

#[tokio::test]
async fn python_infinite_loop() {
    times_out(Py, "while True:\n    pass").await;
}

#[tokio::test]
async fn cancellation_kills_the_child() {
    let sandbox = sandbox().await;
    let child = BootedChild::boot(sandbox, Js).await.expect("boots");
    let pid = child.pid().expect("pid");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let outcome = child.run(&spec(Js, "for (;;) {}"), sandbox, &cancel, &Live::default()).await;
    assert_status(&outcome, Status::Cancelled);
    assert!(outcome.duration_ms < 1300, "{outcome:#?}");
    let group = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits"));
    assert_eq!(nix::sys::signal::killpg(group, None), Err(nix::errno::Errno::ESRCH));
}
