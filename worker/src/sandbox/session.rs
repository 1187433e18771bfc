//! A session's child: one deny-all Deno process whose interpreter lives
//! across execs, under the same flags and limits as a job's (its memory
//! cap covers the session's whole life).
//!
//! It is a shared-lane child in `session` mode (see
//! `runtime/harness/python.mjs` and `js.mjs`): execs use the same frames, end
//! markers and reports. What a session adds is opening (from nothing or from a
//! checkpoint) and taking a checkpoint:
//!
//! - Python: a Pyodide memory snapshot of the live interpreter plus the
//!   files under its home and `/tmp`, restored into a fresh child.
//! - JavaScript: the programs the session ran, replayed in order in a fresh
//!   child ([`Restore::Replay`]); the runner keeps that log. The files in
//!   its home (a directory on the host, see `home.rs`) are saved beside
//!   it and put back once the replay is done, as they were.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use runbox_common::{
    FileAction, FileRefusal, FileResult, InputFile, JobSpec, Language, MAX_LISTING_ENTRIES, MAX_SESSION_FILE_BYTES,
    MAX_SESSION_FILES, MAX_SESSION_FILES_BYTES, Outcome, Status,
};
use tokio_util::sync::CancellationToken;

use super::child::{kill_group, kill_group_of};
use super::command::ChildMode;
use super::home::{Home, SavedFile};
use super::live::Live;
use super::shared::{Bounds, Ending, Exchange, Kind, SharedChild};
use super::{Sandbox, SandboxError};

/// How long restoring a Python checkpoint may take.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an interrupted Python exec has to end before its session's
/// process is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// How long taking a snapshot and sending it may take.
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a file operation may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(30);

/// Stderr kept from opening or a failed checkpoint: enough for the reason.
const MESSAGE_CAP: usize = 8 * 1024;

/// Why a file was refused, as the exec's stderr says it.
fn refusal_text(refusal: FileRefusal) -> String {
    match refusal {
        FileRefusal::FilesFull => format!("the session's files would pass {MAX_SESSION_FILES_BYTES} bytes"),
        FileRefusal::TooManyFiles => format!("the session would hold more than {MAX_SESSION_FILES} files"),
        FileRefusal::NotAFile => "a directory is there".into(),
        FileRefusal::NotADirectory => "a name on its path is a file".into(),
        FileRefusal::Link => "its path goes through a link".into(),
        other => format!("{other:?}"),
    }
}

/// How often a JavaScript session's home is measured against its cap.
const HOME_CHECK_EVERY: Duration = Duration::from_millis(50);

/// The watch over a JavaScript session's home, for as long as its process
/// lives: its code runs between execs too (timers, intervals).
struct HomeWatch {
    /// The home passed its cap, and the process was ended for it.
    over: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl HomeWatch {
    /// Ends the process (by its group, `pid`) once the home at `root` passes
    /// the session's files cap. Each file is capped by `RLIMIT_FSIZE` too,
    /// so what the home can pass the cap by between two looks is bounded.
    fn start(root: std::path::PathBuf, pid: Option<u32>) -> HomeWatch {
        let over = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let over = over.clone();
            async move {
                loop {
                    tokio::time::sleep(HOME_CHECK_EVERY).await;
                    if over_home_cap(&root).await {
                        over.store(true, Ordering::SeqCst);
                        kill_group_of(pid);
                        return;
                    }
                }
            }
        });
        HomeWatch { over, task }
    }
}

impl Drop for HomeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether the home at `root` is past the session's files cap, or cannot
/// be measured (a tree too deep to walk), which counts as past it.
async fn over_home_cap(root: &std::path::Path) -> bool {
    let home = Home { root: root.to_owned(), uid: None };
    match tokio::task::spawn_blocking(move || home.usage()).await {
        Ok(Ok((bytes, entries))) => bytes > MAX_SESSION_FILES_BYTES || entries > MAX_SESSION_FILES,
        _ => true,
    }
}

/// The largest checkpoint a session child may send, before compression: its
/// memory image (at most the memory cap) and its files in base64 (which live
/// in that memory too), with room to spare. Checked before anything is
/// allocated: the child is untrusted.
fn max_checkpoint_bytes(memory_mb: u32) -> usize {
    (usize::try_from(memory_mb).unwrap_or(usize::MAX) * 3 + 64) << 20
}

/// What a new session child starts from.
#[derive(Debug, Clone)]
pub enum Restore {
    Fresh,
    /// A Python checkpoint, as the harness wrote it.
    Memory(Vec<u8>),
    /// The programs of a JavaScript session, to run again in order, each
    /// under its own timeout, and the files its home then holds.
    Replay(Vec<Replayed>, Vec<SavedFile>),
}

/// Why a session child could not open or checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{0}")]
    Failed(String),
}

/// One exec of a JavaScript session's log: its program and the timeout it ran under.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Replayed {
    pub code: String,
    pub timeout_ms: u64,
}

/// A JavaScript session's checkpoint: its log and its home's files.
#[derive(serde::Serialize, serde::Deserialize)]
struct JsCheckpoint {
    replay: Vec<Entry>,
    files: Vec<SavedFile>,
}

/// One exec of a log, as checkpoints have held it.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum Entry {
    Full(Replayed),
    Code(String),
}

impl Replayed {
    /// A checkpoint's log and files: `{replay, files}`, or the older log
    /// alone, `[{code, timeout_ms}]` or a list of programs (which replay
    /// under `default_ms`).
    pub fn parse_log(bytes: &[u8], default_ms: u64) -> Result<(Vec<Replayed>, Vec<SavedFile>), serde_json::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Stored {
            Whole(JsCheckpoint),
            Log(Vec<Entry>),
        }
        let (entries, files) = match serde_json::from_slice(bytes)? {
            Stored::Whole(JsCheckpoint { replay, files }) => (replay, files),
            Stored::Log(entries) => (entries, Vec::new()),
        };
        let log = entries
            .into_iter()
            .map(|entry| match entry {
                Entry::Full(replayed) => replayed,
                Entry::Code(code) => Replayed { code, timeout_ms: default_ms },
            })
            .collect();
        Ok((log, files))
    }
}

/// A live session child.
pub struct SessionChild {
    inner: SharedChild,
    /// Its JavaScript programs so far, for a checkpoint by replay.
    replay: Vec<Replayed>,
    memory_mb: u32,
    /// The uid its child runs as, which owns what is put in a JavaScript home.
    uid: Option<u32>,
    /// A JavaScript session's watch over its home.
    watch: Option<HomeWatch>,
}

/// The open frame: what the harness needs before the first exec.
#[derive(serde::Serialize)]
struct OpenFrame<'a> {
    op: &'static str,
    nonce: &'a str,
    memory_mb: u32,
    checkpoint_bytes: usize,
    #[serde(skip_serializing_if = "<[Replayed]>::is_empty")]
    replay: &'a [Replayed],
    /// The session's token has egress rules (see `crate::egress`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    egress: bool,
}

/// A session child booted as far as it goes before its session exists
/// (Pyodide's files read and its module compiled): what a worker keeps
/// spare, so that a new session waits only for opening.
pub struct BootedSession {
    inner: Option<SharedChild>,
    memory_mb: u32,
    uid: Option<u32>,
    /// The longest a job may run: the bound of a whole replay.
    max_job: Duration,
}

impl BootedSession {
    pub async fn boot(sandbox: &Sandbox, language: Language) -> Result<BootedSession, SessionError> {
        if language == Language::Typescript {
            return Err(SessionError::Failed("sessions run python or javascript".into()));
        }
        let inner = SharedChild::boot(sandbox, Kind::of(language), ChildMode::Session).await?;
        let (memory_mb, max_job) = (sandbox.limits.memory_mb, sandbox.limits.timeouts.max);
        Ok(BootedSession { inner: Some(inner), memory_mb, uid: sandbox.isolation.uid, max_job })
    }

    /// Whether the process is still there, waiting.
    pub fn is_alive(&mut self) -> bool {
        self.inner.as_mut().is_some_and(|inner| matches!(inner.child.try_wait(), Ok(None)))
    }

    /// Opens the session from `restore`. A replay runs each exec under its
    /// own timeout (the harness ends it), and all of them under the job
    /// maximum (the runner ends it).
    pub async fn open(mut self, restore: Restore, egress: bool) -> Result<SessionChild, SessionError> {
        let Some(mut inner) = self.inner.take() else { return Err(died()) };
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let (memory, replay, deadline): (&[u8], Vec<Replayed>, Duration) = match &restore {
            Restore::Fresh => (&[], Vec::new(), RESTORE_TIMEOUT),
            Restore::Memory(bytes) => (bytes, Vec::new(), RESTORE_TIMEOUT),
            Restore::Replay(programs, _) => (&[], programs.clone(), self.max_job),
        };
        let frame = OpenFrame {
            op: "open",
            nonce: &nonce,
            memory_mb: self.memory_mb,
            checkpoint_bytes: memory.len(),
            replay: &replay,
            egress,
        };
        let bounds = Bounds {
            deadline,
            from_start: false,
            stdout_cap: 0,
            stderr_cap: MESSAGE_CAP,
            max_bytes: 0,
            memory_mb: self.memory_mb,
            job_memory_mb: self.memory_mb,
            live: Live::default(),
        };
        // Replayed programs' output is dropped: only the end matters.
        let exchange = exchange(&mut inner, &frame, memory, &nonce, &bounds).await;
        match exchange.ending {
            Ending::Finished { status: 0, .. } => {
                let watch = (inner.kind == Kind::Js).then(|| HomeWatch::start(inner.files_dir(), inner.child.id()));
                let child = SessionChild { inner, replay, memory_mb: self.memory_mb, uid: self.uid, watch };
                if let Restore::Replay(_, files) = restore {
                    // What the replayed programs wrote gives way to what the checkpoint saved.
                    let home = child.home();
                    let restored = tokio::task::spawn_blocking(move || home.restore(&files)).await;
                    if let Err(e) = restored.map_err(std::io::Error::other).and_then(|r| r) {
                        kill_group(&child.inner.child);
                        return Err(SessionError::Failed(format!("could not restore the session's files: {e}")));
                    }
                }
                Ok(child)
            }
            ending => {
                kill_group(&inner.child);
                Err(SessionError::Failed(why(&ending, &exchange.stderr.text(), "the session did not open")))
            }
        }
    }
}

impl Drop for BootedSession {
    fn drop(&mut self) {
        if let Some(inner) = &self.inner {
            kill_group(&inner.child);
        }
    }
}

impl SessionChild {
    /// Boots a session child for `language` and opens it from `restore`,
    /// without egress.
    pub async fn open(sandbox: &Sandbox, language: Language, restore: Restore) -> Result<SessionChild, SessionError> {
        BootedSession::boot(sandbox, language).await?.open(restore, false).await
    }

    /// Runs one exec. Returns its outcome and whether the session lives on:
    /// false when the child was killed (hard timeout, memory, `kill`) or
    /// died. The output its caps keep goes to `live` as it is written.
    ///
    /// `interrupt` stops the exec and keeps the session: a Python session
    /// gets SIGINT, which its harness turns into a KeyboardInterrupt in the
    /// running code (as its own timeout does), and is killed only if the
    /// exec has not ended [`INTERRUPT_GRACE`] later. A JavaScript exec
    /// cannot be stopped from outside its Worker, so it is killed at once.
    pub async fn exec(
        &mut self,
        spec: &JobSpec,
        sandbox: &Sandbox,
        kill: &CancellationToken,
        interrupt: &CancellationToken,
        live: &Live,
    ) -> (Outcome, bool) {
        // A JavaScript exec's files go in its home, where its code finds them.
        let written;
        let spec = if self.inner.kind == Kind::Js && !spec.files.is_empty() {
            if let Err(why) = self.put_files(&spec.files).await {
                // The exec's own failure (its files past the home's caps,
                // say): its code does not run, and the session is untouched.
                let stderr = format!("runbox: the exec's files were not written, so its code did not run: {why}\n");
                let refused =
                    Outcome { status: Status::Completed, exit_code: Some(1), stderr, ..Outcome::internal_error("") };
                return (refused, true);
            }
            written = JobSpec { files: Vec::new(), ..spec.clone() };
            &written
        } else {
            spec
        };
        let hard = kill.child_token();
        let pid = self.inner.child.id().filter(|_| self.inner.kind == Kind::Python);
        let escalate = tokio::spawn({
            let (interrupt, hard) = (interrupt.clone(), hard.clone());
            async move {
                interrupt.cancelled().await;
                if let Some(pid) = pid.and_then(|pid| i32::try_from(pid).ok()) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT);
                    tokio::time::sleep(INTERRUPT_GRACE).await;
                }
                hard.cancel();
            }
        });
        let (mut outcome, mut alive) = self.inner.run(spec, sandbox, &hard, live).await;
        escalate.abort();
        if let Some(watch) = &self.watch {
            // What the exec wrote since the watcher's last look counts too.
            if alive && over_home_cap(&self.inner.files_dir()).await {
                watch.over.store(true, Ordering::SeqCst);
                kill_group(&self.inner.child);
                alive = false;
            }
            if watch.over.load(Ordering::SeqCst) {
                outcome.stderr.push_str(&format!(
                    "\nrunbox: the session's files passed {MAX_SESSION_FILES_BYTES} bytes or {MAX_SESSION_FILES} \
                     entries; the session's process was ended\n"
                ));
            }
        }
        if alive && self.inner.kind == Kind::Js {
            let timeout_ms = u64::try_from(sandbox.limits.timeout_for(spec).as_millis()).unwrap_or(u64::MAX);
            self.replay.push(Replayed { code: spec.code.clone(), timeout_ms });
        }
        (outcome, alive)
    }

    /// The session's state as a checkpoint's bytes, before compression.
    pub async fn checkpoint(&mut self) -> Result<Vec<u8>, SessionError> {
        if self.inner.kind == Kind::Js {
            let home = self.home();
            let files = tokio::task::spawn_blocking(move || home.save())
                .await
                .map_err(std::io::Error::other)
                .and_then(|saved| saved)
                .map_err(|e| SessionError::Failed(format!("could not save the session's files: {e}")))?;
            let replay = self.replay.iter().cloned().map(Entry::Full).collect();
            return serde_json::to_vec(&JsCheckpoint { replay, files })
                .map_err(|e| SessionError::Failed(e.to_string()));
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let frame = serde_json::json!({ "op": "checkpoint", "nonce": nonce });
        let bounds = Bounds {
            deadline: CHECKPOINT_TIMEOUT,
            from_start: false,
            stdout_cap: 0,
            stderr_cap: MESSAGE_CAP,
            max_bytes: max_checkpoint_bytes(self.memory_mb),
            memory_mb: self.memory_mb,
            job_memory_mb: self.memory_mb,
            live: Live::default(),
        };
        let exchange = exchange(&mut self.inner, &frame, &[], &nonce, &bounds).await;
        match exchange.ending {
            Ending::Finished { status: 0, .. } if !exchange.bytes.is_empty() => Ok(exchange.bytes),
            Ending::Finished { error, .. } => Err(SessionError::Failed(error.map_or_else(
                || "the checkpoint failed".to_owned(),
                |e| format!("could not checkpoint the session: {e}"),
            ))),
            ending => {
                kill_group(&self.inner.child);
                Err(SessionError::Failed(why(&ending, &exchange.stderr.text(), "the checkpoint failed")))
            }
        }
    }

    /// Puts, reads, lists, deletes, stats, makes or moves a file under the
    /// session's home: a Python session's harness does it in Pyodide's
    /// memory, the bytes crossing the channel raw both ways; a JavaScript
    /// session's home is on the host, where the worker does it.
    pub async fn file(&mut self, action: &FileAction) -> Result<FileResult, SessionError> {
        use base64::Engine;
        // The api checked the paths; a signed job that holds others is refused here too.
        let to = match action {
            FileAction::Move { to, .. } => Some(to.as_str()),
            _ => None,
        };
        for path in std::iter::once(action.path()).chain(to) {
            // An empty path is the home itself, which only a listing or a stat names.
            let home = path.is_empty() && matches!(action, FileAction::List { .. } | FileAction::Stat { .. });
            if let (false, Err(e)) = (home, InputFile::check_path(path)) {
                return Err(SessionError::Failed(format!("refused the file operation's path: {e}")));
            }
        }
        if self.inner.kind == Kind::Js {
            let (home, action) = (self.home(), action.clone());
            return tokio::task::spawn_blocking(move || home.file(&action))
                .await
                .map_err(std::io::Error::other)
                .and_then(|done| done)
                .map_err(|e| SessionError::Failed(format!("the file operation failed: {e}")));
        }
        let content = match action {
            FileAction::Put { content, .. } => base64::engine::general_purpose::STANDARD
                .decode(content)
                .map_err(|e| SessionError::Failed(format!("the upload is not valid base64: {e}")))?,
            _ => Vec::new(),
        };
        if content.len() > MAX_SESSION_FILE_BYTES {
            return Err(SessionError::Failed("the upload is past the per-file cap".into()));
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let frame = serde_json::json!({
            "op": "file",
            "nonce": nonce,
            "action": action.name(),
            "path": action.path(),
            "to": to.unwrap_or(""),
            "size": content.len(),
            "max_file": MAX_SESSION_FILE_BYTES,
            "max_total": MAX_SESSION_FILES_BYTES,
            "max_count": MAX_SESSION_FILES,
            "max_entries": MAX_LISTING_ENTRIES,
        });
        let bounds = Bounds {
            deadline: FILE_TIMEOUT,
            from_start: false,
            stdout_cap: 0,
            stderr_cap: MESSAGE_CAP,
            max_bytes: MAX_SESSION_FILE_BYTES.max(super::listing::LISTING_LIMIT),
            memory_mb: self.memory_mb,
            job_memory_mb: self.memory_mb,
            live: Live::default(),
        };
        let exchange = exchange(&mut self.inner, &frame, &content, &nonce, &bounds).await;
        match exchange.ending {
            Ending::Finished { status: 0, .. } => match action {
                FileAction::Put { .. } => Ok(FileResult::Written { size: content.len() as u64 }),
                FileAction::Delete { .. } => Ok(FileResult::Deleted),
                FileAction::Get { .. } => {
                    let size = exchange.bytes.len() as u64;
                    let content = base64::engine::general_purpose::STANDARD.encode(&exchange.bytes);
                    Ok(FileResult::Content { content, size })
                }
                FileAction::List { path } => match super::listing::listing(&exchange.bytes, path) {
                    Some((entries, truncated)) => Ok(FileResult::Listing { entries, truncated }),
                    None => Err(SessionError::Failed("the session's listing was not one its harness writes".into())),
                },
                // A listing of the entry's directory that holds only the entry.
                FileAction::Stat { path } => {
                    let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
                    match super::listing::listing(&exchange.bytes, dir) {
                        Some((mut entries, false)) if entries.len() == 1 && entries[0].path == *path => {
                            Ok(FileResult::Entry { entry: entries.remove(0) })
                        }
                        _ => Err(SessionError::Failed("the session's entry was not one its harness writes".into())),
                    }
                }
                FileAction::Mkdir { .. } | FileAction::Move { .. } => Ok(FileResult::Done),
            },
            // A refusal names its reason; any other failure is the session's.
            Ending::Finished { error: Some(code), .. } if FileRefusal::parse(&code).is_some() => {
                Ok(FileResult::Refused { refusal: FileRefusal::parse(&code).unwrap_or(FileRefusal::NoFile) })
            }
            Ending::Finished { error, .. } => Err(SessionError::Failed(error.map_or_else(
                || "the file operation failed".to_owned(),
                |e| format!("the file operation failed: {e}"),
            ))),
            ending => {
                kill_group(&self.inner.child);
                Err(SessionError::Failed(why(&ending, &exchange.stderr.text(), "the file operation failed")))
            }
        }
    }

    /// Writes an exec's `files` in a JavaScript session's home, within its caps.
    async fn put_files(&self, files: &[InputFile]) -> Result<(), String> {
        for file in files {
            let (bytes, path, home) = (file.bytes()?, file.path.clone(), self.home());
            let done = tokio::task::spawn_blocking(move || home.put(&path, &bytes)).await.map_err(|e| e.to_string())?;
            match done.map_err(|e| e.to_string())? {
                FileResult::Written { .. } => {}
                FileResult::Refused { refusal } => {
                    return Err(format!("{:?}: {}", file.path, refusal_text(refusal)));
                }
                other => return Err(format!("unexpected result {other:?}")),
            }
        }
        Ok(())
    }

    /// A JavaScript session's home.
    fn home(&self) -> Home {
        Home { root: self.inner.files_dir(), uid: self.uid }
    }

    /// Whether the process is still there.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.inner.child.try_wait(), Ok(None))
    }

    /// Ends the child now.
    pub fn kill(&self) {
        kill_group(&self.inner.child);
    }
}

impl Drop for SessionChild {
    fn drop(&mut self) {
        kill_group(&self.inner.child);
    }
}

/// One exchange with the session's harness (see [`SharedChild::exchange`]).
async fn exchange(
    inner: &mut SharedChild,
    frame: &impl serde::Serialize,
    bytes: &[u8],
    nonce: &str,
    bounds: &Bounds,
) -> Exchange {
    let frame = serde_json::to_vec(frame).unwrap_or_default();
    inner.exchange(&frame, bytes, nonce, bounds, &CancellationToken::new()).await
}

fn died() -> SessionError {
    SessionError::Failed("the session's process stopped answering".into())
}

/// Why a step failed: the harness's reason, its own message on stderr, or `fallback`.
fn why(ending: &Ending, stderr: &str, fallback: &str) -> String {
    match ending {
        Ending::Finished { error: Some(error), .. } => error.clone(),
        Ending::TimedOut => format!("{fallback}: it took too long"),
        Ending::Broken(e) => format!("{fallback}: the session's process broke the protocol ({e})"),
        _ => stderr
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("runbox: "))
            .map_or_else(|| fallback.to_owned(), str::to_owned),
    }
}
