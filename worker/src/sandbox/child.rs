//! One single-use Deno child: boot it, hand it one program, collect the end.
//!
//! Booting and running are separate steps so that a child can be booted
//! before its job exists (the seam a warm pool uses): [`BootedChild::boot`]
//! returns once the harness has written READY, and [`BootedChild::run`]
//! consumes the child.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use runbox_common::OutputStream::{Stderr, Stdout};
use runbox_common::{
    InputFile, JobSpec, Language, MAX_RETURN_FILES, MAX_RETURN_FILES_BYTES, Outcome, ReturnFiles, Status, Verdict,
};
use serde::Serialize;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

use super::command::{ChildMode, FILES_DIR, deno_command};
use super::live::Live;
use super::output::{Captured, capture_into, capture_with_files};
use super::returned::returned_files;
use super::{Sandbox, SandboxError};
use crate::egress::Link;

/// Written by a harness once it is booted; see `runtime/harness/protocol.mjs`.
pub(super) const READY: &[u8] = b"\x06runbox-ready\n";

/// What a harness writes last on stderr, before the job's nonce, when the
/// program ran out of memory; see `runtime/harness/protocol.mjs`.
pub(super) const MEMORY_MARKER: &str = "\u{6}runbox-out-of-memory:";

/// What a harness writes on stdout, before the job's nonce, ahead of the
/// files the job asked back; see `runtime/harness/protocol.mjs`.
pub(super) const FILES_MARKER: &str = "\u{6}runbox-files:";

/// Entries of a child's DENO_DIR that Deno would fill with data the program
/// controls: web storage (`location_data`, from a Worker too, where the
/// harness cannot remove the APIs) and caches of the modules it imports
/// (`data:` and `blob:` URLs, hundreds of MB in seconds), and `gen`, where
/// it keeps what it transpiled of them (a TypeScript job that imported 150
/// `data:` modules once wrote 97 MB there). A file where Deno
/// wants a directory, and a directory where it wants a database, make every
/// write fail even for root; Deno then keeps those caches in memory, where
/// the memory cap applies.
const BLOCKED_FILES: &[&str] = &["location_data", "gen"];
const BLOCKED_DIRS: &[&str] = &["node_analysis_cache_v2"];

/// Deno's caches of compiled code and of module dependencies: blocked too,
/// except in a Python child, which gets the copies [`prime_cache`] made
/// (measured: the dependency cache alone saves about a tenth of its boot
/// CPU, on top of the code cache). Those two databases and their
/// journals are the only files such a child can grow, each up to
/// `MAX_FILE_BYTES`.
const SEEDED_CACHES: &[&str] = &["v8_code_cache_v2", "dep_analysis_cache_v2"];

/// How long a child may take to boot before it counts as broken.
pub(super) const BOOT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long to wait for the output pipes to close once the child is gone.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Resident memory the runtime itself may use on top of the program's
/// `memory_mb`: an idle Python child (Pyodide restored from its snapshot)
/// holds about 225 MiB, an idle JS child about 40 MiB.
pub(super) const RUNTIME_RSS_ALLOWANCE_MB: u64 = 320;

/// The resident set at which a job's process is killed as over its memory:
/// the worker's cap (`cap_mb`) plus what the runtime needs (`allowance_mb`),
/// or, for a job that asked for less (`job_mb`), what it asked for above
/// the process's resident set when the job was handed over (`resident`),
/// so that its cap counts what the job itself takes, as its
/// `peak_memory_bytes` does.
pub(super) fn rss_limit(cap_mb: u32, allowance_mb: u64, job_mb: u32, resident: Option<u64>) -> u64 {
    let worker = (u64::from(cap_mb) + allowance_mb) << 20;
    match resident {
        Some(resident) if job_mb < cap_mb => worker.min(resident + (u64::from(job_mb) << 20)),
        _ => worker,
    }
}

/// What the kernel counts of a process's memory, in bytes: its data
/// segment (which counts memory reserved but not yet touched, as an
/// untouched ArrayBuffer is), its resident set, and the resident set's peak.
#[derive(Debug, Clone, Copy)]
pub(super) struct MemorySample {
    data: u64,
    pub(super) resident: u64,
    pub(super) peak_resident: u64,
}

impl MemorySample {
    /// Resets the process's resident peak to its resident size now (through
    /// `clear_refs`, which needs the right to ptrace it, as its parent has),
    /// then samples: the start of a job's count.
    pub(super) fn start(pid: u32) -> Option<MemorySample> {
        let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        MemorySample::of(pid)
    }

    pub(super) fn of(pid: u32) -> Option<MemorySample> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = status.lines().find(|line| line.starts_with(name))?;
            line[name.len()..].split_whitespace().next()?.parse::<u64>().ok().map(|kb| kb * 1024)
        };
        Some(MemorySample { data: field("VmData:")?, resident: field("VmRSS:")?, peak_resident: field("VmHWM:")? })
    }
}

/// Whether a harness's out-of-memory claim holds: since `before`, the
/// process's resident peak grew by at least half of `memory_mb`, or its
/// data segment by all of it (memory reserved and never touched, as an
/// ArrayBuffer can be, counts only there; reserving that much is asking
/// for more than the cap). A program gets there only by really taking the
/// memory.
pub(super) fn confirms_out_of_memory(
    before: Option<MemorySample>,
    after: Option<MemorySample>,
    memory_mb: u32,
) -> bool {
    let (Some(before), Some(after)) = (before, after) else { return false };
    let cap = u64::from(memory_mb) * 1024 * 1024;
    after.data.saturating_sub(before.data) >= cap || after.peak_resident.saturating_sub(before.resident) >= cap / 2
}

/// A child's stderr, passed through unchanged, that fires `claim` once the
/// bytes so far end with `marker`: the harness's out-of-memory claim,
/// after which it writes nothing and waits to be killed.
struct ClaimWatch<R> {
    inner: R,
    marker: Vec<u8>,
    tail: Vec<u8>,
    claim: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<R> ClaimWatch<R> {
    fn new(inner: R, marker: Vec<u8>, claim: tokio::sync::oneshot::Sender<()>) -> ClaimWatch<R> {
        ClaimWatch { inner, marker, tail: Vec::new(), claim: Some(claim) }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for ClaimWatch<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let filled = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if polled.is_ready() {
            let this = &mut *self;
            this.tail.extend_from_slice(&buf.filled()[filled..]);
            let excess = this.tail.len().saturating_sub(this.marker.len());
            this.tail.drain(..excess);
            if this.tail == this.marker
                && let Some(claim) = this.claim.take()
            {
                let _ = claim.send(());
            }
        }
        polled
    }
}

/// How often the resident memory of a running child is checked.
const RSS_POLL: Duration = Duration::from_millis(20);

/// A child that has booted and waits for its one program.
pub struct BootedChild {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
    /// The child's private directory; removed when this is dropped.
    dir: TempDir,
    /// The child's socket to the egress proxy.
    egress: Link,
}

/// The job frame the harness reads; see `runtime/harness/protocol.mjs`.
#[derive(Serialize)]
pub(super) struct Frame<'a> {
    pub language: Language,
    pub code: &'a str,
    pub args: &'a [String],
    pub files: &'a [InputFile],
    /// Authenticates the harness's markers; the program never sees it.
    pub nonce: &'a str,
    pub memory_mb: u32,
    /// The program's stdin: a Python program's, and a shared child's, whose
    /// own stdin stays empty. A single-use JS program reads what follows the frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_files: Option<ReturnFrame<'a>>,
    /// In a session child: what to do (`exec`), and when to interrupt it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The job's token has egress rules: the harness gives it a `fetch`
    /// through the proxy (see `crate::egress`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub egress: bool,
    /// What the harness stamps on each egress request it makes for this
    /// job, by which the proxy tells the job's requests from any other's
    /// (see `egress/link.rs`). Not the nonce: a JS program in a child of
    /// its own shares its harness's realm, and could see it go by.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub egress_tag: &'a str,
}

/// What files to send back, and how many bytes at most.
#[derive(Serialize)]
pub(super) struct ReturnFrame<'a> {
    pub want: &'a ReturnFiles,
    pub max_files: usize,
    pub max_bytes: usize,
}

impl<'a> ReturnFrame<'a> {
    pub fn of(spec: &'a JobSpec) -> Option<ReturnFrame<'a>> {
        (!spec.return_files.is_none()).then_some(ReturnFrame {
            want: &spec.return_files,
            max_files: MAX_RETURN_FILES,
            max_bytes: MAX_RETURN_FILES_BYTES,
        })
    }
}

enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
    OverMemory,
    /// The harness claimed an allocation failure and holds the process.
    Claimed,
}

impl BootedChild {
    /// Starts a child for `language` and waits until its harness is ready.
    pub async fn boot(sandbox: &Sandbox, language: Language) -> Result<BootedChild, SandboxError> {
        // Copying the cache seed is blocking file-system work: not on the async threads.
        let prepare = {
            let sandbox = sandbox.clone();
            tokio::task::spawn_blocking(move || job_dir(&sandbox, language))
        };
        let dir = prepare.await.map_err(std::io::Error::other)??;
        let egress = egress_link(sandbox, dir.path())?;
        let (child, stdin, stdout, stderr) =
            spawn_ready(sandbox, language, dir.path(), ChildMode::Single, Some(egress.path())).await?;
        Ok(BootedChild { child, stdin, stdout, stderr, dir, egress })
    }

    /// The child's process id, which is also its process group id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// False once the child has exited (it should not have, before its job).
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The child's private directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Runs `spec` in this child and returns how it ended. The child is gone
    /// afterwards, whatever happened.
    pub async fn run(self, spec: &JobSpec, sandbox: &Sandbox, cancel: &CancellationToken, live: &Live) -> Outcome {
        let BootedChild { mut child, mut stdin, stdout, stderr, dir, egress } = self;
        // The api checks file paths; the worker does not trust it to.
        if let Some(Err(e)) = spec.files.iter().map(|f| InputFile::check_path(&f.path)).find(Result::is_err) {
            return Outcome::internal_error(format!("refused the job's files: {e}"));
        }
        // A JS program finds its files on disk; Python's go in the frame,
        // into Pyodide's in-memory file system.
        let on_disk = spec.language != Language::Python && !spec.files.is_empty();
        if on_disk {
            let (files, root) = (spec.files.clone(), dir.path().join(FILES_DIR));
            let written = tokio::task::spawn_blocking(move || write_files(&root, &files)).await;
            if let Err(e) = written.map_err(|e| e.to_string()).and_then(|r| r) {
                return Outcome::internal_error(format!("could not write the job's files: {e}"));
            }
        }
        let frame_files: &[InputFile] = if on_disk { &[] } else { &spec.files };
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let egress_tag = uuid::Uuid::new_v4().simple().to_string();
        let memory_mb = sandbox.limits.memory_for(spec);
        // The frame names the job's language: one JS child serves JS and TS.
        let frame = Frame {
            language: spec.language,
            code: &spec.code,
            args: &spec.args,
            files: frame_files,
            nonce: &nonce,
            memory_mb,
            stdin: (spec.language == Language::Python).then_some(spec.stdin.as_str()),
            return_files: ReturnFrame::of(spec),
            op: None,
            timeout_ms: None,
            egress: spec.egress.is_some(),
            egress_tag: &egress_tag,
        };
        egress.begin(spec.egress.as_ref(), &egress_tag);
        let frame = match serde_json::to_vec(&frame) {
            Ok(frame) => frame,
            Err(e) => return Outcome::internal_error(format!("could not encode the job: {e}")),
        };
        // A Python program's stdin travels in the frame, a JS program's after it.
        let input = if spec.language == Language::Python { Vec::new() } else { spec.stdin.clone().into_bytes() };
        // A program need not read its stdin; a write into a closed or full
        // pipe must not hold up the run, so it happens on its own task.
        let writer = tokio::spawn(async move {
            let header = format!("{}\n", frame.len());
            for part in [header.as_bytes(), &frame, &input] {
                if stdin.write_all(part).await.is_err() {
                    return;
                }
            }
            let _ = stdin.shutdown().await;
        });
        let cap = sandbox.limits.max_output_bytes;
        let files_marker = ReturnFrame::of(spec).map(|_| format!("{FILES_MARKER}{nonce}\n").into_bytes());
        let memory_marker = format!("{MEMORY_MARKER}{nonce}\n").into_bytes();
        let (claim, claimed) = tokio::sync::oneshot::channel();
        let out = tokio::spawn(capture_with_files(stdout, Captured::live(live, Stdout, 0), cap, files_marker));
        // The harness's memory claim ends stderr: held back from `live` until it is taken off.
        let live_err = Captured::live(live, Stderr, memory_marker.len());
        let err = tokio::spawn(capture_into(ClaimWatch::new(stderr, memory_marker.clone(), claim), live_err, cap));

        let timeout = sandbox.limits.timeout_for(spec);
        let pid = child.id();
        let before = pid.and_then(MemorySample::start);
        let worker_cap = sandbox.limits.memory_mb;
        let rss_limit = rss_limit(worker_cap, RUNTIME_RSS_ALLOWANCE_MB, memory_mb, before.map(|b| b.resident));
        let cpu_before = pid.and_then(cpu_time);
        let started = Instant::now();
        // The child's end is awaited without reaping it, so that its rusage
        // can be read first (see `exited`); tokio reaps it afterwards.
        let mut exited = std::pin::pin!(exited(pid));
        let (ending, mut rusage) = tokio::select! {
            rusage = &mut exited => (None, rusage),
            () = tokio::time::sleep(timeout) => (Some(Ending::TimedOut), None),
            () = cancel.cancelled() => (Some(Ending::Cancelled), None),
            () = watch_rss(pid, rss_limit) => (Some(Ending::OverMemory), None),
            Ok(()) = claimed => (Some(Ending::Claimed), None),
        };
        // A claim is checked against the kernel's count, while the harness holds the memory.
        let confirmed = matches!(ending, Some(Ending::Claimed))
            && confirms_out_of_memory(before, pid.and_then(MemorySample::of), memory_mb);
        let ending = match ending {
            Some(ending) => {
                kill_group(&child);
                rusage = exited.await;
                let _ = child.wait().await;
                ending
            }
            None => match child.wait().await {
                Ok(status) => Ending::Exited(status),
                Err(e) => return Outcome::internal_error(format!("lost track of the child: {e}")),
            },
        };
        let duration = started.elapsed();
        let network = egress.end();
        let usage = Usage::of_single_use(rusage, cpu_before, before.map(|sample| sample.resident));
        writer.abort();
        let (stdout, files) = drain(out).await;
        let mut stderr = drain(err).await;

        let (status, exit_code, signal) = match ending {
            Ending::TimedOut => (Status::Timeout, None, None),
            Ending::Cancelled => (Status::Cancelled, None, None),
            Ending::OverMemory => (Status::MemoryExceeded, None, None),
            Ending::Claimed => {
                stderr.strip_trailing(&memory_marker);
                // A claim the numbers do not bear out is the program's own
                // error ending: the harness exits 1 on an uncaught error.
                if confirmed { (Status::MemoryExceeded, None, None) } else { (Status::Completed, Some(1), None) }
            }
            Ending::Exited(exit) => classify(exit, &stderr),
        };
        stderr.end_live();
        // Removing a directory is blocking file-system work: not on the async threads.
        let _ = tokio::task::spawn_blocking(move || drop(dir)).await;
        let mut outcome = outcome(spec, status, exit_code, signal, &stdout, &stderr, duration);
        hold_to_own_cap(&mut outcome, memory_mb, worker_cap, usage.peak_memory_bytes);
        usage.apply(&mut outcome);
        if let Some(section) = files {
            (outcome.files, outcome.files_truncated) = returned_files(&section);
        }
        outcome.network = network;
        outcome
    }
}

/// What runbox measured of one job's use of CPU and memory (see
/// docs/api.md, "What each lane measures").
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Usage {
    pub cpu_ms: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    /// The process's resident peak since the job started (VmHWM, reset
    /// then), where the lane measured it.
    pub peak_resident: Option<u64>,
}

impl Usage {
    /// A single-use child's: the CPU its rusage counts past `cpu_before`
    /// (what it had used when the job was handed over, booting), and how
    /// far its rusage's peak resident set rose above `resident_before`, the
    /// booted runtime's resident set then, as a session exec is charged.
    /// The peak was reset when the job began (see [`MemorySample::start`]),
    /// so the boot's own peak is not in it.
    fn of_single_use(rusage: Option<ExitUsage>, cpu_before: Option<Duration>, resident_before: Option<u64>) -> Usage {
        let Some(rusage) = rusage else { return Usage::default() };
        Usage {
            cpu_ms: cpu_before.map(|before| millis(rusage.cpu.saturating_sub(before))),
            peak_memory_bytes: resident_before.map(|before| rusage.max_rss.saturating_sub(before)),
            peak_resident: None,
        }
    }

    /// A job's in a long-lived child, from the samples taken when it
    /// started: the CPU the process used since (every thread's: the job's
    /// and the harness's work on it), and the larger of how far its
    /// resident set rose above where it was (the kernel's count, which no
    /// program can change) and `reported`, what the harness measured of the
    /// job's own instance and realm where it can (a Python job of the
    /// shared lane: see `runtime/harness/python.mjs`).
    /// The CPU count ends at `cpu_ran`, where the harness said the program
    /// ended, or else now.
    pub(super) fn since(
        pid: Option<u32>,
        before: Option<MemorySample>,
        cpu_before: Option<Duration>,
        cpu_ran: Option<Duration>,
        reported: Option<u64>,
    ) -> Usage {
        let cpu_end = cpu_ran.or_else(|| pid.and_then(cpu_time));
        let cpu_ms = cpu_end.zip(cpu_before).map(|(end, start)| millis(end.saturating_sub(start)));
        let now = pid.and_then(MemorySample::of).filter(|_| before.is_some());
        let grown = now.zip(before).map(|(now, then)| now.peak_resident.saturating_sub(then.resident));
        let peak_memory_bytes = match (grown, reported) {
            (Some(grown), Some(reported)) => Some(grown.max(reported)),
            (grown, reported) => grown.or(reported),
        };
        Usage { cpu_ms, peak_memory_bytes, peak_resident: now.map(|now| now.peak_resident) }
    }

    pub(super) fn apply(self, outcome: &mut Outcome) {
        outcome.cpu_ms = self.cpu_ms;
        outcome.peak_memory_bytes = self.peak_memory_bytes;
    }
}

/// A job that asked for less memory (`job_mb`) than the worker's cap and
/// whose measured `peak` (what it grew by) went past it ended over its
/// cap, even when it was too quick for the resident-set watch to see.
pub(super) fn hold_to_own_cap(outcome: &mut Outcome, job_mb: u32, cap_mb: u32, peak: Option<u64>) {
    let over = peak.is_some_and(|peak| peak > u64::from(job_mb) << 20);
    if job_mb < cap_mb && over && outcome.status == Status::Completed {
        outcome.status = Status::MemoryExceeded;
        outcome.exit_code = None;
        outcome.signal = None;
        if outcome.verdict.is_some() {
            outcome.verdict = Some(Verdict::MemoryExceeded);
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The CPU time, user and system, of every thread of process `pid` so far
/// (`/proc/<pid>/stat`, which a zombie still has).
pub(super) fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields are counted after the command name, which may hold spaces and
    // parentheses: utime and stime are the 14th and 15th.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()?.checked_add(fields.get(12)?.parse::<u64>().ok()?)?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().filter(|hz| *hz > 0).unwrap_or(100);
    Some(Duration::from_millis(ticks.saturating_mul(1000) / hz as u64))
}

/// What the kernel counted of an exited child, over its whole life.
#[derive(Debug, Clone, Copy)]
struct ExitUsage {
    cpu: Duration,
    max_rss: u64,
}

/// Waits until child `pid` has exited, without reaping it, and returns its
/// rusage: `waitid(WEXITED | WNOWAIT)`, whose rusage argument the kernel
/// fills for a zombie (glibc's wrapper has none, hence the raw call).
///
/// Why not the other ways: `/proc/<pid>/status` loses VmHWM the moment
/// the child exits, before it can be read, and polling it misses whatever
/// grew after the last poll; `getrusage(RUSAGE_CHILDREN)` mixes every
/// child of the worker; and a `wait4` would reap the child behind tokio's
/// back, whose `kill_on_drop` could then signal a reused pid. Not reaping
/// leaves that to tokio, as before. None when `pid` is not a child to wait
/// for (already reaped).
async fn exited(pid: Option<u32>) -> Option<ExitUsage> {
    let pid = pid?;
    tokio::task::spawn_blocking(move || wait_exited(pid)).await.ok().flatten()
}

#[allow(unsafe_code)]
fn wait_exited(pid: u32) -> Option<ExitUsage> {
    use nix::libc;
    loop {
        // SAFETY: both are plain C structs, for which all zero bytes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(P_PID, pid, infop, options, rusage) with pointers to
        // the two locals above, which outlive the call; WNOWAIT leaves the
        // child unreaped, so its pid stays tokio's to reap.
        let done = unsafe {
            libc::syscall(
                libc::SYS_waitid,
                libc::P_PID,
                libc::id_t::from(pid),
                &mut info as *mut libc::siginfo_t,
                libc::WEXITED | libc::WNOWAIT,
                &mut usage as *mut libc::rusage,
            )
        };
        if done == 0 {
            let time = |t: libc::timeval| {
                Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
                    + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
            };
            return Some(ExitUsage {
                cpu: time(usage.ru_utime) + time(usage.ru_stime),
                // Linux counts it in KiB.
                max_rss: u64::try_from(usage.ru_maxrss).unwrap_or(0).saturating_mul(1024),
            });
        }
        if nix::errno::Errno::last() != nix::errno::Errno::EINTR {
            return None;
        }
    }
}

/// The outcome of `spec`'s run, with its verdict.
pub(super) fn outcome(
    spec: &JobSpec,
    status: Status,
    exit_code: Option<i32>,
    signal: Option<i32>,
    stdout: &Captured,
    stderr: &Captured,
    duration: Duration,
) -> Outcome {
    let mut outcome = Outcome {
        status,
        exit_code,
        signal,
        stdout: stdout.text(),
        stderr: stderr.text(),
        stdout_truncated: stdout.truncated,
        stderr_truncated: stderr.truncated,
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        verdict: None,
        files: Vec::new(),
        files_truncated: false,
        warm: false,
        // Set by the lane, which measured it (see [`Usage`]).
        cpu_ms: None,
        peak_memory_bytes: None,
        step: None,
        network: Vec::new(),
    };
    // On everything the program wrote, not only the bytes kept.
    outcome.verdict = spec.verdict_with(&outcome, |compare, expected| stdout.matches(compare, expected));
    outcome
}

/// The egress proxy's socket for a child whose private directory is `dir`.
pub(super) fn egress_link(sandbox: &Sandbox, dir: &Path) -> std::io::Result<Link> {
    let link = Link::listen(sandbox.egress.clone(), dir)?;
    give_to_child(link.path(), sandbox)?;
    Ok(link)
}

/// Spawns a child whose private directory is `dir` and waits for READY.
pub(super) async fn spawn_ready(
    sandbox: &Sandbox,
    language: Language,
    dir: &Path,
    mode: ChildMode,
    egress: Option<&Path>,
) -> Result<(Child, ChildStdin, ChildStdout, ChildStderr), SandboxError> {
    let mut command = deno_command(&sandbox.runtime, &sandbox.isolation, &sandbox.limits, language, dir, mode, egress);
    let mut child = command.spawn().map_err(SandboxError::Spawn)?;
    let (Some(stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(SandboxError::Boot("child has no stdio pipes".into()));
    };
    let mut marker = [0u8; READY.len()];
    let ready = tokio::time::timeout(BOOT_TIMEOUT, stdout.read_exact(&mut marker)).await;
    if !matches!(ready, Ok(Ok(_))) || marker != READY {
        kill_group(&child);
        let _ = child.wait().await;
        let mut message = Vec::new();
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, (&mut stderr).take(8192).read_to_end(&mut message)).await;
        return Err(SandboxError::Boot(String::from_utf8_lossy(&message).trim().to_owned()));
    }
    Ok((child, stdin, stdout, stderr))
}

/// Makes a seed for each Python child's DENO_DIR: one trusted run, with no
/// user code, leaves Deno's V8 code cache of Pyodide's JavaScript behind,
/// and a child that starts from a copy boots with about a quarter less CPU.
/// Each child gets its own copy, so nothing a job writes there reaches
/// another. JS children skip it: copying would cost more than it saves.
pub async fn prime_cache(sandbox: &Sandbox) -> Result<TempDir, SandboxError> {
    let dir = private_dir("runbox-cache-", sandbox)?;
    for language in [Language::Python] {
        let (mut child, mut stdin, _stdout, _stderr) =
            spawn_ready(sandbox, language, dir.path(), ChildMode::Single, None).await?;
        let frame = Frame {
            language,
            code: "0",
            args: &[],
            files: &[],
            nonce: "",
            memory_mb: sandbox.limits.memory_mb,
            stdin: None,
            return_files: None,
            op: None,
            timeout_ms: None,
            egress: false,
            egress_tag: "",
        };
        let frame = serde_json::to_vec(&frame).map_err(std::io::Error::other)?;
        stdin.write_all(format!("{}\n", frame.len()).as_bytes()).await?;
        stdin.write_all(&frame).await?;
        drop(stdin);
        let status = tokio::time::timeout(BOOT_TIMEOUT, child.wait()).await;
        if !matches!(status, Ok(Ok(s)) if s.success()) {
            kill_group(&child);
            return Err(SandboxError::Boot(format!("priming the {language} cache failed: {status:?}")));
        }
    }
    Ok(dir)
}

/// A new job directory for a child of `language`: its `files` directory
/// (JS) and its DENO_DIR.
pub(super) fn job_dir(sandbox: &Sandbox, language: Language) -> std::io::Result<TempDir> {
    let dir = private_dir("runbox-job-", sandbox)?;
    if language != Language::Python {
        // Made by the worker, so a child running as another uid cannot write in it.
        std::fs::create_dir(dir.path().join(FILES_DIR))?;
    }
    let seed = sandbox.cache_seed.as_ref().filter(|_| language == Language::Python);
    deno_dir(&dir.path().join("deno"), seed.map(|seed| seed.path().join("deno")).as_deref(), sandbox)?;
    Ok(dir)
}

/// A new 0700 directory under the work dir, owned by the child's uid.
fn private_dir(prefix: &str, sandbox: &Sandbox) -> std::io::Result<TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&sandbox.work_dir)?;
    give_to_child(dir.path(), sandbox)?;
    Ok(dir)
}

/// Hands `path` to the uid children run as, if they run as another.
pub(super) fn give_to_child(path: &Path, sandbox: &Sandbox) -> std::io::Result<()> {
    if let Some(uid) = sandbox.isolation.uid {
        nix::unistd::chown(path, Some(uid.into()), Some(nix::unistd::Gid::from_raw(uid)))?;
    }
    Ok(())
}

/// Writes `files` (their paths already checked) under `root`, read-only.
fn write_files(root: &Path, files: &[InputFile]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for file in files {
        let bytes = file.bytes()?;
        let path = root.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", file.path))?;
        }
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", file.path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Makes a child's DENO_DIR at `path`: the primed code cache from `seed`,
/// if given, and every other place Deno would store what a program controls
/// blocked (see [`BLOCKED_FILES`]).
fn deno_dir(path: &Path, seed: Option<&Path>, sandbox: &Sandbox) -> std::io::Result<()> {
    std::fs::create_dir(path)?;
    give_to_child(path, sandbox)?;
    let mut blocked_dirs = BLOCKED_DIRS.to_vec();
    match seed {
        Some(seed) => {
            for entry in std::fs::read_dir(seed)? {
                let entry = entry?;
                let name = entry.file_name();
                let seeded = SEEDED_CACHES.iter().any(|cache| name.to_string_lossy().starts_with(cache));
                if seeded && entry.file_type()?.is_file() {
                    let target = path.join(&name);
                    std::fs::copy(entry.path(), &target)?;
                    give_to_child(&target, sandbox)?;
                }
            }
        }
        None => blocked_dirs.extend(SEEDED_CACHES),
    }
    for name in BLOCKED_FILES {
        std::fs::File::create(path.join(name))?;
    }
    for name in blocked_dirs {
        std::fs::create_dir(path.join(name))?;
    }
    Ok(())
}

/// Maps how the child ended by itself to a status, the exit code and the
/// signal the user sees. Runbox's own kills (timeout, memory watchdog,
/// cancellation) are handled before this, so a signal here came from the
/// program or from the host: the program can signal its own process.
pub(super) fn classify(exit: ExitStatus, stderr: &Captured) -> (Status, Option<i32>, Option<i32>) {
    match (exit.code(), exit.signal()) {
        (Some(code), _) => (Status::Completed, Some(code), None),
        // The child ignores SIGTRAP (see `command.rs`), so this death is a
        // trap V8 itself raised on a fatal error, here its heap limit.
        (None, Some(signal)) if signal == Signal::SIGTRAP as i32 && stderr.tail_mentions("out of memory") => {
            (Status::MemoryExceeded, None, None)
        }
        (None, Some(signal)) => (Status::Completed, None, Some(signal)),
        (None, None) => (Status::InternalError, None, None),
    }
}

/// SIGKILLs the child's whole process group. The group id is the child's pid
/// (it was spawned with `process_group(0)`), and it is only called while the
/// child is not yet reaped, so the id cannot have been reused.
pub(super) fn kill_group(child: &Child) {
    kill_group_of(child.id());
}

/// [`kill_group`] by the child's pid, for a task that does not hold the
/// child; the same rule holds: only while the child is not yet reaped.
pub(super) fn kill_group_of(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|id| i32::try_from(id).ok()) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Returns once the resident memory of process `pid` passes `limit` bytes.
/// The V8 heap flag and the WebAssembly cap stop most programs first, with a
/// clean error; this catches what they do not cover, such as ArrayBuffers.
pub(super) async fn watch_rss(pid: Option<u32>, limit: u64) {
    let Some(pid) = pid else { return std::future::pending().await };
    let path = format!("/proc/{pid}/statm");
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok().flatten().map_or(4096, |p| p as u64);
    loop {
        tokio::time::sleep(RSS_POLL).await;
        let Ok(statm) = tokio::fs::read_to_string(&path).await else { continue };
        let resident_pages = statm.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        if resident_pages * page > limit {
            return;
        }
    }
}

async fn drain<T: Default>(task: tokio::task::JoinHandle<T>) -> T {
    match tokio::time::timeout(DRAIN_TIMEOUT, task).await {
        Ok(Ok(captured)) => captured,
        _ => T::default(),
    }
}

#[cfg(test)]
mod tests {
    //! How [`outcome`] judges what the capture kept.

    use runbox_common::Compare;

    use super::super::output::{capture, capture_until};
    use super::*;

    /// The verdict the worker gives a clean exit that wrote `stdout`.
    fn judged(stdout: &Captured, expected: &str, compare: Compare) -> Option<runbox_common::Verdict> {
        let mut spec = runbox_common::JobSpec::new(runbox_common::Language::Python, "");
        (spec.expected_stdout, spec.compare) = (Some(expected.into()), compare);
        let status = runbox_common::Status::Completed;
        let outcome =
            super::outcome(&spec, status, Some(0), None, stdout, &Captured::default(), std::time::Duration::ZERO);
        assert_eq!(outcome.stdout_truncated, stdout.truncated);
        outcome.verdict
    }

    #[tokio::test]
    async fn a_flood_past_the_cap_is_judged_on_all_of_it() {
        use runbox_common::Verdict::{Accepted, WrongAnswer};
        const CAP: usize = 1024 * 1024;
        // ok, newlines up to the 1 MiB cap, then what the kept bytes hide.
        let mut flood = b"ok".to_vec();
        flood.resize(CAP, b'\n');
        let kept = capture(&flood[..], CAP).await;
        assert_eq!((kept.truncated, judged(&kept, "ok\n", Compare::Trim)), (false, Some(Accepted)));
        flood.extend_from_slice(b"WRONG EXTRA OUTPUT");
        let got = capture(&flood[..], CAP).await;
        assert_eq!((got.bytes.len(), got.truncated), (CAP, true));
        assert_eq!(judged(&got, "ok\n", Compare::Trim), Some(WrongAnswer));
        // Exactly a MiB of A expected, and one B more.
        let expected = "A".repeat(CAP);
        let mut more = expected.clone().into_bytes();
        more.push(b'B');
        let got = capture(&more[..], CAP).await;
        assert_eq!((got.bytes.as_slice(), got.truncated), (expected.as_bytes(), true));
        assert_eq!(judged(&got, &expected, Compare::Exact), Some(WrongAnswer));
        assert_eq!(judged(&capture(expected.as_bytes(), CAP).await, &expected, Compare::Exact), Some(Accepted));
        // Past the cap and still matching: accepted, and still truncated.
        let mut padded = expected.clone().into_bytes();
        padded.extend_from_slice(&b"  \n".repeat(CAP));
        let got = capture(&padded[..], CAP).await;
        assert!(got.truncated);
        assert_eq!(judged(&got, &expected, Compare::Trim), Some(Accepted));
        assert_eq!(judged(&got, &expected, Compare::Exact), Some(WrongAnswer));
    }

    #[tokio::test]
    async fn a_shared_stream_is_judged_up_to_its_marker_whatever_the_reads() {
        use runbox_common::Verdict::{Accepted, WrongAnswer};
        let (mut writer, mut reader) = tokio::io::duplex(64);
        let sender = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // 1, blank lines of spaces and U+3000, then 2 past a cap of
            // 100, in reads that split characters and the marker.
            let mut stream = "1".to_owned() + &" \n\u{3000}".repeat(100) + "2\n";
            stream.push_str("<MARK>next job");
            for part in stream.as_bytes().chunks(7) {
                writer.write_all(part).await.expect("write");
            }
        });
        let (got, rest) = capture_until(&mut reader, 100, b"<MARK>").await;
        sender.await.expect("sender");
        assert!(got.truncated && rest.is_some_and(|rest| b"next job".starts_with(&rest)), "{got:?}");
        let expected = "1".to_owned() + &"\n\u{3000}".repeat(100) + "2";
        assert_eq!(judged(&got, &expected, Compare::Trim), Some(Accepted));
        assert_eq!(judged(&got, "1\n2", Compare::Trim), Some(WrongAnswer));
        assert_eq!(judged(&got, "1", Compare::Trim), Some(WrongAnswer));
    }
}
