//! Measured resource use: every lane reports `cpu_ms` and
//! `peak_memory_bytes` that follow what the program really did. In each
//! lane (a single-use child, the shared lane, a session exec) and each
//! language, a program that allocates 150 MB reports at least that, a
//! trivial one much less, and a CPU-bound one `cpu_ms` close to its
//! `duration_ms`.
//!
//! The lanes run one at a time (a lock): the CPU-bound program is only as
//! close to its duration as it has a core to itself.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use runbox_common::{JobSpec, Language, Outcome, SessionOp, SessionTask, Status, Timeouts};
use runbox_worker::sandbox::{Limits, Live, Restore, Runner, Runtime, Sandbox, SessionChild};
use tokio::sync::{Mutex, OnceCell};
use tokio_util::sync::CancellationToken;

const ALLOCATED: u64 = 150_000_000;

fn limits() -> Limits {
    Limits {
        timeouts: Timeouts { default: Duration::from_secs(20), max: Duration::from_secs(60) },
        memory_mb: 512,
        max_output_bytes: 64 * 1024,
    }
}

async fn sandbox() -> Arc<Sandbox> {
    static SANDBOX: OnceCell<Arc<Sandbox>> = OnceCell::const_new();
    SANDBOX
        .get_or_init(|| async {
            let runtime = Runtime::locate(Path::new(runbox_worker::sandbox::DEFAULT_RUNTIME_DIR))
                .expect("runtime installed: run scripts/setup");
            Arc::new(
                Sandbox::new(
                    runtime,
                    limits(),
                    std::env::temp_dir(),
                    runbox_worker::egress::EgressProxy::new(&Default::default()).expect("egress proxy"),
                )
                .await
                .expect("sandbox starts"),
            )
        })
        .await
        .clone()
}

/// One lane at a time, so the CPU-bound program has a core.
static ONE_LANE: Mutex<()> = Mutex::const_new(());

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lane {
    SingleUse,
    Shared,
    Session,
}

/// The three programs of `language`: allocating, trivial, CPU-bound.
fn programs(language: Language) -> [&'static str; 3] {
    match language {
        Language::Python => [
            "b = bytearray(150_000_000)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint(len(b))",
            "print(1)",
            "import time\nt = time.time()\nwhile time.time() - t < 1.0:\n    pass\nprint('done')",
        ],
        _ => [
            "const b = new Uint8Array(150_000_000);\nfor (let i = 0; i < b.length; i += 4096) b[i] = 1;\nconsole.log(b.length);",
            "console.log(1);",
            "const t = Date.now();\nwhile (Date.now() - t < 1000) {}\nconsole.log('done');",
        ],
    }
}

async fn run_in(lane: Lane, language: Language, code: &str) -> Outcome {
    let sandbox = sandbox().await;
    let spec = JobSpec::new(language, code);
    match lane {
        Lane::SingleUse => Runner::cold(sandbox).run(&spec, &CancellationToken::new()).await.outcome,
        Lane::Shared => {
            let spec = JobSpec { shared_lane: Some("resources".into()), ..spec };
            Runner::cold(sandbox).run(&spec, &CancellationToken::new()).await.outcome
        }
        Lane::Session => {
            let mut session = SessionChild::open(&sandbox, language, Restore::Fresh).await.expect("session opens");
            let exec = JobSpec { session: Some(SessionTask { id: "resources".into(), op: SessionOp::Exec }), ..spec };
            session
                .exec(&exec, &sandbox, &CancellationToken::new(), &CancellationToken::new(), &Live::default())
                .await
                .0
        }
    }
}

async fn check_lane(lane: Lane) {
    let _one = ONE_LANE.lock().await;
    for language in [Language::Python, Language::Javascript] {
        let [allocating, trivial, busy] = programs(language);
        let context = format!("{lane:?}, {language}");
        let allocated = run_in(lane, language, allocating).await;
        assert_eq!((allocated.status, allocated.exit_code), (Status::Completed, Some(0)), "{context}: {allocated:#?}");
        let small = run_in(lane, language, trivial).await;
        assert_eq!((small.status, small.exit_code), (Status::Completed, Some(0)), "{context}: {small:#?}");
        let cpu = run_in(lane, language, busy).await;
        assert_eq!((cpu.status, cpu.exit_code), (Status::Completed, Some(0)), "{context}: {cpu:#?}");

        let peak = |o: &Outcome| o.peak_memory_bytes.unwrap_or_else(|| panic!("{context}: no peak: {o:#?}"));
        let cpu_ms = |o: &Outcome| o.cpu_ms.unwrap_or_else(|| panic!("{context}: no cpu_ms: {o:#?}"));
        let (big, little) = (peak(&allocated), peak(&small));
        eprintln!(
            "{context}: peak {big} B allocating, {little} B trivial; cpu {} ms of {} ms busy, {} ms trivial",
            cpu_ms(&cpu),
            cpu.duration_ms,
            cpu_ms(&small)
        );
        assert!(big >= ALLOCATED, "{context}: a 150 MB allocation reported a peak of {big} bytes");
        // Much less: the trivial program's figure is below the allocating
        // one's by most of the allocation.
        assert!(
            little + ALLOCATED / 2 <= big,
            "{context}: a trivial program reported {little} bytes, against {big} for the allocating one"
        );
        // A job is not charged the runtime it was handed to; a session exec
        // is charged its session's interpreter, which it holds.
        if lane != Lane::Session {
            assert!(little < ALLOCATED / 2, "{context}: a trivial program reported {little} bytes");
        }
        let (used, took) = (cpu_ms(&cpu), cpu.duration_ms);
        assert!(took >= 900, "{context}: the busy loop took {took} ms");
        assert!(used * 2 >= took, "{context}: a CPU-bound program used {used} ms of CPU in {took} ms");
        // Threads beside the program's (V8's compiler and collector) may
        // add some, never a multiple.
        assert!(used <= took * 2 + 500, "{context}: {used} ms of CPU in {took} ms");
        assert!(cpu_ms(&small) < used, "{context}: a trivial program used {} ms of CPU", cpu_ms(&small));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_use_child_reports_its_rusage() {
    check_lane(Lane::SingleUse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_lane_reports_each_jobs_own_use() {
    check_lane(Lane::Shared).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_exec_reports_its_own_use() {
    check_lane(Lane::Session).await;
}
