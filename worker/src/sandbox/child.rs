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
use runbox_common::{JobSpec, Language, Outcome, Status};
use serde::Serialize;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

use super::output::{Captured, capture};
use super::{Sandbox, SandboxError, command::deno_command};

/// Written by a harness once it is booted; see `runtime/harness/protocol.mjs`.
const READY: &[u8] = b"\x06runbox-ready\n";

/// The exit status a harness uses when the program ran out of memory, and
/// also what a fatal V8 heap OOM ends with.
const MEMORY_EXIT: i32 = 133;

/// How long a child may take to boot before it counts as broken.
const BOOT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long to wait for the output pipes to close once the child is gone.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Resident memory the runtime itself may use on top of the program's
/// `memory_mb`: an idle Python child (Pyodide restored from its snapshot)
/// holds about 225 MiB, an idle JS child about 40 MiB.
const RUNTIME_RSS_ALLOWANCE_MB: u64 = 320;

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
}

/// The job frame the harness reads; see `runtime/harness/protocol.mjs`.
#[derive(Serialize)]
struct Frame<'a> {
    language: Language,
    code: &'a str,
}

enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
    OverMemory,
}

impl BootedChild {
    /// Starts a child for `language` and waits until its harness is ready.
    pub async fn boot(sandbox: &Sandbox, language: Language) -> Result<BootedChild, SandboxError> {
        let dir = private_dir("runbox-job-", sandbox)?;
        if let (Language::Python, Some(seed)) = (language, &sandbox.cache_seed) {
            copy_tree(&seed.path().join("deno"), &dir.path().join("deno"), sandbox)?;
        }
        let (child, stdin, stdout, stderr) = spawn_ready(sandbox, language, dir.path()).await?;
        Ok(BootedChild { child, stdin, stdout, stderr, dir })
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
    pub async fn run(self, spec: &JobSpec, sandbox: &Sandbox, cancel: &CancellationToken) -> Outcome {
        let BootedChild { mut child, mut stdin, stdout, stderr, dir: _dir, .. } = self;
        // The frame names the job's language: one JS child serves JS and TS.
        let frame = match serde_json::to_vec(&Frame { language: spec.language, code: &spec.code }) {
            Ok(frame) => frame,
            Err(e) => return Outcome::internal_error(format!("could not encode the job: {e}")),
        };
        let input = spec.stdin.clone().into_bytes();
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
        let out = tokio::spawn(capture(stdout, cap));
        let err = tokio::spawn(capture(stderr, cap));

        let timeout = sandbox.limits.timeout_for(spec);
        let rss_limit = (u64::from(sandbox.limits.memory_mb) + RUNTIME_RSS_ALLOWANCE_MB) * 1024 * 1024;
        let pid = child.id();
        let started = Instant::now();
        let ending = tokio::select! {
            status = child.wait() => match status {
                Ok(status) => Ending::Exited(status),
                Err(e) => return Outcome::internal_error(format!("lost track of the child: {e}")),
            },
            () = tokio::time::sleep(timeout) => Ending::TimedOut,
            () = cancel.cancelled() => Ending::Cancelled,
            () = watch_rss(pid, rss_limit) => Ending::OverMemory,
        };
        if !matches!(ending, Ending::Exited(_)) {
            kill_group(&child);
            let _ = child.wait().await;
        }
        let duration = started.elapsed();
        writer.abort();
        let stdout = drain(out).await;
        let stderr = drain(err).await;

        let (status, exit_code) = match ending {
            Ending::TimedOut => (Status::Timeout, None),
            Ending::Cancelled => (Status::Cancelled, None),
            Ending::OverMemory => (Status::MemoryExceeded, None),
            Ending::Exited(exit) => classify(exit),
        };
        Outcome {
            status,
            exit_code,
            stdout: stdout.text(),
            stderr: stderr.text(),
            stdout_truncated: stdout.truncated,
            stderr_truncated: stderr.truncated,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// Spawns a child whose private directory is `dir` and waits for READY.
async fn spawn_ready(
    sandbox: &Sandbox,
    language: Language,
    dir: &Path,
) -> Result<(Child, ChildStdin, ChildStdout, ChildStderr), SandboxError> {
    let mut child = deno_command(&sandbox.runtime, &sandbox.isolation, &sandbox.limits, language, dir)
        .spawn()
        .map_err(SandboxError::Spawn)?;
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
        let (mut child, mut stdin, _stdout, _stderr) = spawn_ready(sandbox, language, dir.path()).await?;
        let frame = serde_json::to_vec(&Frame { language, code: "0" }).map_err(std::io::Error::other)?;
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
fn give_to_child(path: &Path, sandbox: &Sandbox) -> std::io::Result<()> {
    if let Some(uid) = sandbox.isolation.uid {
        nix::unistd::chown(path, Some(uid.into()), Some(nix::unistd::Gid::from_raw(uid)))?;
    }
    Ok(())
}

/// Copies the directory tree `from` to `to`, owned by the child's uid.
fn copy_tree(from: &Path, to: &Path, sandbox: &Sandbox) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    give_to_child(to, sandbox)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target, sandbox)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
            give_to_child(&target, sandbox)?;
        }
    }
    Ok(())
}

/// Maps how the child exited to a status and the exit code the user sees.
fn classify(exit: ExitStatus) -> (Status, Option<i32>) {
    match (exit.code(), exit.signal()) {
        (Some(MEMORY_EXIT), _) => (Status::MemoryExceeded, None),
        (Some(code), _) => (Status::Completed, Some(code)),
        // V8 ends the process with a trap on a fatal out-of-memory, and the
        // kernel's OOM killer sends SIGKILL (ours only comes on timeout or
        // cancellation, which are handled before this).
        (None, Some(signal)) if signal == Signal::SIGTRAP as i32 || signal == Signal::SIGKILL as i32 => {
            (Status::MemoryExceeded, None)
        }
        (None, _) => (Status::InternalError, None),
    }
}

/// SIGKILLs the child's whole process group. The group id is the child's pid
/// (it was spawned with `process_group(0)`), and it is only called while the
/// child is not yet reaped, so the id cannot have been reused.
fn kill_group(child: &Child) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Returns once the resident memory of process `pid` passes `limit` bytes.
/// The V8 heap flag and the WebAssembly cap stop most programs first, with a
/// clean error; this catches what they do not cover, such as ArrayBuffers.
async fn watch_rss(pid: Option<u32>, limit: u64) {
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

async fn drain(task: tokio::task::JoinHandle<Captured>) -> Captured {
    match tokio::time::timeout(DRAIN_TIMEOUT, task).await {
        Ok(Ok(captured)) => captured,
        _ => Captured::default(),
    }
}
