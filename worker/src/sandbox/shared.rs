//! The shared lane: long-lived children that run the jobs of one batch one
//! after another (a batch submitted with `shared_runtime`).
//!
//! A fresh Python child spends about 0.4 CPU-s booting Pyodide before its
//! job starts. A shared one boots once and compiles the wasm module once;
//! each job then gets a new Pyodide instance restored from its own copy of
//! the snapshot, built while the child waits for the job: a fresh
//! interpreter, `__main__` and in-memory file system for a fraction of the
//! cost (see `runtime/harness/python.mjs`). A shared JS child runs each job
//! in a fresh Worker (fresh globals) instead of a fresh process (see
//! `runtime/harness/js.mjs`); only jobs that cannot tell the difference go
//! there (see [`SharedLane::takes`]).
//!
//! Unchanged from the default lane: the deny-all flags, and each job's
//! timeout, memory cap and output caps. What differs:
//!
//! - Jobs share a process and its JS realm. Only jobs of one batch, whose
//!   id is the lane key and which has one owner, ever meet in a child.
//! - A timeout, cancellation or memory death kills the child, as in the
//!   default lane; the batch's next job gets another one.
//! - A child is replaced whenever a job may have left something behind: the
//!   harness reports timers, Workers or changed globals, a thread appears
//!   that the runtime does not start by itself, or bytes arrive outside a job.
//! - The runner tells jobs' output apart by end markers that carry a nonce
//!   the program never sees (see `runtime/harness/protocol.mjs`).

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use runbox_common::{InputFile, JobSpec, Language, Outcome, Status};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

use super::child::{
    FILES_MARKER, Frame, MEMORY_MARKER, RUNTIME_RSS_ALLOWANCE_MB, ReturnFrame, classify, job_dir, kill_group, outcome,
    spawn_ready, watch_rss,
};
use super::command::ChildMode;
use super::output::{Captured, FILES_SECTION_LIMIT, capture_after, capture_until, returned_files};
use super::{RunReport, Sandbox, SandboxError};

/// What the harness writes after each job, before the job's nonce.
pub(super) const END_MARKER: &str = "\u{6}runbox-end:";

/// How long after an exec's deadline a session's Python child, which
/// interrupts the exec itself at the deadline, is killed if it has not
/// ended it: time for the KeyboardInterrupt to unwind.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// How long an idle shared child waits for its batch's next job.
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);

/// Threads a Deno child runs by itself. Any other (a Worker's, for one)
/// was started by a job, and the child is replaced.
const RUNTIME_THREADS: &[&str] = &["deno", "V8 DefaultWorke", "tokio-runtime-w"];

/// Worker threads are named `worker-<n>`. A shared JS child's job Worker
/// is terminated at the job's end, and its thread exits a few milliseconds
/// later: up to this long is waited for before a child counts as unclean.
const WORKER_THREAD_EXIT: Duration = Duration::from_millis(500);

/// Words in a JS or TS program that keep it out of the shared lane: its
/// Worker shares the child's stdin, which carries the frames, and Node's
/// `process` (exit, stdin, argv) behaves as one program per process.
const JS_SOLO_WORDS: &[&str] = &["stdin", "process", "readline", "prompt", "/dev/", "readFileSync(0"];

/// How long a child may take to take a frame, or to finish its end marker.
const PIPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Resident memory a shared child may hold on top of a single-use child's
/// allowance: finished jobs' instances that V8 has not collected yet. The
/// harness collects them once they pass 128 MiB (`COLLECT_AFTER_GROWTH` in
/// `python.mjs`), so a job near its cap is not mistaken for a memory death.
const GARBAGE_ALLOWANCE_MB: u64 = 160;

/// Jobs one shared child runs before it is replaced. A JS job Worker that
/// ends on an uncaught error leaves file descriptors behind, and the
/// child's 256-descriptor limit ran out after about 190 such jobs (a worker
/// thread panicked with "Too many open files"; seen on MBTSP, reproduced by
/// the probe `a_long_js_batch_is_spread_over_fresh_children`); a Python
/// child gains nothing from living longer.
const MAX_JOBS_PER_CHILD: u32 = 100;

/// How long to wait for the output pipes to close once a child is killed.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The shared lane of one worker: idle children, each kept for its batch.
pub struct SharedLane {
    sandbox: Arc<Sandbox>,
    idle: Mutex<Vec<Idle>>,
    /// Idle children kept at most; the oldest goes first.
    max_idle: usize,
}

struct Idle {
    child: SharedChild,
    since: Instant,
}

impl SharedLane {
    /// A lane keeping at most `max_idle` idle children, which a task on the
    /// current runtime ends once they have waited [`IDLE_TIMEOUT`].
    pub fn new(sandbox: Arc<Sandbox>, max_idle: usize) -> Arc<SharedLane> {
        let lane = Arc::new(SharedLane { sandbox, idle: Mutex::default(), max_idle: max_idle.max(1) });
        tokio::spawn(reap(Arc::downgrade(&lane)));
        lane
    }

    /// Whether `spec` runs in this lane: a job of a shared batch, unless
    /// it is a JS or TS job with stdin, files, or code that names one of
    /// [`JS_SOLO_WORDS`].
    pub fn takes(spec: &JobSpec) -> Option<&str> {
        let fits = match spec.language {
            Language::Python => true,
            Language::Javascript | Language::Typescript => {
                spec.stdin.is_empty()
                    && spec.files.is_empty()
                    && spec.return_files.is_none()
                    && !JS_SOLO_WORDS.iter().any(|word| spec.code.contains(word))
            }
        };
        spec.shared_lane.as_deref().filter(|_| fits)
    }

    /// Runs `spec` in an idle child of batch `lane`, or a new one.
    pub async fn run(&self, lane: &str, spec: &JobSpec, cancel: &CancellationToken) -> RunReport {
        let started = Instant::now();
        let kind = Kind::of(spec.language);
        let idle = self.take(lane, kind).await;
        let (child, boot) = match idle {
            Some(child) => (Ok(child), Duration::ZERO),
            None => (SharedChild::boot(&self.sandbox, lane, kind, ChildMode::Shared).await, started.elapsed()),
        };
        let mut child = match child {
            Ok(child) => child,
            Err(e) => {
                tracing::error!(error = %e, "sandbox failed to start a shared child");
                let outcome = Outcome::internal_error("runbox could not start the sandbox for this job");
                return RunReport { outcome, boot };
            }
        };
        let (outcome, reusable) = child.run(spec, &self.sandbox, cancel).await;
        if reusable {
            self.put(child);
        } else {
            retire(vec![child]);
        }
        RunReport { outcome, boot }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes an idle child of `lane` and `kind` that still looks clean.
    async fn take(&self, lane: &str, kind: Kind) -> Option<SharedChild> {
        loop {
            let mut child = {
                let mut idle = self.lock();
                let at = idle.iter().rposition(|i| i.child.lane == lane && i.child.kind == kind)?;
                idle.swap_remove(at).child
            };
            // A thread a job started can take a moment to appear.
            if child.is_clean().await {
                return Some(child);
            }
            retire(vec![child]);
        }
    }

    fn put(&self, child: SharedChild) {
        let mut idle = self.lock();
        idle.push(Idle { child, since: Instant::now() });
        let excess = idle.len().saturating_sub(self.max_idle);
        let gone: Vec<SharedChild> = idle.drain(..excess).map(|i| i.child).collect();
        drop(idle);
        retire(gone);
    }
}

/// Ends idle children that waited too long, until the lane is dropped.
async fn reap(lane: Weak<SharedLane>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(lane) = lane.upgrade() else { return };
        let mut idle = lane.lock();
        let (expired, kept): (Vec<Idle>, Vec<Idle>) = idle.drain(..).partition(|i| i.since.elapsed() > IDLE_TIMEOUT);
        *idle = kept;
        drop(idle);
        retire(expired.into_iter().map(|i| i.child).collect());
    }
}

/// Kills `children` and removes their directories, off the async threads.
fn retire(children: Vec<SharedChild>) {
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
    pub(super) stdin: ChildStdin,
    pub(super) stdout: ChildStdout,
    pub(super) stderr: ChildStderr,
    /// The batch whose jobs this child runs, and which of them.
    lane: String,
    pub(super) kind: Kind,
    /// Jobs it has run.
    jobs: u32,
    /// The child's private directory; removed when this is dropped.
    _dir: TempDir,
}

/// How a job in a shared child ended, before it is an [`Outcome`].
pub(super) enum Ending {
    /// The harness wrote both end markers: the program's exit status, and
    /// whether the child is still fit for another job.
    Finished {
        status: i32,
        clean: bool,
        /// A session's harness interrupted the exec at its deadline; the
        /// session lives on.
        interrupted: bool,
    },
    /// The child exited (or closed its pipes) without them.
    Died,
    TimedOut,
    Cancelled,
    OverMemory,
}

impl SharedChild {
    pub(super) async fn boot(
        sandbox: &Sandbox,
        lane: &str,
        kind: Kind,
        mode: ChildMode,
    ) -> Result<SharedChild, SandboxError> {
        let language = if kind == Kind::Python { Language::Python } else { Language::Javascript };
        let prepare = {
            let sandbox = sandbox.clone();
            tokio::task::spawn_blocking(move || job_dir(&sandbox, language))
        };
        let dir = prepare.await.map_err(std::io::Error::other)??;
        let (child, stdin, stdout, stderr) = spawn_ready(sandbox, language, dir.path(), mode).await?;
        Ok(SharedChild { child, stdin, stdout, stderr, lane: lane.to_owned(), kind, jobs: 0, _dir: dir })
    }

    /// Alive, with only the runtime's own threads, once terminated Workers'
    /// threads have had [`WORKER_THREAD_EXIT`] to go.
    async fn is_clean(&mut self) -> bool {
        let started = Instant::now();
        loop {
            match self.threads() {
                Threads::Clean => return true,
                Threads::Dirty => return false,
                Threads::Settling if started.elapsed() > WORKER_THREAD_EXIT => return false,
                Threads::Settling => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
    }

    fn threads(&mut self) -> Threads {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return Threads::Dirty;
        }
        let Some(pid) = self.child.id() else { return Threads::Dirty };
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Threads::Dirty };
        let mut found = Threads::Clean;
        for task in tasks.flatten() {
            // A thread that exited since the listing has no name to read.
            let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else { continue };
            let name = name.trim_end_matches('\n');
            if name.starts_with("worker-") {
                found = Threads::Settling;
            } else if !RUNTIME_THREADS.contains(&name) {
                return Threads::Dirty;
            }
        }
        found
    }

    /// Runs `spec` and returns how it ended, and whether this child may run
    /// the batch's next job (or, in a session, the session's next exec).
    pub(super) async fn run(
        &mut self,
        spec: &JobSpec,
        sandbox: &Sandbox,
        cancel: &CancellationToken,
    ) -> (Outcome, bool) {
        // The api checks file paths; the worker does not trust it to.
        if let Some(Err(e)) = spec.files.iter().map(|f| InputFile::check_path(&f.path)).find(Result::is_err) {
            return (Outcome::internal_error(format!("refused the job's files: {e}")), true);
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let timeout = sandbox.limits.timeout_for(spec);
        let in_session = spec.session.is_some();
        let frame = Frame {
            language: spec.language,
            code: &spec.code,
            args: &spec.args,
            files: &spec.files,
            nonce: &nonce,
            memory_mb: sandbox.limits.memory_mb,
            stdin: Some(&spec.stdin),
            return_files: ReturnFrame::of(spec),
            op: in_session.then_some("exec"),
            timeout_ms: in_session.then(|| u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
        };
        // A session's Python harness interrupts the exec at the deadline and
        // keeps the session; the kill is for when it cannot.
        let deadline = if in_session && self.kind == Kind::Python { timeout + INTERRUPT_GRACE } else { timeout };
        let frame = match serde_json::to_vec(&frame) {
            Ok(frame) => frame,
            Err(e) => return (Outcome::internal_error(format!("could not encode the job: {e}")), true),
        };
        let started = Instant::now();
        if !self.send(&frame, &[]).await {
            return (Outcome::internal_error("the shared runtime stopped taking jobs"), false);
        }

        let cap = sandbox.limits.max_output_bytes;
        let out_marker = format!("{END_MARKER}{nonce}:").into_bytes();
        let err_marker = format!("{END_MARKER}{nonce}\n").into_bytes();
        let allowance = RUNTIME_RSS_ALLOWANCE_MB + GARBAGE_ALLOWANCE_MB;
        let rss_limit = (u64::from(sandbox.limits.memory_mb) + allowance) * 1024 * 1024;
        let files_marker = ReturnFrame::of(spec).map(|_| format!("{FILES_MARKER}{nonce}\n").into_bytes());
        let pid = self.child.id();
        let stdout = &mut self.stdout;
        // stdout: the program's output, then the files it asked back, if
        // any, then the end marker.
        let read_stdout = async {
            let Some(files_marker) = &files_marker else {
                let (captured, rest) = capture_until(stdout, cap, &out_marker).await;
                return (captured, None, rest);
            };
            let (captured, rest) = capture_until(stdout, cap, files_marker).await;
            let Some(rest) = rest else { return (captured, None, None) };
            let (section, rest) = capture_after(stdout, rest, FILES_SECTION_LIMIT, &out_marker).await;
            let section = if section.truncated { Vec::new() } else { section.bytes };
            (captured, Some(section), rest)
        };
        let (ending, (out, files, out_rest), (err, err_rest)) = {
            let mut out = std::pin::pin!(read_stdout);
            let mut err = std::pin::pin!(capture_until(&mut self.stderr, cap, &err_marker));
            let stopped = tokio::select! {
                (out, err) = async { tokio::join!(&mut out, &mut err) } => Err((out, err)),
                () = tokio::time::sleep(deadline) => Ok(Ending::TimedOut),
                () = cancel.cancelled() => Ok(Ending::Cancelled),
                () = watch_rss(pid, rss_limit) => Ok(Ending::OverMemory),
            };
            match stopped {
                Err((out, err)) => (Ending::Died, out, err),
                Ok(ending) => {
                    // Killed: the pipes close, and what was read so far is kept.
                    kill_group(&self.child);
                    let out = tokio::time::timeout(DRAIN_TIMEOUT, &mut out).await.unwrap_or_default();
                    let err = tokio::time::timeout(DRAIN_TIMEOUT, &mut err).await.unwrap_or_default();
                    (ending, out, err)
                }
            }
        };
        let duration = started.elapsed();
        let ending = match (ending, out_rest, err_rest) {
            // Bytes after stderr's marker were written outside any job.
            (Ending::Died, Some(rest), Some(err_rest)) => self.read_status(rest, err_rest.is_empty()).await,
            (ending, ..) => ending,
        };
        // A session lives on after any exec its harness finished, whatever
        // the exec left running.
        let finished = matches!(ending, Ending::Finished { .. });
        let (mut outcome, reusable) = self.finish(ending, out, err, duration, spec, &nonce).await;
        self.jobs += 1;
        let reusable = if in_session { finished } else { reusable && self.jobs < MAX_JOBS_PER_CHILD };
        if let Some(section) = files {
            (outcome.files, outcome.files_truncated) = returned_files(&section);
        }
        (outcome, reusable)
    }

    /// Sends `frame` with its length header, then `bytes` raw (a session's
    /// checkpoint), within [`PIPE_TIMEOUT`] plus a second per 16 MiB of
    /// `bytes`. False if the child did not take them.
    pub(super) async fn send(&mut self, frame: &[u8], bytes: &[u8]) -> bool {
        let header = format!("{}\n", frame.len());
        let limit = PIPE_TIMEOUT + Duration::from_secs(bytes.len() as u64 >> 24);
        let sent = tokio::time::timeout(limit, async {
            self.stdin.write_all(header.as_bytes()).await?;
            self.stdin.write_all(frame).await?;
            self.stdin.write_all(bytes).await?;
            self.stdin.flush().await
        })
        .await;
        matches!(sent, Ok(Ok(())))
    }

    /// Reads the rest of stdout's end marker, `<status>:<flag>\n`, of
    /// which `rest` has arrived. The flag is 1 for clean, 0 for unclean, 2
    /// for a session exec interrupted at its deadline.
    pub(super) async fn read_status(&mut self, mut rest: Vec<u8>, quiet: bool) -> Ending {
        let read = tokio::time::timeout(PIPE_TIMEOUT, async {
            while !rest.contains(&b'\n') && rest.len() < 32 {
                let mut byte = [0u8; 32];
                match self.stdout.read(&mut byte).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => rest.extend_from_slice(&byte[..n]),
                }
            }
            true
        })
        .await;
        let text = String::from_utf8_lossy(&rest);
        let parsed = text
            .strip_suffix('\n')
            .and_then(|line| line.split_once(':'))
            .and_then(|(status, flag)| Some((status.parse::<i32>().ok()?, flag.to_owned())));
        match (read, parsed) {
            (Ok(true), Some((status, flag))) => {
                Ending::Finished { status, clean: flag != "0" && quiet, interrupted: flag == "2" }
            }
            _ => Ending::Died,
        }
    }

    async fn finish(
        &mut self,
        ending: Ending,
        stdout: Captured,
        mut stderr: Captured,
        duration: Duration,
        spec: &JobSpec,
        nonce: &str,
    ) -> (Outcome, bool) {
        let (status, exit_code, signal, reusable) = match ending {
            // A job Worker's thread still exiting is waited for when the
            // child is taken for the next job, not here, where it would
            // hold up this job's result.
            Ending::Finished { interrupted: true, .. } => (Status::Timeout, None, None, true),
            Ending::Finished { status, clean, .. } => {
                (Status::Completed, Some(status), None, clean && !matches!(self.threads(), Threads::Dirty))
            }
            Ending::TimedOut => (Status::Timeout, None, None, false),
            Ending::Cancelled => (Status::Cancelled, None, None, false),
            Ending::OverMemory => (Status::MemoryExceeded, None, None, false),
            Ending::Died => {
                let exited = tokio::time::timeout(DRAIN_TIMEOUT, self.child.wait()).await;
                let memory_reported = stderr.strip_trailing(format!("{MEMORY_MARKER}{nonce}\n").as_bytes());
                match exited {
                    _ if memory_reported => (Status::MemoryExceeded, None, None, false),
                    Ok(Ok(exit)) => {
                        let (status, code, signal) = classify(exit, &stderr);
                        (status, code, signal, false)
                    }
                    _ => {
                        kill_group(&self.child);
                        (Status::InternalError, None, None, false)
                    }
                }
            }
        };
        (outcome(spec, status, exit_code, signal, &stdout, &stderr, duration), reusable)
    }
}
