//! A session's child: one deny-all Deno process whose interpreter lives
//! across execs, under the same flags and limits as a job's (its memory
//! cap covers the session's whole life).
//!
//! It is a shared-lane child in `session` mode (see
//! `runtime/harness/session.mjs`): execs use the same frames and end
//! markers. What a session adds is opening (from nothing or from a
//! checkpoint) and taking a checkpoint:
//!
//! - Python: a Pyodide memory snapshot of the live interpreter plus the
//!   files under its home and `/tmp`, restored into a fresh child.
//! - JavaScript: the programs the session ran, replayed in order in a fresh
//!   child ([`Restore::Replay`]); the runner keeps that log.

use std::time::Duration;

use runbox_common::{JobSpec, Language, Outcome};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use super::child::kill_group;
use super::command::ChildMode;
use super::output::capture_until;
use super::shared::{END_MARKER, Ending, Kind, SharedChild};
use super::{Sandbox, SandboxError};

/// What the harness writes before a checkpoint's length and bytes.
const CHECKPOINT_MARKER: &str = "\u{6}runbox-checkpoint:";

/// How long opening may take: restoring a large snapshot, or replaying a
/// long log.
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);

/// How long taking a snapshot and sending it may take.
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(60);

/// Stderr kept from opening or a failed checkpoint: enough for the reason.
const MESSAGE_CAP: usize = 8 * 1024;

/// What a new session child starts from.
#[derive(Debug, Clone)]
pub enum Restore {
    Fresh,
    /// A Python checkpoint, as the harness wrote it.
    Memory(Vec<u8>),
    /// The programs of a JavaScript session, to run again in order.
    Replay(Vec<String>),
}

/// Why a session child could not open or checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{0}")]
    Failed(String),
}

/// A live session child.
pub struct SessionChild {
    inner: SharedChild,
    /// Its JavaScript programs so far, for a checkpoint by replay.
    replay: Vec<String>,
}

/// The open frame: what the harness needs before the first exec.
#[derive(serde::Serialize)]
struct OpenFrame<'a> {
    op: &'static str,
    nonce: &'a str,
    checkpoint_bytes: usize,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    replay: &'a [String],
}

/// A session child booted as far as it goes before its session exists
/// (Pyodide's files read and its module compiled): what a worker keeps
/// spare, so that a new session waits only for opening.
pub struct BootedSession {
    inner: Option<SharedChild>,
}

impl BootedSession {
    pub async fn boot(sandbox: &Sandbox, language: Language) -> Result<BootedSession, SessionError> {
        if language == Language::Typescript {
            return Err(SessionError::Failed("sessions run python or javascript".into()));
        }
        let inner = SharedChild::boot(sandbox, "session", Kind::of(language), ChildMode::Session).await?;
        Ok(BootedSession { inner: Some(inner) })
    }

    /// Whether the process is still there, waiting.
    pub fn is_alive(&mut self) -> bool {
        self.inner.as_mut().is_some_and(|inner| matches!(inner.child.try_wait(), Ok(None)))
    }

    /// Opens the session from `restore`.
    pub async fn open(mut self, restore: Restore) -> Result<SessionChild, SessionError> {
        let Some(mut inner) = self.inner.take() else { return Err(died()) };
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let (memory, replay): (&[u8], Vec<String>) = match &restore {
            Restore::Fresh => (&[], Vec::new()),
            Restore::Memory(bytes) => (bytes, Vec::new()),
            Restore::Replay(programs) => (&[], programs.clone()),
        };
        let frame = OpenFrame { op: "open", nonce: &nonce, checkpoint_bytes: memory.len(), replay: &replay };
        let opened = tokio::time::timeout(OPEN_TIMEOUT, async {
            send(&mut inner, &frame, memory).await?;
            let out_marker = format!("{END_MARKER}{nonce}:").into_bytes();
            let err_marker = format!("{END_MARKER}{nonce}\n").into_bytes();
            // Replayed programs' output is dropped: only the marker matters.
            let (out, err) = tokio::join!(
                capture_until(&mut inner.stdout, 0, &out_marker),
                capture_until(&mut inner.stderr, MESSAGE_CAP, &err_marker)
            );
            match (out.1, err.1) {
                (Some(rest), Some(_)) => match inner.read_status(rest, true).await {
                    Ending::Finished { status: 0, .. } => Ok(()),
                    _ => Err(SessionError::Failed(reason(&err.0.text(), "the session did not open"))),
                },
                _ => Err(SessionError::Failed(reason(&err.0.text(), "the session's process ended while opening"))),
            }
        })
        .await;
        match opened {
            Ok(Ok(())) => Ok(SessionChild { inner, replay }),
            Ok(Err(e)) => {
                kill_group(&inner.child);
                Err(e)
            }
            Err(_) => {
                kill_group(&inner.child);
                Err(SessionError::Failed(format!("opening the session took longer than {OPEN_TIMEOUT:?}")))
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
    /// Boots a session child for `language` and opens it from `restore`.
    pub async fn open(sandbox: &Sandbox, language: Language, restore: Restore) -> Result<SessionChild, SessionError> {
        BootedSession::boot(sandbox, language).await?.open(restore).await
    }

    /// Runs one exec. Returns its outcome and whether the session lives on:
    /// false when the child was killed (hard timeout, memory, cancel) or died.
    pub async fn exec(&mut self, spec: &JobSpec, sandbox: &Sandbox, cancel: &CancellationToken) -> (Outcome, bool) {
        let (outcome, alive) = self.inner.run(spec, sandbox, cancel).await;
        if alive && self.inner.kind == Kind::Js {
            self.replay.push(spec.code.clone());
        }
        (outcome, alive)
    }

    /// The session's state as a checkpoint's bytes, before compression.
    pub async fn checkpoint(&mut self) -> Result<Vec<u8>, SessionError> {
        if self.inner.kind == Kind::Js {
            return serde_json::to_vec(&self.replay).map_err(|e| SessionError::Failed(e.to_string()));
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let frame = serde_json::json!({ "op": "checkpoint", "nonce": nonce });
        let taken = tokio::time::timeout(CHECKPOINT_TIMEOUT, async {
            send(&mut self.inner, &frame, &[]).await?;
            let marker = format!("{CHECKPOINT_MARKER}{nonce}:").into_bytes();
            let (_, rest) = capture_until(&mut self.inner.stdout, 0, &marker).await;
            let Some(mut rest) = rest else { return Err(died()) };
            // `<length>\n`, then exactly that many bytes.
            while !rest.contains(&b'\n') {
                if rest.len() > 32 {
                    return Err(died());
                }
                let mut more = [0u8; 32];
                match self.inner.stdout.read(&mut more).await {
                    Ok(0) | Err(_) => return Err(died()),
                    Ok(n) => rest.extend_from_slice(&more[..n]),
                }
            }
            let newline = rest.iter().position(|b| *b == b'\n').unwrap_or(0);
            let length: usize = String::from_utf8_lossy(&rest[..newline])
                .parse()
                .map_err(|_| SessionError::Failed("bad checkpoint header".into()))?;
            let mut bytes = rest.split_off(newline + 1);
            if bytes.len() < length {
                let have = bytes.len();
                bytes.resize(length, 0);
                self.inner.stdout.read_exact(&mut bytes[have..]).await.map_err(|_| died())?;
            }
            let tail = bytes.split_off(length.min(bytes.len()));
            let out_marker = format!("{END_MARKER}{nonce}:").into_bytes();
            let err_marker = format!("{END_MARKER}{nonce}\n").into_bytes();
            let after = async {
                // The end marker may have arrived with the bytes already.
                match find(&tail, &out_marker) {
                    Some(at) => (Default::default(), Some(tail[at + out_marker.len()..].to_vec())),
                    None => capture_until(&mut self.inner.stdout, 0, &out_marker).await,
                }
            };
            let (out, err) = tokio::join!(after, capture_until(&mut self.inner.stderr, MESSAGE_CAP, &err_marker));
            let out: (super::output::Captured, Option<Vec<u8>>) = out;
            let Some(rest) = out.1 else { return Err(died()) };
            match self.inner.read_status(rest, true).await {
                Ending::Finished { status: 0, .. } if length > 0 => Ok(bytes),
                Ending::Finished { .. } => Err(SessionError::Failed(reason(&err.0.text(), "the checkpoint failed"))),
                _ => Err(died()),
            }
        })
        .await;
        match taken {
            Ok(result) => result,
            Err(_) => Err(SessionError::Failed(format!("the checkpoint took longer than {CHECKPOINT_TIMEOUT:?}"))),
        }
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

/// Sends `frame` (JSON) and then `bytes` raw.
async fn send(inner: &mut SharedChild, frame: &impl serde::Serialize, bytes: &[u8]) -> Result<(), SessionError> {
    let frame = serde_json::to_vec(frame).map_err(|e| SessionError::Failed(e.to_string()))?;
    if inner.send(&frame, bytes).await { Ok(()) } else { Err(died()) }
}

fn died() -> SessionError {
    SessionError::Failed("the session's process stopped answering".into())
}

/// The harness's own message from `stderr`, or `fallback`.
fn reason(stderr: &str, fallback: &str) -> String {
    stderr
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("runbox: "))
        .map_or_else(|| fallback.to_owned(), str::to_owned)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
