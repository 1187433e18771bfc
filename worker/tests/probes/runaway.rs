//! Programs that never end are killed at their timeout, promptly, and leave
//! no process behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use runbox_common::{JobSpec, Language, Status};
use runbox_worker::sandbox::{BootedChild, Live, PoolConfig, Runner, Sandbox, WarmConfig};
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

/// A Python job of the shared lane whose leftovers never end: it waits
/// (through WebAssembly.compile hops, which V8 settles in tasks of their
/// own) until the harness's collection after its end, then loops forever
/// on the harness's thread, so the harness never reports `retired`. Its
/// result went out already, at its `end`. A job's code runs no longer than
/// its time limit allows, before its end or after it: the child must be
/// ended then, whether or not another job wants it. (Found failing: a job
/// with a 1 s limit reported completed, about 100 ms of CPU, and left its
/// child at 100% of a core until the lane's idle timeout killed it: 2 s of
/// CPU from 2.5 s to 4.5 s after its end, when the runner read `retired`
/// only once the owner's next job wanted the child.)
#[tokio::test]
async fn a_shared_python_jobs_leftovers_end_with_its_time_limit() {
    let work = outside_dir();
    let sandbox = Arc::new(Sandbox { work_dir: work.path().to_owned(), ..sandbox().await.clone() });
    let warm = WarmConfig { per_owner: 1, max: 1, idle: Duration::from_secs(30) };
    let runner = Runner::pooled(sandbox, PoolConfig { min: 0, max: 0, concurrency: 1, warm_up_runs: 0, warm });
    let code = r#"
import js
js.Function('''
  const gauge = new WeakRef(new Array(1 << 20).fill(0));
  const empty = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]);
  const hop = () => WebAssembly.compile(empty).then(() => {
    if (gauge.deref() !== undefined) return hop();
    for (;;) {}
  });
  hop();
''')()
print("left a loop")
"#;
    let job = JobSpec { timeout_ms: Some(1000), ..spec(Py, code) };
    let left = run_in(&runner, "leftover-loop", job).await.outcome;
    let ended = Instant::now();
    // Timed out (the harness's end waited for the loop) or ended before
    // it; either way it ran and wrote what it wrote.
    assert!(matches!(left.status, Status::Completed | Status::Timeout), "{left:#?}");
    assert_eq!(left.stdout, "left a loop\n", "{left:#?}");
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(ended.elapsed())).await;
    let before = cpu_of_children_in(work.path());
    tokio::time::sleep(Duration::from_millis(4500).saturating_sub(ended.elapsed())).await;
    let burnt = cpu_of_children_in(work.path()).saturating_sub(before);
    assert!(
        burnt < Duration::from_millis(500),
        "a job with a 1 s limit left its child burning {burnt:?} of CPU from 2.5 s to 4.5 s after its end: {left:#?}"
    );
}

/// CPU time, user and system, of the live processes whose command line
/// names `dir` (the children of a runner whose job directories are there).
fn cpu_of_children_in(dir: &std::path::Path) -> Duration {
    let needle = dir.as_os_str().as_encoded_bytes();
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().map_or(100, |t| t as u64);
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if !cmdline.windows(needle.len()).any(|window| window == needle) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(close) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let field = |n: usize| fields.get(n).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += field(11) + field(12);
    }
    Duration::from_millis(ticks * 1000 / tick)
}
