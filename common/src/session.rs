//! Sessions: one live interpreter per session, kept on one worker, whose
//! globals, imports and in-memory files last from one exec to the next.
//!
//! Every step of a session is a signed job whose [`SessionTask`] says what
//! it asks of the session's worker. This file holds the types both sides
//! read and write: the task, the session and its checkpoints as stored,
//! and how the operations on them went; the operations themselves, and
//! the life of a session through them, are `queue::sessions`'.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Language;
use crate::config::{ConfigError, env_or};

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

/// The bounds on sessions, read from the environment once by both the api
/// and the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// `RUNBOX_SESSION_IDLE_S`: the idle timeout of a session that names none.
    pub default_idle: Duration,
    /// `RUNBOX_SESSION_MAX_IDLE_S`: the longest idle timeout one may ask for.
    pub max_idle: Duration,
    /// `RUNBOX_SESSION_LIFETIME_S`: every session ends this long after it began.
    pub lifetime: Duration,
    /// `RUNBOX_SESSIONS_PER_TOKEN`: live sessions one token may hold.
    pub per_token: u64,
    /// `RUNBOX_CHECKPOINT_TTL_S`: how long a checkpoint is kept.
    pub checkpoint_ttl: Duration,
    /// `RUNBOX_CHECKPOINT_MAX_MB`: the largest checkpoint stored, compressed.
    pub checkpoint_max_bytes: u64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            default_idle: Duration::from_secs(600),
            max_idle: Duration::from_secs(3600),
            lifetime: Duration::from_secs(6 * 3600),
            per_token: 4,
            checkpoint_ttl: Duration::from_secs(24 * 3600),
            checkpoint_max_bytes: 64 * 1024 * 1024,
        }
    }
}

impl SessionLimits {
    pub fn from_env() -> Result<SessionLimits, ConfigError> {
        let d = SessionLimits::default();
        let limits = SessionLimits {
            default_idle: Duration::from_secs(env_or("RUNBOX_SESSION_IDLE_S", d.default_idle.as_secs())?),
            max_idle: Duration::from_secs(env_or("RUNBOX_SESSION_MAX_IDLE_S", d.max_idle.as_secs())?),
            lifetime: Duration::from_secs(env_or("RUNBOX_SESSION_LIFETIME_S", d.lifetime.as_secs())?),
            per_token: env_or("RUNBOX_SESSIONS_PER_TOKEN", d.per_token)?,
            checkpoint_ttl: Duration::from_secs(env_or("RUNBOX_CHECKPOINT_TTL_S", d.checkpoint_ttl.as_secs())?),
            checkpoint_max_bytes: env_or("RUNBOX_CHECKPOINT_MAX_MB", d.checkpoint_max_bytes >> 20)? << 20,
        };
        if limits.default_idle > limits.max_idle || limits.default_idle.is_zero() {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_SESSION_IDLE_S",
                value: limits.default_idle.as_secs().to_string(),
                reason: "must be at least 1 and at most RUNBOX_SESSION_MAX_IDLE_S".into(),
            });
        }
        Ok(limits)
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
