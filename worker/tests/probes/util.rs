use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use runbox_common::{
    FileAction, FileResult, JobSpec, Language, Outcome, SessionOp, SessionTask, Status, Timeouts, Verdict,
};
use runbox_worker::sandbox::{
    Limits, Live, PoolConfig, Restore, Runner, Runtime, Sandbox, SessionChild, SharedLane, WarmConfig,
};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

pub use runbox_common::Language::{Javascript as Js, Python as Py, Typescript as Ts};

/// The limits probes run under: a short default timeout so runaway probes
/// end quickly, and a small output cap so flood probes hit it.
pub fn limits() -> Limits {
    Limits {
        timeouts: Timeouts { default: Duration::from_secs(20), max: Duration::from_secs(60) },
        memory_mb: 256,
        max_output_bytes: 64 * 1024,
    }
}

/// The sandbox every probe shares, with the isolation layers probed once.
pub async fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceCell<Sandbox> = OnceCell::const_new();
    SANDBOX
        .get_or_init(|| async {
            let runtime = Runtime::locate(Path::new(runbox_worker::sandbox::DEFAULT_RUNTIME_DIR))
                .expect("runtime installed: run scripts/setup");
            assert!(runtime.snapshot.is_some(), "Pyodide snapshot missing: run scripts/setup");
            Sandbox::new(
                runtime,
                limits(),
                std::env::temp_dir(),
                runbox_worker::egress::EgressProxy::new(&Default::default()).expect("egress proxy"),
            )
            .await
            .expect("sandbox starts")
        })
        .await
}

/// Whether probes run on warm pooled children (the default), on children
/// booted for each job (`RUNBOX_PROBE_MODE=cold`), as the first exec of a
/// fresh session (`RUNBOX_PROBE_MODE=session`), or as the first job of a
/// shared-lane batch whose second job is an honest program
/// (`RUNBOX_PROBE_MODE=shared`). CI runs them all.
pub fn pooled() -> bool {
    std::env::var("RUNBOX_PROBE_MODE").map_or(true, |mode| mode != "cold")
}

pub fn in_sessions() -> bool {
    std::env::var("RUNBOX_PROBE_MODE").is_ok_and(|mode| mode == "session")
}

pub fn in_shared_lane() -> bool {
    std::env::var("RUNBOX_PROBE_MODE").is_ok_and(|mode| mode == "shared")
}

/// Whether `spec` runs as a session exec in session mode: sessions run
/// Python and JavaScript, and a JavaScript exec has no stdin or files.
/// Arguments, returned files and the shared lane are jobs' alone.
fn session_takes(spec: &JobSpec) -> bool {
    let js_extras = spec.language == Js && (!spec.stdin.is_empty() || !spec.files.is_empty());
    spec.language != Ts
        && !js_extras
        && spec.args.is_empty()
        && spec.return_files.is_none()
        && spec.shared_lane.is_none()
}

/// A runner in the probe mode, with its own `limits` and job directories
/// made under `work_dir`.
pub async fn runner_with(limits: Limits, work_dir: &Path) -> Runner {
    let sandbox = Arc::new(Sandbox { limits, work_dir: work_dir.to_owned(), ..sandbox().await.clone() });
    if pooled() {
        Runner::pooled(
            sandbox,
            PoolConfig {
                min: 0,
                max: 1,
                concurrency: 1,
                warm_up_runs: PoolConfig::WARM_UP_RUNS,
                warm: WarmConfig::default(),
            },
        )
    } else {
        Runner::cold(sandbox)
    }
}

/// Runs `spec` on `runner`, from a warm child in pooled mode, as the
/// first exec of a new session in session mode, or as the first job of a
/// new shared-lane batch in shared mode.
pub async fn run_on(runner: &Runner, spec: &JobSpec) -> Outcome {
    if in_sessions() && session_takes(spec) {
        let mut session =
            SessionChild::open(runner.sandbox(), spec.language, Restore::Fresh).await.expect("session opens");
        // A session holding files, as an agent's does: the probe runs beside them.
        let seed = FileAction::Put { path: "seed/data.csv".into(), content: "YSxiCjEsMgo=".into() };
        let seeded = session.file(&seed).await.expect("the seed file");
        assert!(matches!(seeded, FileResult::Written { size: 8 }), "{seeded:?}");
        let task = SessionTask { id: "probe".into(), op: SessionOp::Exec };
        let exec = JobSpec { session: Some(task), ..spec.clone() };
        return session
            .exec(&exec, runner.sandbox(), &CancellationToken::new(), &CancellationToken::new(), &Live::default())
            .await
            .0;
    }
    if in_shared_lane()
        && let Some(outcome) = run_in_shared_lane(runner, spec).await
    {
        return outcome;
    }
    runner.wait_warm(spec.language).await;
    let report = runner.run(spec, &CancellationToken::new()).await;
    // Whether the child was the pool's, not how long taking it took: a busy
    // machine once stretched a warm take to 8 ms.
    assert_eq!(report.prebooted, pooled(), "ran in the wrong mode: {:?}", report.boot);
    report.outcome
}

/// Shared mode: runs `spec` as job 1 of a batch of its own in the shared
/// lane, then an honest program of its language as job 2, and returns job
/// 1's outcome once job 2's is exactly what that program does. None when
/// the lane would not take `spec` (a JS job with stdin, say, or one that
/// names `process`): it then runs on the usual path.
async fn run_in_shared_lane(runner: &Runner, spec: &JobSpec) -> Option<Outcome> {
    static LANES: AtomicU64 = AtomicU64::new(0);
    if spec.shared_lane.is_some() {
        return None;
    }
    let lane = format!("probe-{}-{}", std::process::id(), LANES.fetch_add(1, Ordering::Relaxed));
    let first = JobSpec { shared_lane: Some(lane.clone()), ..spec.clone() };
    SharedLane::takes(&first)?;
    let report = runner.run(&first, &CancellationToken::new()).await;
    // A new lane has no child of its own yet: job 1 always gets a fresh one.
    assert!(!report.outcome.warm, "job 1 ran in a child that had run another job: {:#?}", report.outcome);
    let (code, stdin, stdout) = match spec.language {
        Py => ("import sys\nprint(len(sys.stdin.read()), sum(range(10)))", "abc", "3 45\n"),
        Js | Ts => ("console.log([1, 2, 3].map((x) => x * 2).join(), typeof leftover)", "", "2,4,6 undefined\n"),
    };
    let honest = JobSpec {
        stdin: stdin.into(),
        expected_stdout: Some(stdout.into()),
        shared_lane: Some(lane),
        ..JobSpec::new(spec.language, code)
    };
    let next = runner.run(&honest, &CancellationToken::new()).await.outcome;
    let ran = (next.status, next.exit_code, next.signal, next.stdout.as_str(), next.stderr.as_str(), next.verdict);
    assert_eq!(
        ran,
        (Status::Completed, Some(0), None, stdout, "", Some(Verdict::Accepted)),
        "the honest job after this one in its batch did not run as it should: {next:#?}\nafter: {:#?}",
        report.outcome
    );
    Some(report.outcome)
}

pub fn spec(language: Language, code: &str) -> JobSpec {
    JobSpec::new(language, code)
}

pub async fn run(language: Language, code: &str) -> Outcome {
    run_spec(&spec(language, code)).await
}

pub async fn run_spec(spec: &JobSpec) -> Outcome {
    let runner = runner_with(limits(), &std::env::temp_dir()).await;
    run_on(&runner, spec).await
}

/// The program ran, failed, and said why on stderr.
#[track_caller]
pub fn assert_fails_with(outcome: &Outcome, needle: &str) {
    assert_eq!(outcome.status, Status::Completed, "{outcome:#?}");
    assert_eq!(outcome.exit_code, Some(1), "{outcome:#?}");
    assert!(outcome.stderr.contains(needle), "stderr lacks {needle:?}: {outcome:#?}");
}

#[track_caller]
pub fn assert_status(outcome: &Outcome, status: Status) {
    assert_eq!(outcome.status, status, "{outcome:#?}");
}

/// A loopback TCP listener that records whether anything connected.
pub struct Listener {
    inner: std::net::TcpListener,
    pub port: u16,
}

impl Listener {
    pub fn open() -> Listener {
        let inner = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        inner.set_nonblocking(true).expect("nonblocking");
        let port = inner.local_addr().expect("addr").port();
        Listener { inner, port }
    }

    #[track_caller]
    pub fn assert_untouched(&self) {
        match self.inner.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("the listener saw a connection: {other:?}"),
        }
    }
}

/// A directory the test owns, readable by the unprivileged uid the sandbox
/// may run children as, so a probe fails for the sandbox's reasons only.
pub fn outside_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    dir
}

/// Reads the resident memory of `pid` in bytes, if it is still alive.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs the `runbox-worker exec` CLI on `code` with extra environment
/// variables, returning its outcome and the highest resident memory seen.
pub async fn exec_cli(language: Language, code: &str, env: &[(&str, &str)], extra: &[&str]) -> (Outcome, u64) {
    use tokio::io::AsyncWriteExt;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_runbox-worker"));
    command
        .args(["exec", "--language", language.as_str(), "-"])
        .args(extra)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    let mut child = command.spawn().expect("spawn runbox-worker");
    let pid = child.id().expect("pid");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(code.as_bytes()).await.expect("write program");
    drop(stdin);
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        while let Some(rss) = rss_bytes(pid) {
            peak = peak.max(rss);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        peak
    });
    let output = child.wait_with_output().await.expect("runbox-worker runs");
    assert!(output.status.success(), "runbox-worker exec failed: {output:?}");
    let outcome = serde_json::from_slice(&output.stdout).expect("outcome JSON");
    (outcome, sampler.await.expect("sampler"))
}

/// The most bytes a run had on disk under its job directories, and of
/// those, under their DENO_DIRs' `gen` (where Deno caches what it
/// transpiled, TypeScript modules a program imports among them).
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskUse {
    pub peak: u64,
    pub transpiled: u64,
}

/// Bytes under `path`, counting what the files really occupy.
pub fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_usage(&entry.path()),
            Ok(meta) => meta.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Bytes under `<job dir>/deno/gen` for each job directory in `work`.
fn transpile_cache_usage(work: &Path) -> u64 {
    let Ok(jobs) = std::fs::read_dir(work) else { return 0 };
    jobs.flatten().map(|job| disk_usage(&job.path().join("deno").join("gen"))).sum()
}

/// Runs `code` in the probe mode with job directories in a fresh work dir,
/// and returns its outcome and the most bytes seen on disk there while it
/// ran (sampled every 50 ms, and once more at the end).
pub async fn peak_disk_use(language: Language, code: &str) -> (Outcome, DiskUse) {
    use std::sync::Mutex;
    let work = tempfile::tempdir().expect("work dir");
    let runner = runner_with(limits(), work.path()).await;
    let seen = Arc::new(Mutex::new(DiskUse::default()));
    let sample = {
        let path = work.path().to_owned();
        move || (disk_usage(&path), transpile_cache_usage(&path))
    };
    let record = {
        let seen = seen.clone();
        move |(used, transpiled): (u64, u64)| {
            let mut seen = seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            seen.peak = seen.peak.max(used);
            seen.transpiled = seen.transpiled.max(transpiled);
        }
    };
    let sampler = {
        let (sample, record) = (sample.clone(), record.clone());
        tokio::spawn(async move {
            loop {
                let sample = sample.clone();
                if let Ok(used) = tokio::task::spawn_blocking(sample).await {
                    record(used);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let outcome = run_on(&runner, &spec(language, code)).await;
    sampler.abort();
    // What is left before the directory goes counts too.
    record(sample());
    let seen = *seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    (outcome, seen)
}

/// How a Python job's bare realm refuses what only a Deno realm has: it has
/// no such name (`import js` gives an `AttributeError`; `js.eval`, a
/// ReferenceError) and no module loader. A session's interpreter runs in a
/// Worker instead, which has Deno's API with every permission revoked, and
/// refuses with Deno's own error: probes of `js.Deno` accept either, and
/// either is a failure that access would not give.
pub const NO_DENO: &str = "AttributeError: Deno";
pub const NO_PROCESS: &str = "AttributeError: process";
pub const NO_DENO_IN_EVAL: &str = "ReferenceError: Deno is not defined";
pub const NO_MODULE_LOADER: &str = "A dynamic import callback was not specified";

/// Asserts that the program failed (exit 1) with one of `needles` on stderr.
#[track_caller]
pub fn assert_fails_with_any(outcome: &Outcome, needles: &[&str]) {
    assert_eq!((outcome.status, outcome.exit_code), (Status::Completed, Some(1)), "{outcome:#?}");
    assert!(
        needles.iter().any(|needle| outcome.stderr.contains(needle)),
        "stderr lacks all of {needles:?}: {outcome:#?}"
    );
}

/// Asserts that the program ended on its own with `exit_code` and exactly `stdout`.
#[track_caller]
pub fn assert_ran(outcome: &Outcome, exit_code: i32, stdout: &str) {
    let ran = (outcome.status, outcome.exit_code, outcome.signal, outcome.stdout.as_str());
    assert_eq!(ran, (Status::Completed, Some(exit_code), None, stdout), "{outcome:#?}");
}

/// A runner for probes that run jobs in shared lanes of their own ([`run_in`]).
pub async fn lane_runner() -> Runner {
    runner_with(limits(), &std::env::temp_dir()).await
}

/// Runs `spec` in shared lane `lane` of `runner`, whatever the probe mode.
pub async fn run_in(runner: &Runner, lane: &str, spec: JobSpec) -> runbox_worker::sandbox::RunReport {
    let job = JobSpec { shared_lane: Some(lane.to_owned()), ..spec };
    runner.run(&job, &CancellationToken::new()).await
}
