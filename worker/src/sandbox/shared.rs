//! The shared lane: long-lived children that run one owner's jobs one
//! after another, each in a fresh interpreter. Every Python job takes it
//! unless it asked for a fresh child (`shared_runtime: false`); JS and TS
//! jobs take it when they ask (`shared_runtime: true`). The lane key, set
//! by the api in the signed spec, is the owner (the token's name), so jobs
//! of different tokens never share a process.
//!
//! A fresh Python child spends about 0.4 CPU-s booting Pyodide before its
//! job starts. A shared one starts Deno, reads Pyodide's files and compiles
//! its wasm module once; each job then gets a bare V8 context of its own
//! (no Deno API in it) with a new Pyodide instance built from that module
//! and the snapshot, booted between jobs: a fresh realm, interpreter,
//! `__main__` and in-memory file system. A job's result goes out as soon
//! as it has run; V8 must then free its realm, with nothing of the job's
//! run since, and the child go idle, before it takes another job (see
//! [`settle`], `runtime/harness/python.mjs` and `python-realms.mjs`). A shared
//! JS child runs each job in a fresh Worker instead of a fresh process
//! (see `runtime/harness/js.mjs`); jobs with stdin or files stay in the
//! default lane (see [`SharedLane::takes`]).
//!
//! Where a job's child comes from: an idle child of its owner if one is
//! waiting and clean ([`SharedLane::take`]); else a fresh one, for Python
//! from the runner's pool of shared children that have run no job and
//! belong to nobody yet (runbox's warm-up program aside), so an owner
//! with no warm child waits no longer than a job in a fresh child would.
//! After the job the child stays idle for its owner ([`SharedLane::put`]),
//! within [`WarmConfig`]'s caps, for at most [`WarmConfig::idle`]. A job's
//! outcome says whether its child had already run one of the owner's jobs
//! (`warm`).
//!
//! Unchanged from the default lane: the deny-all flags, and each job's
//! timeout, memory cap and output caps. What differs:
//!
//! - Jobs share a process, but not a realm: each runs in a realm of its
//!   own (a Python job in a bare context, a JS job in a Worker), and the
//!   harness's realm, which holds the channel and the nonces, is out of
//!   every job's reach (see `runtime/harness/protocol.mjs`). Only jobs of
//!   one owner ever meet in a child.
//! - A timeout, cancellation or memory death kills the child, as in the
//!   default lane; the owner's next job gets another one.
//! - A child is replaced whenever a job may have left something behind: a
//!   thread is left that the runtime does not start by itself (a JS job's
//!   Worker that did not stop), a Python job's realm that V8 could not free
//!   (something of the job's still pending in it), bytes arrive outside a
//!   job, or the harness's realm changed (a second line: no job can reach
//!   it).
//! - Frames and reports travel on the child's control channel
//!   ([`Channel`]), which no job can reach; the runner tells jobs' output
//!   apart by end markers that carry a nonce no job sees.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use runbox_common::OutputStream::{Stderr, Stdout};
use runbox_common::{InputFile, JobSpec, Language, MAX_RETURN_FILES, Outcome, OutputFile, Status};
use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdout};
use tokio_util::sync::CancellationToken;

use super::channel::{Channel, ChannelError, ChannelPaths, Report};
use super::child::{
    BOOT_TIMEOUT, Frame, MemorySample, RUNTIME_RSS_ALLOWANCE_MB, ReturnFrame, Usage, classify, confirms_out_of_memory,
    cpu_time, egress_link, give_to_child, hold_to_own_cap, job_dir, kill_group, kill_group_of, outcome, rss_limit,
    watch_rss,
};
use super::command::{ChildMode, FILES_DIR, deno_command};
use super::live::Live;
use super::output::{Captured, capture_after};
use super::{Sandbox, SandboxError};
use crate::egress::Link;

/// What the harness writes after each job, before the job's nonce.
pub(super) const END_MARKER: &str = "\u{6}runbox-end:";

/// How long after an exec's deadline a session's Python child, which
/// interrupts the exec itself at the deadline, is killed if it has not
/// ended it: time for the KeyboardInterrupt to unwind.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// How long an idle shared child waits for its owner's next job, unless
/// configured ([`WarmConfig::idle`]).
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);

/// Threads a Deno child runs by itself between jobs. Any other, a Worker
/// among them, was started by a job, and the child is replaced (a Python
/// job runs in a context on the main thread, a JS job in a Worker that the
/// harness terminates at its end).
const RUNTIME_THREADS: &[&str] = &["deno", "V8 DefaultWorke", "tokio-runtime-w"];

/// Worker threads are named `worker-<n>`. A shared JS child's job Worker
/// is terminated at the job's end, and its thread exits a few milliseconds
/// later: up to this long is waited for before a child counts as unclean.
const WORKER_THREAD_EXIT: Duration = Duration::from_millis(500);

/// How long a child may take to take a frame, or to finish its end marker.
const PIPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Resident memory a shared child may hold on top of a single-use child's
/// allowance: V8 frees a finished job's realm (or a JS job's Worker) in its
/// own time, so a job near its cap is not mistaken for a memory death.
const GARBAGE_ALLOWANCE_MB: u64 = 160;

/// Jobs one shared JS child runs before it is replaced. A JS job Worker
/// that ends on an uncaught error leaves file descriptors behind, and the
/// child's 256-descriptor limit ran out after about 190 such jobs (a worker
/// thread panicked with "Too many open files"; seen on MBTSP, reproduced by
/// the probe `a_long_js_batch_is_spread_over_fresh_children`).
const MAX_JS_JOBS_PER_CHILD: u32 = 100;

/// Jobs one shared Python child runs before it is replaced. Each job's
/// realm is freed with it, and a child held its cost over 600 jobs (the
/// median CPU of each hundred 94–100 ms, 203 MB resident at the end); a
/// new child costs about 0.5 CPU-s, the price of five jobs, so it is paid
/// rarely. What a job may leave behind is checked after every job.
const MAX_PYTHON_JOBS_PER_CHILD: u32 = 1000;

/// The program the warm pool runs in a new shared Python child before a
/// job takes it, and the line it prints (see [`SharedChild::warm_up`]).
const WARM_UP: &str = include_str!("../../runtime/warm-up.py");
const WARM_UP_PRINTS: &str = "warm\n";

/// How long an idle child's stdout and stderr are watched for stray bytes
/// that may still be on their way (a JS job's Worker writes on a thread of
/// its own).
const STRAY_WAIT: Duration = Duration::from_millis(2);

/// How long after a Python job's end its child may take to collect the
/// job's realm (see [`Report::Retired`]) and build the next: the rest of
/// the job's time limit, within these bounds. What the job left pending
/// runs there (and the child is then replaced), so a job's code ends with
/// its time limit, or at most this long after its end; the collection and
/// the build usually take a few tens of milliseconds.
const RETIRE_WITHIN: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(2));

/// How long V8 may go on working on a child's behalf once its harness has
/// retired the last job (a job's wasm compiled in the background, say):
/// the next job waits for it to end, so that none of it is counted in that
/// job's time, CPU or memory, and past this the child is replaced.
const QUIET_TIMEOUT: Duration = Duration::from_secs(10);

/// CPU a settled child may use, all threads, over [`QUIET_WINDOW`]: a
/// fifth of the window.
const QUIET_CPU: Duration = Duration::from_micros(200);
const QUIET_WINDOW: Duration = Duration::from_millis(1);

/// How long to wait for the output pipes to close once a child is killed.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How many idle children the lane keeps, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct WarmConfig {
    /// Idle children one owner may hold on this worker; past it, the
    /// owner's oldest goes.
    pub per_owner: usize,
    /// Idle children this worker holds in all; past it, the owner holding
    /// the most gives up its oldest. 0 keeps none: every job gets a fresh child.
    pub max: usize,
    /// How long an idle child waits for its owner's next job.
    pub idle: Duration,
}

impl Default for WarmConfig {
    /// One idle child, for 3 s.
    fn default() -> Self {
        WarmConfig { per_owner: 1, max: 1, idle: IDLE_TIMEOUT }
    }
}

/// The shared lane of one worker: idle children, each kept for its owner.
pub struct SharedLane {
    sandbox: Arc<Sandbox>,
    /// Oldest first.
    idle: Mutex<Vec<Idle>>,
    config: WarmConfig,
}

struct Idle {
    child: SharedChild,
    since: Instant,
}

impl SharedLane {
    /// A lane keeping idle children within `config`, which a task on the
    /// current runtime ends once they have waited `config.idle`.
    pub fn new(sandbox: Arc<Sandbox>, config: WarmConfig) -> Arc<SharedLane> {
        let lane = Arc::new(SharedLane { sandbox, idle: Mutex::default(), config });
        tokio::spawn(reap(Arc::downgrade(&lane)));
        lane
    }

    /// The lane of `spec`, its owner, if it runs in this lane: a job whose
    /// spec names one, unless it is a JS or TS job with stdin or files,
    /// which a JS job reads from the process's stdin and disk, or asks
    /// files back.
    pub fn takes(spec: &JobSpec) -> Option<&str> {
        let fits = match spec.language {
            Language::Python => true,
            Language::Javascript | Language::Typescript => {
                spec.stdin.is_empty() && spec.files.is_empty() && spec.return_files.is_none()
            }
        };
        spec.shared_lane.as_deref().filter(|_| fits)
    }

    /// Runs `spec` in `child`, which is `owner`'s from now on, and keeps the
    /// child idle for the owner's next job if it may run one.
    pub(super) async fn run(
        &self,
        owner: &str,
        mut child: SharedChild,
        spec: &JobSpec,
        cancel: &CancellationToken,
        live: &Live,
    ) -> Outcome {
        debug_assert!(child.lane.as_deref().is_none_or(|lane| lane == owner), "a child changed owners");
        // The pool's warm-up runs belong to no owner.
        let warm = child.lane.is_some();
        child.lane = Some(owner.to_owned());
        let (mut outcome, reusable) = child.run(spec, &self.sandbox, cancel, live).await;
        outcome.warm = warm;
        if reusable {
            self.put(child);
        } else {
            retire(vec![child]);
        }
        outcome
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the newest idle child of `owner` and `kind` that still looks
    /// clean; children of any other owner are never looked at.
    pub(super) async fn take(&self, owner: &str, kind: Kind) -> Option<SharedChild> {
        loop {
            let mut child = {
                let mut idle = self.lock();
                let at = idle.iter().rposition(|i| i.child.lane.as_deref() == Some(owner) && i.child.kind == kind)?;
                idle.remove(at).child
            };
            // A thread a job started can take a moment to appear.
            if child.is_clean().await {
                return Some(child);
            }
            retire(vec![child]);
        }
    }

    /// Keeps `child` idle for its owner, within the caps: past the owner's
    /// own, its oldest idle child goes; past the worker's, the owner that
    /// holds the most idle children gives up its oldest, so one busy token
    /// cannot push every other token's warm child out.
    fn put(&self, child: SharedChild) {
        let Some(owner) = child.lane.clone() else { return retire(vec![child]) };
        let mut idle = self.lock();
        idle.push(Idle { child, since: Instant::now() });
        let mut gone = Vec::new();
        while idle.iter().filter(|i| i.child.lane.as_ref() == Some(&owner)).count() > self.config.per_owner {
            let Some(oldest) = idle.iter().position(|i| i.child.lane.as_ref() == Some(&owner)) else { break };
            gone.push(idle.remove(oldest).child);
        }
        while idle.len() > self.config.max {
            let held = |lane: &Option<String>| idle.iter().filter(|i| &i.child.lane == lane).count();
            // The first of the owners holding the most is the one whose
            // oldest child is oldest.
            let Some(at) = idle
                .iter()
                .enumerate()
                .max_by_key(|(at, i)| (held(&i.child.lane), std::cmp::Reverse(*at)))
                .map(|(at, _)| at)
            else {
                break;
            };
            gone.push(idle.remove(at).child);
        }
        drop(idle);
        retire(gone);
    }
}

/// Ends idle children that waited too long, until the lane is dropped.
async fn reap(lane: Weak<SharedLane>) {
    let every = lane.upgrade().map_or(Duration::from_millis(500), |lane| {
        (lane.config.idle / 4).clamp(Duration::from_millis(20), Duration::from_millis(500))
    });
    loop {
        tokio::time::sleep(every).await;
        let Some(lane) = lane.upgrade() else { return };
        let mut idle = lane.lock();
        let timeout = lane.config.idle;
        let (expired, kept): (Vec<Idle>, Vec<Idle>) = idle.drain(..).partition(|i| i.since.elapsed() > timeout);
        *idle = kept;
        drop(idle);
        retire(expired.into_iter().map(|i| i.child).collect());
    }
}

/// Kills `children` and removes their directories, off the async threads.
pub(super) fn retire(children: Vec<SharedChild>) {
    if children.is_empty() {
        return;
    }
    for child in &children {
        kill_group(&child.child);
    }
    tokio::task::spawn_blocking(move || drop(children));
}

/// The two kinds of shared child: the JS harness serves JS and TS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Python,
    Js,
}

impl Kind {
    pub(super) fn of(language: Language) -> Kind {
        if language == Language::Python { Kind::Python } else { Kind::Js }
    }

    /// Jobs one child of this kind runs before it is replaced.
    fn max_jobs(self) -> u32 {
        match self {
            Kind::Python => MAX_PYTHON_JOBS_PER_CHILD,
            Kind::Js => MAX_JS_JOBS_PER_CHILD,
        }
    }
}

/// What a look at a child's threads found.
enum Threads {
    Clean,
    /// Only Worker threads besides the runtime's, which may be exiting.
    Settling,
    Dirty,
}

/// A booted shared child, between jobs; also the child of a session, which
/// runs one session's execs in one interpreter.
pub(super) struct SharedChild {
    pub(super) child: Child,
    stdout: ChildStdout,
    stderr: ChildStderr,
    /// Also read by [`settle`] between jobs.
    channel: Arc<tokio::sync::Mutex<Channel>>,
    /// The owner whose jobs this child runs: none until its first job.
    lane: Option<String>,
    pub(super) kind: Kind,
    /// Jobs it has run, warm-up runs among them.
    jobs: u32,
    /// Warm-up runs it has run, or would have but for a failed one (see
    /// [`SharedChild::warm_up`]).
    warm_ups: u32,
    /// After a Python job, whose result goes out before its realm is
    /// collected: whether the child has settled clean (see [`settle`]).
    retiring: Option<tokio::task::JoinHandle<bool>>,
    /// Resident bytes once booted, and what a job may leave on top of that
    /// (see [`SharedChild::is_clean`]).
    resident_at_boot: u64,
    leftover_allowance: u64,
    /// The child's socket to the egress proxy.
    egress: Link,
    /// The child's private directory; removed when this is dropped.
    dir: TempDir,
}

impl SharedChild {
    /// Its `files` directory: a JavaScript session's home.
    pub(super) fn files_dir(&self) -> std::path::PathBuf {
        self.dir.path().join(FILES_DIR)
    }
}

impl Drop for SharedChild {
    /// A child being dropped was killed, or is being: its settling, which
    /// would kill it by its process group, stops first.
    fn drop(&mut self) {
        if let Some(settling) = self.retiring.take() {
            settling.abort();
        }
        // A JavaScript session's home is as deep as its code made it: it is
        // emptied without recursion before the directory goes (`TempDir`
        // removes by recursing), its process stopped first.
        if self.kind == Kind::Js {
            kill_group(&self.child);
            if let Err(e) = super::home::empty_tree(&self.files_dir()) {
                tracing::warn!(error = %e, "could not empty a JavaScript child's files directory");
            }
        }
    }
}

/// How a job (or a session's step) in a shared child ended, before it is an [`Outcome`].
pub(super) enum Ending {
    /// The harness reported the end.
    Finished {
        status: u8,
        /// The harness's realm is unchanged, and nothing came outside the job's output.
        clean: bool,
        /// A session's harness interrupted the exec at its deadline; the
        /// session lives on.
        interrupted: bool,
        /// The program ended on an allocation failure, and the process's
        /// memory bears that out.
        out_of_memory: bool,
        /// Why an open or a checkpoint failed.
        error: Option<String>,
    },
    /// The child exited, or closed its channel, without an end.
    Died,
    /// The child broke the protocol (an oversized or malformed report).
    Broken(ChannelError),
    TimedOut,
    Cancelled,
    OverMemory,
}

/// What one exchange with a shared child's harness gave back.
pub(super) struct Exchange {
    pub ending: Ending,
    pub stdout: Captured,
    pub stderr: Captured,
    pub files: Option<(Vec<OutputFile>, bool)>,
    /// The raw bytes of a checkpoint report.
    pub bytes: Vec<u8>,
    /// From the start (see [`Bounds::deadline`]) to the end.
    pub duration: Duration,
    /// What the job used from its start to its end.
    pub usage: Usage,
}

/// The limits of one exchange.
pub(super) struct Bounds {
    /// Runs from the harness's `started` report when `from_start` is set
    /// (a job: until then it waits for a Worker, up to [`BOOT_TIMEOUT`]),
    /// else from when the frame is sent.
    pub deadline: Duration,
    pub from_start: bool,
    pub stdout_cap: usize,
    pub stderr_cap: usize,
    /// Raw bytes a report may announce.
    pub max_bytes: usize,
    /// The worker's memory cap.
    pub memory_mb: u32,
    /// The job's own, where it asked for less.
    pub job_memory_mb: u32,
    /// Where the job's kept output goes as it is written.
    pub live: Live,
}

impl SharedChild {
    pub(super) async fn boot(sandbox: &Sandbox, kind: Kind, mode: ChildMode) -> Result<SharedChild, SandboxError> {
        let language = if kind == Kind::Python { Language::Python } else { Language::Javascript };
        let prepare = {
            let sandbox = sandbox.clone();
            tokio::task::spawn_blocking(move || {
                let dir = job_dir(&sandbox, language)?;
                if mode == ChildMode::Session && kind == Kind::Js {
                    // A JavaScript session's home, which its code writes.
                    give_to_child(&dir.path().join(FILES_DIR), &sandbox)?;
                }
                let paths = ChannelPaths::in_dir(dir.path());
                paths.make()?;
                give_to_child(&paths.frames, &sandbox)?;
                give_to_child(&paths.results, &sandbox)?;
                std::io::Result::Ok((dir, paths))
            })
        };
        let (dir, paths) = prepare.await.map_err(std::io::Error::other)??;
        let mut channel = Channel::open(&paths)?;
        let egress = egress_link(sandbox, dir.path())?;
        let (isolation, limits) = (&sandbox.isolation, &sandbox.limits);
        let mut command =
            deno_command(&sandbox.runtime, isolation, limits, language, dir.path(), mode, Some(egress.path()));
        let mut child = command.spawn().map_err(SandboxError::Spawn)?;
        // Its stdin stays empty and closed: a job that reads it reads nothing.
        drop(child.stdin.take());
        let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(SandboxError::Boot("child has no stdio pipes".into()));
        };
        let ready = tokio::time::timeout(BOOT_TIMEOUT, channel.report(0)).await;
        if !matches!(ready, Ok(Ok((Report::Ready, _)))) {
            kill_group(&child);
            let _ = child.wait().await;
            let mut message = Vec::new();
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, (&mut stderr).take(8192).read_to_end(&mut message)).await;
            return Err(SandboxError::Boot(String::from_utf8_lossy(&message).trim().to_owned()));
        }
        let resident_at_boot = child.id().and_then(MemorySample::of).map_or(0, |sample| sample.resident);
        let leftover_allowance = u64::from(sandbox.limits.memory_mb) * 1024 * 1024 / 2;
        Ok(SharedChild {
            child,
            stdout,
            stderr,
            channel: Arc::new(tokio::sync::Mutex::new(channel)),
            lane: None,
            kind,
            jobs: 0,
            warm_ups: 0,
            retiring: None,
            resident_at_boot,
            leftover_allowance,
            egress,
            dir,
        })
    }

    /// Runs the warm-up program once, as a job of no owner in a realm of
    /// its own, and waits until the child has settled after it, as a job's
    /// next job does. False when the child is unfit for a job now (it is
    /// then to be retired). A run that ends otherwise than the program
    /// does ends the warming at `runs`, not the child: a fit child still
    /// serves.
    pub(super) async fn warm_up(&mut self, sandbox: &Sandbox, runs: u32) -> bool {
        debug_assert!(self.lane.is_none() && self.kind == Kind::Python, "only a pooled Python child warms up");
        let spec = JobSpec::new(Language::Python, WARM_UP);
        let (outcome, reusable) = self.run(&spec, sandbox, &CancellationToken::new(), &Live::default()).await;
        self.warm_ups += 1;
        if (outcome.status, outcome.exit_code, outcome.stdout.as_str()) != (Status::Completed, Some(0), WARM_UP_PRINTS)
        {
            let (status, stderr) = (outcome.status, &outcome.stderr);
            tracing::warn!(%status, %stderr, "the warm-up program failed; this child's warming stops");
            self.warm_ups = self.warm_ups.max(runs);
        }
        reusable && self.is_clean().await
    }

    /// Whether this child wants another of `runs` warm-up runs: not once
    /// it has run them, nor once it has an owner.
    pub(super) fn wants_warm_up(&self, runs: u32) -> bool {
        self.lane.is_none() && self.kind == Kind::Python && self.warm_ups < runs
    }

    /// Warm-up runs done, for choosing the warmest of the pool's children.
    pub(super) fn warm_ups(&self) -> u32 {
        if self.lane.is_none() { self.warm_ups } else { 0 }
    }

    /// False once the child has exited.
    pub(super) fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Fit for the next job: settled after the last Python job (see
    /// [`settle`], whose task is waited for here, not on the path of the
    /// job's result); alive, with only the runtime's own threads once terminated Workers'
    /// threads have had [`WORKER_THREAD_EXIT`] to go; nothing written on
    /// stdout or stderr since the last job ended (a job that went on after
    /// its Worker was terminated); and not holding more memory than a job
    /// may leave behind (the blob store, say, which is the process's and
    /// outlives a job's Worker).
    async fn is_clean(&mut self) -> bool {
        // What the job wrote is in the pipes before the harness reports
        // `retired`, so after that report nothing is in flight to wait for.
        let stray_wait = match self.retiring.take() {
            Some(settling) => {
                if !settling.await.unwrap_or(false) {
                    return false;
                }
                Duration::ZERO
            }
            None => STRAY_WAIT,
        };
        let started = Instant::now();
        loop {
            match self.threads() {
                Threads::Clean => break,
                Threads::Dirty => return false,
                Threads::Settling if started.elapsed() > WORKER_THREAD_EXIT => return false,
                Threads::Settling => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
        if self.wrote_outside_a_job(stray_wait).await {
            return false;
        }
        let resident = self.child.id().and_then(MemorySample::of).map_or(u64::MAX, |sample| sample.resident);
        resident <= self.resident_at_boot.saturating_add(self.leftover_allowance)
    }

    /// Whether any byte is waiting on stdout or stderr between jobs, or
    /// comes within `wait`.
    async fn wrote_outside_a_job(&mut self, wait: Duration) -> bool {
        let (mut out_byte, mut err_byte) = ([0u8; 1], [0u8; 1]);
        // A timeout polls its future once before it looks at the clock.
        let (out, err) = tokio::join!(
            tokio::time::timeout(wait, self.stdout.read(&mut out_byte)),
            tokio::time::timeout(wait, self.stderr.read(&mut err_byte)),
        );
        // A byte, or a stream closed: either way not fit.
        out.is_ok() || err.is_ok()
    }

    fn threads(&mut self) -> Threads {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return Threads::Dirty;
        }
        let Some(pid) = self.child.id() else { return Threads::Dirty };
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Threads::Dirty };
        let mut workers = 0;
        for task in tasks.flatten() {
            // A thread that exited since the listing has no name to read.
            let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else { continue };
            let name = name.trim_end_matches('\n');
            if name.starts_with("worker-") {
                workers += 1;
            } else if !RUNTIME_THREADS.contains(&name) {
                return Threads::Dirty;
            }
        }
        if workers > 0 { Threads::Settling } else { Threads::Clean }
    }

    /// Runs `spec` and returns how it ended, and whether this child may run
    /// its owner's next job (or, in a session, the session's next exec).
    pub(super) async fn run(
        &mut self,
        spec: &JobSpec,
        sandbox: &Sandbox,
        cancel: &CancellationToken,
        live: &Live,
    ) -> (Outcome, bool) {
        // The api checks file paths; the worker does not trust it to.
        if let Some(Err(e)) = spec.files.iter().map(|f| InputFile::check_path(&f.path)).find(Result::is_err) {
            return (Outcome::internal_error(format!("refused the job's files: {e}")), true);
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let egress_tag = uuid::Uuid::new_v4().simple().to_string();
        let timeout = sandbox.limits.timeout_for(spec);
        let in_session = spec.session.is_some();
        let frame = Frame {
            language: spec.language,
            code: &spec.code,
            args: &spec.args,
            files: &spec.files,
            nonce: &nonce,
            memory_mb: sandbox.limits.memory_for(spec),
            stdin: Some(&spec.stdin),
            return_files: ReturnFrame::of(spec),
            op: in_session.then_some("exec"),
            timeout_ms: in_session.then(|| u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            egress: spec.egress.is_some(),
            egress_tag: &egress_tag,
        };
        // A session's Python harness interrupts the exec at the deadline and
        // keeps the session; the kill is for when it cannot.
        let deadline = if in_session && self.kind == Kind::Python { timeout + INTERRUPT_GRACE } else { timeout };
        let frame = match serde_json::to_vec(&frame) {
            Ok(frame) => frame,
            Err(e) => return (Outcome::internal_error(format!("could not encode the job: {e}")), true),
        };
        let cap = sandbox.limits.max_output_bytes;
        let (memory_mb, job_memory_mb) = (sandbox.limits.memory_mb, sandbox.limits.memory_for(spec));
        let bounds = Bounds {
            deadline,
            from_start: true,
            stdout_cap: cap,
            stderr_cap: cap,
            max_bytes: 0,
            memory_mb,
            job_memory_mb,
            live: live.clone(),
        };
        self.egress.begin(spec.egress.as_ref(), &egress_tag);
        let exchange = self.exchange(&frame, &[], &nonce, &bounds, cancel).await;
        let network = self.egress.end();
        let Exchange { ending, stdout, stderr, files, duration, usage, .. } = exchange;
        // A session lives on after any exec its harness finished, whatever
        // the exec left running.
        let finished = matches!(ending, Ending::Finished { .. });
        let (mut outcome, reusable) = self.finish(ending, stdout, stderr, duration, spec).await;
        hold_to_own_cap(&mut outcome, job_memory_mb, memory_mb, usage.peak_memory_bytes);
        // A session's child holds that session alone: its interpreter,
        // built after boot, and everything earlier execs left in it are the
        // session's, and an exec can reuse memory they freed, which a rise
        // from the exec's start would miss. So an exec's figure is the
        // process's peak during it above what the child held once booted.
        let usage = match usage.peak_resident {
            Some(peak) if in_session => {
                Usage { peak_memory_bytes: Some(peak.saturating_sub(self.resident_at_boot)), ..usage }
            }
            _ => usage,
        };
        usage.apply(&mut outcome);
        self.jobs += 1;
        // A child whose egress link a job broke would give its owner's next
        // job no egress: it is replaced (a session keeps its child).
        let reusable = if in_session {
            finished
        } else {
            reusable && self.jobs < self.kind.max_jobs() && !self.egress.is_broken()
        };
        // A Python job's harness collects its realm after its end.
        if reusable && !in_session && self.kind == Kind::Python {
            let within = timeout.saturating_sub(duration).clamp(RETIRE_WITHIN.0, RETIRE_WITHIN.1);
            let limit = rss_limit(memory_mb, RUNTIME_RSS_ALLOWANCE_MB + GARBAGE_ALLOWANCE_MB, memory_mb, None);
            self.retiring = Some(tokio::spawn(settle(self.channel.clone(), self.child.id(), within, limit)));
        }
        if let Some((kept, truncated)) = files {
            let valid = kept.len() <= MAX_RETURN_FILES && kept.iter().all(|f| InputFile::check_path(&f.path).is_ok());
            (outcome.files, outcome.files_truncated) = if valid { (kept, truncated) } else { (Vec::new(), true) };
        }
        outcome.network = network;
        (outcome, reusable)
    }

    /// Sends `frame` and `bytes`, then reads the job's output up to its end
    /// markers and the harness's reports up to its end, within `bounds`.
    /// On a timeout, a cancellation, a memory death or a broken protocol
    /// the child is killed, and what was read so far is kept.
    pub(super) async fn exchange(
        &mut self,
        frame: &[u8],
        bytes: &[u8],
        nonce: &str,
        bounds: &Bounds,
        cancel: &CancellationToken,
    ) -> Exchange {
        let marker = format!("{END_MARKER}{nonce}\n").into_bytes();
        let allowance = RUNTIME_RSS_ALLOWANCE_MB + GARBAGE_ALLOWANCE_MB;
        let pid = self.child.id();
        let resident = pid.and_then(MemorySample::of).map(|sample| sample.resident);
        let rss_limit = rss_limit(bounds.memory_mb, allowance, bounds.job_memory_mb, resident);
        // The count of the job's memory starts with the job (see `Report::Started`).
        let before = std::sync::Mutex::new(if bounds.from_start { None } else { pid.and_then(MemorySample::start) });
        let cpu_before = std::sync::Mutex::new(if bounds.from_start { None } else { pid.and_then(cpu_time) });
        // Taken at the harness's `ran` report, where it sends one.
        let cpu_ran = std::sync::Mutex::new(None);
        let usage = |reported| {
            let memory = *before.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let cpu = *cpu_before.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let ran = *cpu_ran.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            Usage::since(pid, memory, cpu, ran, reported)
        };
        let send_limit = PIPE_TIMEOUT + Duration::from_secs(bytes.len() as u64 >> 24);
        let sent_at = Instant::now();
        let mut channel = self.channel.lock().await;
        let sent = tokio::time::timeout(send_limit, channel.send(frame, bytes)).await;
        if !matches!(sent, Ok(Ok(()))) {
            kill_group(&self.child);
            return Exchange {
                ending: Ending::Died,
                stdout: Captured::default(),
                stderr: Captured::default(),
                files: None,
                bytes: Vec::new(),
                duration: sent_at.elapsed(),
                usage: Usage::default(),
            };
        }
        let child = &self.child;
        let started = std::sync::Mutex::new(if bounds.from_start { None } else { Some(sent_at) });
        let started_now = tokio::sync::Notify::new();
        let reports = async {
            let mut files = None;
            let mut data = Vec::new();
            loop {
                match channel.report(bounds.max_bytes).await {
                    Ok((Report::Started, _)) => {
                        *before.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
                            pid.and_then(MemorySample::start);
                        *cpu_before.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = pid.and_then(cpu_time);
                        *started.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Instant::now());
                        started_now.notify_one();
                    }
                    Ok((Report::Ran, _)) => {
                        *cpu_ran.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = pid.and_then(cpu_time);
                    }
                    Ok((Report::Files { files: kept, truncated }, _)) => files = Some((kept, truncated)),
                    Ok((Report::Checkpoint | Report::File, bytes)) => data = bytes,
                    Ok((end @ Report::End { .. }, _)) => return (Ok(end), files, data),
                    Ok((report @ (Report::Ready | Report::Retired { .. }), _)) => {
                        kill_group(child);
                        let unexpected = format!("{report:?} during a job");
                        return (Err(ChannelError::Malformed(unexpected)), files, data);
                    }
                    Err(e) => {
                        // Its pipes close now, so the output readers finish.
                        kill_group(child);
                        return (Err(e), files, data);
                    }
                }
            }
        };
        let (out, err) = (Captured::live(&bounds.live, Stdout, 0), Captured::live(&bounds.live, Stderr, 0));
        let mut out = std::pin::pin!(capture_after(&mut self.stdout, Vec::new(), out, bounds.stdout_cap, &marker));
        let mut err = std::pin::pin!(capture_after(&mut self.stderr, Vec::new(), err, bounds.stderr_cap, &marker));
        let mut reports = std::pin::pin!(reports);
        let clock = async {
            if bounds.from_start && tokio::time::timeout(BOOT_TIMEOUT, started_now.notified()).await.is_err() {
                return;
            }
            tokio::time::sleep(bounds.deadline).await;
        };
        let stopped = tokio::select! {
            all = async { tokio::join!(&mut out, &mut err, &mut reports) } => Ok(all),
            () = clock => Err(Ending::TimedOut),
            () = cancel.cancelled() => Err(Ending::Cancelled),
            () = watch_rss(pid, rss_limit) => Err(Ending::OverMemory),
        };
        let ((stdout, out_rest), (stderr, err_rest), (end, files, data)) = match stopped {
            Ok(all) => all,
            Err(ending) => {
                // Measured while the child still has its memory.
                let usage = usage(None);
                kill_group(&self.child);
                let out = tokio::time::timeout(DRAIN_TIMEOUT, &mut out).await.unwrap_or_default();
                let err = tokio::time::timeout(DRAIN_TIMEOUT, &mut err).await.unwrap_or_default();
                let duration = since(&started, sent_at);
                let (stdout, stderr) = (out.0, err.0);
                return Exchange { ending, stdout, stderr, files: None, bytes: Vec::new(), duration, usage };
            }
        };
        let duration = since(&started, sent_at);
        let reported = match &end {
            Ok(Report::End { memory_bytes, .. }) => *memory_bytes,
            _ => None,
        };
        let usage = usage(reported);
        // Output after a marker was written outside any job.
        let stray = !out_rest.is_some_and(|rest| rest.is_empty()) || !err_rest.is_some_and(|rest| rest.is_empty());
        let ending = match end {
            Ok(Report::End { status, clean, interrupted, memory, error, .. }) => Ending::Finished {
                status,
                clean: clean && !stray,
                interrupted,
                out_of_memory: memory && {
                    let before = *before.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    confirms_out_of_memory(before, pid.and_then(MemorySample::of), bounds.job_memory_mb)
                },
                error,
            },
            Ok(_) | Err(ChannelError::Closed) => Ending::Died,
            Err(e) => Ending::Broken(e),
        };
        Exchange { ending, stdout, stderr, files, bytes: data, duration, usage }
    }

    async fn finish(
        &mut self,
        ending: Ending,
        stdout: Captured,
        stderr: Captured,
        duration: Duration,
        spec: &JobSpec,
    ) -> (Outcome, bool) {
        let (status, exit_code, signal, reusable) = match ending {
            Ending::Finished { interrupted: true, .. } => (Status::Timeout, None, None, true),
            Ending::Finished { out_of_memory: true, .. } => (Status::MemoryExceeded, None, None, false),
            // A job Worker's thread still exiting is waited for when the
            // child is taken for the next job, not here, where it would
            // hold up this job's result.
            Ending::Finished { status, clean, .. } => {
                let reusable = clean && !matches!(self.threads(), Threads::Dirty);
                (Status::Completed, Some(i32::from(status)), None, reusable)
            }
            Ending::TimedOut => (Status::Timeout, None, None, false),
            Ending::Cancelled => (Status::Cancelled, None, None, false),
            Ending::OverMemory => (Status::MemoryExceeded, None, None, false),
            Ending::Broken(e) => {
                tracing::error!(error = %e, "a shared child broke the protocol; it is ended");
                kill_group(&self.child);
                (Status::InternalError, None, None, false)
            }
            Ending::Died => match tokio::time::timeout(DRAIN_TIMEOUT, self.child.wait()).await {
                Ok(Ok(exit)) => {
                    let (status, code, signal) = classify(exit, &stderr);
                    (status, code, signal, false)
                }
                _ => {
                    kill_group(&self.child);
                    (Status::InternalError, None, None, false)
                }
            },
        };
        (outcome(spec, status, exit_code, signal, &stdout, &stderr, duration), reusable)
    }
}

/// Whether a Python child has settled clean after its last job: its harness
/// reports the job's realm retired clean (see [`Report::Retired`]) within
/// `within` of the job's end, and V8 then stops working on the child's
/// behalf within [`QUIET_TIMEOUT`], with the child's resident memory under
/// `rss_limit` throughout. Otherwise the child is killed here, at once,
/// whether or not a job wants it: what a job left running ends with it.
async fn settle(channel: Arc<tokio::sync::Mutex<Channel>>, pid: Option<u32>, within: Duration, rss_limit: u64) -> bool {
    let settled = async {
        let mut channel = channel.lock().await;
        let retired = tokio::time::timeout(within, channel.report(0)).await;
        matches!(retired, Ok(Ok((Report::Retired { clean: true }, _))))
            && match pid {
                Some(pid) => tokio::task::spawn_blocking(move || quiet(pid, QUIET_TIMEOUT)).await.unwrap_or(false),
                None => false,
            }
    };
    let clean = tokio::select! {
        clean = settled => clean,
        () = watch_rss(pid, rss_limit) => false,
    };
    if !clean {
        kill_group_of(pid);
    }
    clean
}

/// Whether process `pid` is idle within `timeout`: over a [`QUIET_WINDOW`]
/// its threads used less than [`QUIET_CPU`] in all, none was running,
/// waiting to run or in an uninterruptible wait (state `R` or `D`) at the
/// window's end, and none but the main thread at its start. Then its
/// harness waits for a frame and V8 has nothing left to do on its threads
/// (a collection's last sweeping ends within milliseconds; a background
/// compile a job started may take seconds, and on a busy machine wait its
/// turn on a core, runnable but not running). A thread that was not there
/// at the window's start counts with all its CPU; a process whose threads
/// cannot be read is not idle. Work that pauses for longer than a window
/// passes, as it would any window: V8's background compiles and sweeping,
/// which this waits for, do not pause so.
///
/// The main thread's state at the start does not count: it usually is
/// still running then, on its way from the harness's `retired` report to
/// its read of the next frame (with it counted, three jobs in five waited
/// a second window). A blocking thread's sleep keeps the window near its
/// length; the async timer wakes on whole milliseconds, and a window of
/// 2 ms took 3.4.
fn quiet(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let Some(mut start) = ThreadsAtWork::of(pid) else { return false };
    while Instant::now() < deadline {
        std::thread::sleep(QUIET_WINDOW);
        let Some(end) = ThreadsAtWork::of(pid) else { return false };
        if !start.others_busy && !end.main_busy && !end.others_busy && end.cpu_since(&start) < QUIET_CPU {
            return true;
        }
        start = end;
    }
    false
}

/// What process `pid`'s threads are doing, read from `/proc/<pid>/task`.
struct ThreadsAtWork {
    /// Each thread's time on a CPU so far, by thread id, from the
    /// scheduler's count in nanoseconds (`schedstat`, finer than the
    /// clock ticks of `stat`).
    cpu: HashMap<u32, u64>,
    /// Whether the main thread is running, waiting to run, or in an
    /// uninterruptible wait.
    main_busy: bool,
    /// The same of any other thread.
    others_busy: bool,
}

impl ThreadsAtWork {
    /// None when the process's main thread cannot be read (the process is
    /// gone). A thread that ends while it is read is left out: it does no
    /// more work.
    fn of(pid: u32) -> Option<ThreadsAtWork> {
        let mut work = ThreadsAtWork { cpu: HashMap::new(), main_busy: false, others_busy: false };
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
            let Some((tid, cpu, busy)) = Self::thread(&task.path()) else { continue };
            work.cpu.insert(tid, cpu);
            if tid == pid {
                work.main_busy = busy;
            } else {
                work.others_busy |= busy;
            }
        }
        work.cpu.contains_key(&pid).then_some(work)
    }

    /// A thread's id, its CPU in nanoseconds, and whether it is busy.
    fn thread(task: &std::path::Path) -> Option<(u32, u64, bool)> {
        let tid = task.file_name()?.to_str()?.parse().ok()?;
        let schedstat = std::fs::read_to_string(task.join("schedstat")).ok()?;
        let cpu = schedstat.split_whitespace().next()?.parse().ok()?;
        let stat = std::fs::read_to_string(task.join("stat")).ok()?;
        // The state follows the command name, which is in parentheses.
        let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
        Some((tid, cpu, matches!(state, 'R' | 'D')))
    }

    /// The CPU the threads used since `earlier`, a thread that has ended
    /// since not counted and one that started since counted in full.
    fn cpu_since(&self, earlier: &ThreadsAtWork) -> Duration {
        let nanos =
            self.cpu.iter().map(|(tid, now)| now.saturating_sub(earlier.cpu.get(tid).copied().unwrap_or(0))).sum();
        Duration::from_nanos(nanos)
    }
}

/// Time since the job started, or since `sent` if it never did.
fn since(started: &std::sync::Mutex<Option<Instant>>, sent: Instant) -> Duration {
    started.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).unwrap_or(sent).elapsed()
}
