//! Sessions: one live interpreter per session, kept on one worker, whose
//! globals, imports and in-memory files last from one exec to the next.
//!
//! Every step of a session is a signed job whose [`SessionTask`] says what
//! it asks of the session's worker. This file holds the types both sides
//! read and write: the task, the session and its checkpoints as stored,
//! and how the operations on them went; the operations themselves, and
//! the life of a session through them, are `queue::sessions`'.

use serde::{Deserialize, Serialize};

use crate::Language;

/// What a session job asks of the session's worker; carried in
/// [`crate::JobSpec::session`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTask {
    /// The session's id.
    pub id: String,
    pub op: SessionOp,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SessionOp {
    /// Boot the session's child, from `checkpoint` when given. Carries the
    /// limits the worker enforces for the session's whole life.
    Start { owner: String, checkpoint: Option<String>, idle_timeout_ms: u64, expires_at_ms: u64 },
    /// Run the job's code in the session.
    Exec,
    /// Save the session's state as checkpoint `checkpoint`.
    Checkpoint { checkpoint: String },
    /// End the session.
    Destroy,
    /// Put, read, list or delete a file under the session's home.
    File { action: FileAction },
}

/// Most bytes one file of a session's files API may hold.
pub const MAX_SESSION_FILE_BYTES: usize = 16 << 20;
/// Most bytes the regular files under a session's home may hold in all
/// for an upload to be taken (they live in the session's memory).
pub const MAX_SESSION_FILES_BYTES: u64 = 32 << 20;
/// Most regular files under a session's home for an upload to be taken.
pub const MAX_SESSION_FILES: u64 = 1000;
/// Most entries a listing carries.
pub const MAX_LISTING_ENTRIES: usize = 4096;

/// A file operation on a session's home; `path` is relative to it and
/// checked by [`crate::InputFile::check_path`] (empty for the home itself
/// in a listing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FileAction {
    /// Write the file, making its directories; `content` is base64.
    Put {
        path: String,
        content: String,
    },
    Get {
        path: String,
    },
    List {
        path: String,
    },
    /// Remove a file, or a directory with what it holds.
    Delete {
        path: String,
    },
    /// One entry: what a listing of its directory would show of it.
    Stat {
        path: String,
    },
    /// Make a directory and its parents.
    Mkdir {
        path: String,
    },
    /// Rename a file or directory to `to`, making `to`'s parents; a file
    /// there is replaced, a directory there refused.
    Move {
        path: String,
        to: String,
    },
}

impl FileAction {
    pub fn path(&self) -> &str {
        match self {
            FileAction::Put { path, .. }
            | FileAction::Get { path }
            | FileAction::List { path }
            | FileAction::Delete { path }
            | FileAction::Stat { path }
            | FileAction::Mkdir { path }
            | FileAction::Move { path, .. } => path,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            FileAction::Put { .. } => "put",
            FileAction::Get { .. } => "get",
            FileAction::List { .. } => "list",
            FileAction::Delete { .. } => "delete",
            FileAction::Stat { .. } => "stat",
            FileAction::Mkdir { .. } => "mkdir",
            FileAction::Move { .. } => "move",
        }
    }
}

/// Why a file operation was refused by the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileRefusal {
    /// Nothing at the path.
    NoFile,
    /// A directory where a file was asked for.
    NotAFile,
    /// A file where a directory was asked for (or a path through a file).
    NotADirectory,
    /// The path goes through a symbolic link, which is not followed.
    Link,
    /// The upload would take the session's files past [`MAX_SESSION_FILES_BYTES`].
    FilesFull,
    /// The upload would take the session past [`MAX_SESSION_FILES`].
    TooManyFiles,
    /// A file the session's code made past [`MAX_SESSION_FILE_BYTES`], asked for.
    TooLarge,
    /// The session's language has no files API.
    Unsupported,
    /// A directory is already there (a mkdir, or a move's destination).
    Exists,
}

impl FileRefusal {
    /// The refusal the harness named, if it is one.
    pub fn parse(code: &str) -> Option<FileRefusal> {
        serde_json::from_value(serde_json::Value::String(code.to_owned())).ok()
    }
}

/// What kind of entry a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    File,
    Directory,
    /// A symbolic link the session's code made: listed, never followed.
    Link,
}

/// One entry of a directory of a session's home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileEntry {
    /// Its name in the directory (what is not UTF-8 is replaced).
    pub name: String,
    /// Its path relative to the session's home.
    pub path: String,
    #[serde(rename = "type")]
    pub file_type: FileType,
    /// Bytes, for a file.
    pub size: u64,
    /// When it was last written, RFC 3339.
    pub modified: String,
}

/// What a file operation came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum FileResult {
    /// Put: the file holds `size` bytes now.
    Written {
        size: u64,
    },
    /// Get: the file's bytes, base64.
    Content {
        content: String,
        size: u64,
    },
    /// List: the directory's entries, by name; `truncated` past
    /// [`MAX_LISTING_ENTRIES`].
    Listing {
        entries: Vec<FileEntry>,
        truncated: bool,
    },
    Deleted,
    /// Stat: the entry.
    Entry {
        entry: FileEntry,
    },
    /// Mkdir, move.
    Done,
    Refused {
        refusal: FileRefusal,
    },
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Waiting for a worker to boot it.
    Starting,
    Idle,
    /// Running an exec or taking a checkpoint.
    Busy,
    /// Its worker died; it is being started again from its latest checkpoint.
    Restoring,
    /// Destroyed by its owner.
    Closed,
    /// Idle for longer than its idle timeout, or older than the lifetime cap.
    Expired,
    /// Its process died and there was no checkpoint to bring it back from.
    Lost,
}

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Starting => "starting",
            SessionStatus::Idle => "idle",
            SessionStatus::Busy => "busy",
            SessionStatus::Restoring => "restoring",
            SessionStatus::Closed => "closed",
            SessionStatus::Expired => "expired",
            SessionStatus::Lost => "lost",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<SessionStatus> {
        Some(match text {
            "starting" => SessionStatus::Starting,
            "idle" => SessionStatus::Idle,
            "busy" => SessionStatus::Busy,
            "restoring" => SessionStatus::Restoring,
            "closed" => SessionStatus::Closed,
            "expired" => SessionStatus::Expired,
            "lost" => SessionStatus::Lost,
            _ => return None,
        })
    }

    /// The session is over; nothing runs in it again.
    pub fn is_final(self) -> bool {
        matches!(self, SessionStatus::Closed | SessionStatus::Expired | SessionStatus::Lost)
    }
}

/// One checkpoint of a session, as listed on the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointInfo {
    pub id: String,
    pub created_at: String,
    /// Stored size, compressed.
    pub size_bytes: u64,
    /// Taking it: the snapshot (or the log) and compressing it.
    pub took_ms: u64,
    /// When Redis drops it.
    pub expires_at: String,
}

/// One session as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionRecord {
    pub id: String,
    #[serde(skip)]
    pub owner: String,
    pub language: Language,
    pub status: SessionStatus,
    /// The worker holding its process (none while it starts or restores).
    pub worker: Option<String>,
    pub created_at: String,
    /// The last exec or checkpoint, in Unix milliseconds.
    pub last_used_ms: u64,
    pub idle_timeout_s: u64,
    /// When the lifetime cap ends it, in Unix milliseconds.
    pub expires_at_ms: u64,
    pub execs: u64,
    pub checkpoints: Vec<CheckpointInfo>,
    /// Why it ended, once it has.
    pub ended_reason: Option<String>,
    /// The checkpoint it was last brought back from, if it ever was.
    pub restored_from: Option<String>,
}

impl SessionRecord {
    pub fn latest_checkpoint(&self) -> Option<&CheckpointInfo> {
        self.checkpoints.last()
    }
}

/// How sending a task to a session went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    Sent,
    /// It is running another exec or taking a checkpoint (or restoring).
    Busy,
    /// It is not on the worker the caller expected any more (or never was).
    Moved,
    /// It no longer exists, or has ended.
    Gone,
}

/// What the api should do with a session whose worker stopped answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Start it again from this checkpoint; it is now `restoring`.
    Restore(String),
    /// No checkpoint: it is now `lost`.
    Lost,
    /// Someone else changed it meanwhile; read it again.
    Changed,
}

/// A stored checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub owner: String,
    pub language: Option<Language>,
    pub session: String,
    /// Compressed, as the worker stored it.
    pub data: Vec<u8>,
}

/// What a session step that runs no program (its start, a checkpoint, its
/// destroy) came to, carried in its job's [`Outcome`](crate::Outcome) as
/// `step`. An exec answers as any job does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum StepResult {
    /// The session's process is open (a start), or has ended (a destroy).
    Done,
    /// A checkpoint was taken and stored.
    Checkpointed { checkpoint: CheckpointInfo },
    /// A file operation was done, or refused.
    File { file: FileResult },
    /// The step could not be done; why, for the session's owner.
    Failed { reason: String },
}
