//! Sessions: one live interpreter per session, kept on one worker, whose
//! globals, imports and in-memory files last from one exec to the next.
//!
//! Every step of a session is a signed job, so the worker trusts a session
//! exactly as far as it trusts a job:
//!
//! - **start** goes through the ordinary queue (fair turns, backpressure,
//!   takeover). The worker that claims it boots the session's child,
//!   restores a checkpoint if asked, marks the session `idle` on itself
//!   ([`Queue::session_ready`]) and keeps one slot for as long as the
//!   session lives.
//! - **exec**, **checkpoint** and **destroy** go to that worker alone: the
//!   api writes the job hash and pushes its id onto the worker's inbox list
//!   in one script ([`Queue::send_to_session`]), which also takes the
//!   session from `idle` to `busy`, so a second exec at the same time is
//!   refused rather than queued.
//! - The worker marks the session `idle` again *before* it writes the
//!   exec's result, so a client that has the result can always exec again.
//!
//! A worker that dies leaves its sessions pointing at it; the api notices on
//! the next call ([`Queue::recover_session`]) and starts the session again
//! elsewhere from its latest checkpoint, or ends it as `lost`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{AsyncCommands, Script};
use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, env_or, millis};
use crate::{Claimed, Language, Queue, QueueError};

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

    fn parse(text: &str) -> Option<SessionStatus> {
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

// The scripts are files under `lua/` (see `queue.rs`), joined with their
// preludes at compile time.
static CREATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/prefix.lua"),
        include_str!("lua/now_ms.lua"),
        include_str!("lua/session_prune.lua"),
        include_str!("lua/session_create.lua"),
    ))
});
static READY_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/now_ms.lua"), include_str!("lua/session_ready.lua"))));
static SEND_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/now_ms.lua"), include_str!("lua/session_send.lua"))));
static IDLE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/now_ms.lua"), include_str!("lua/session_idle.lua"))));
static END_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/session_end.lua")));
static RECOVER_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/prefix.lua"), include_str!("lua/session_recover.lua"))));
static STORE_CHECKPOINT_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/store_checkpoint.lua")));

/// A stored checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub owner: String,
    pub language: Option<Language>,
    pub session: String,
    /// Compressed, as the worker stored it.
    pub data: Vec<u8>,
}

impl Queue {
    /// Creates session `id` of `owner`, `starting`, unless the owner already
    /// holds `per_token` live sessions (0: no cap). False when over the cap.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_session(
        &self,
        id: &str,
        owner: &str,
        language: Language,
        idle_timeout: Duration,
        expires_at_ms: u64,
        created_at: &str,
        per_token: u64,
        ttl: Duration,
    ) -> Result<bool, QueueError> {
        let created: i64 = CREATE_SCRIPT
            .key(self.keys.session(id))
            .key(self.keys.owner_sessions(owner))
            .arg(owner)
            .arg(language.as_str())
            .arg(millis(idle_timeout))
            .arg(expires_at_ms)
            .arg(created_at)
            .arg(per_token)
            .arg(ttl.as_secs().max(1))
            .arg(&self.keys.prefix)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(created == 1)
    }

    /// Reads session `id`, or None if it never existed or has expired.
    pub async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, QueueError> {
        let fields: std::collections::HashMap<String, String> =
            self.conn.clone().hgetall(self.keys.session(id)).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let field = |name: &str| fields.get(name).cloned().filter(|v| !v.is_empty());
        let number = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let bad = |what: &str| QueueError::Protocol(format!("session {id}: {what}"));
        Ok(Some(SessionRecord {
            id: id.to_owned(),
            owner: field("owner").unwrap_or_default(),
            language: field("language").and_then(|l| l.parse().ok()).ok_or_else(|| bad("no language"))?,
            status: field("status").as_deref().and_then(SessionStatus::parse).ok_or_else(|| bad("bad status"))?,
            worker: field("worker"),
            created_at: field("created_at").unwrap_or_default(),
            last_used_ms: number("last_used_ms"),
            idle_timeout_s: number("idle_timeout_ms") / 1000,
            expires_at_ms: number("expires_at_ms"),
            execs: number("execs"),
            checkpoints: field("checkpoints").and_then(|c| serde_json::from_str(&c).ok()).unwrap_or_default(),
            ended_reason: field("ended_reason"),
            restored_from: field("restored_from"),
        }))
    }

    /// The live sessions of `owner`.
    pub async fn owner_sessions(&self, owner: &str) -> Result<Vec<SessionRecord>, QueueError> {
        let ids: Vec<String> = self.conn.clone().smembers(self.keys.owner_sessions(owner)).await?;
        let mut sessions = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(session) = self.get_session(&id).await?
                && !session.status.is_final()
            {
                sessions.push(session);
            }
        }
        sessions.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(sessions)
    }

    /// Marks session `id` idle on `worker`, once its child is up. False when
    /// it was not waiting for one (ended, or another worker got there first).
    pub async fn session_ready(&self, id: &str, worker: &str, restored_from: Option<&str>) -> Result<bool, QueueError> {
        let ready: i64 = READY_SCRIPT
            .key(self.keys.session(id))
            .arg(worker)
            .arg(restored_from.unwrap_or(""))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(ready == 1)
    }

    /// Writes job `job_id` (signed like any job) and hands it to the worker
    /// holding session `id`, which must be `worker`. With `needs_idle`, the
    /// session goes from idle to busy, or the task is refused.
    #[allow(clippy::too_many_arguments)]
    pub async fn send_to_session(
        &self,
        id: &str,
        worker: &str,
        job_id: &str,
        owner: &str,
        language: Language,
        payload: &str,
        signature: &str,
        created_at: &str,
        needs_idle: bool,
    ) -> Result<Sent, QueueError> {
        let reply: String = SEND_SCRIPT
            .key(self.keys.session(id))
            .key(self.keys.job(job_id))
            .key(self.keys.inbox(worker))
            .arg(worker)
            .arg(job_id)
            .arg(owner)
            .arg(language.as_str())
            .arg(payload)
            .arg(signature)
            .arg(created_at)
            .arg(if needs_idle { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match reply.as_str() {
            "sent" => Sent::Sent,
            "busy" => Sent::Busy,
            "moved" => Sent::Moved,
            _ => Sent::Gone,
        })
    }

    /// Waits up to the blocking connection's block time for the next task
    /// sent to `worker`'s sessions; returns its job id.
    pub async fn next_session_task(&self, worker: &str, block: Duration) -> Result<Option<String>, QueueError> {
        let popped: Option<(String, String)> =
            self.conn.clone().brpop(self.keys.inbox(worker), block.as_secs_f64()).await?;
        Ok(popped.map(|(_, id)| id))
    }

    /// Session job `id` as a claimed entry, ready for [`Queue::start`] and
    /// [`Queue::finish`]: it has no stream entry, so those find nothing to
    /// acknowledge. None when its hash is gone.
    pub async fn claim_session_task(&self, id: &str) -> Result<Option<Claimed>, QueueError> {
        let (payload, signature): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(self.keys.job(id))
            .arg(&["payload", "sig"])
            .query_async(&mut self.conn.clone())
            .await?;
        let (Some(payload), Some(signature)) = (payload, signature) else { return Ok(None) };
        Ok(Some(Claimed {
            stream: self.keys.session_tasks(),
            entry: format!("{}-0", crate::now_unix_ms()),
            id: id.to_owned(),
            payload,
            signature,
            deliveries: 1,
        }))
    }

    /// Busy → idle on `worker`, after a task that ran `execs` programs and
    /// during which the session may have been `restored_from` a checkpoint.
    pub async fn session_idle(
        &self,
        id: &str,
        worker: &str,
        execs: u64,
        restored_from: Option<&str>,
    ) -> Result<(), QueueError> {
        let _: i64 = IDLE_SCRIPT
            .key(self.keys.session(id))
            .arg(worker)
            .arg(execs)
            .arg(restored_from.unwrap_or(""))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Ends session `id` of `owner` with `status` (closed, expired or lost)
    /// and `reason`, unless it has ended already. With `worker`, only if
    /// that worker holds it. True when this call ended it.
    pub async fn end_session(
        &self,
        id: &str,
        owner: &str,
        status: SessionStatus,
        reason: &str,
        ttl: Duration,
        worker: Option<&str>,
    ) -> Result<bool, QueueError> {
        let ended: i64 = END_SCRIPT
            .key(self.keys.session(id))
            .key(self.keys.owner_sessions(owner))
            .arg(status.as_str())
            .arg(reason)
            .arg(ttl.as_secs().max(1))
            .arg(worker.unwrap_or(""))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(ended == 1)
    }

    /// For a session whose worker `dead` stopped answering: marks it
    /// `restoring` from its latest checkpoint still stored, or `lost`.
    pub async fn recover_session(
        &self,
        id: &str,
        owner: &str,
        dead: &str,
        ttl: Duration,
    ) -> Result<Recovery, QueueError> {
        let reply: String = RECOVER_SCRIPT
            .key(self.keys.session(id))
            .key(self.keys.owner_sessions(owner))
            .arg(dead)
            .arg(ttl.as_secs().max(1))
            .arg(&self.keys.prefix)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match reply.strip_prefix("restore:") {
            Some(checkpoint) => Recovery::Restore(checkpoint.to_owned()),
            None if reply == "lost" => Recovery::Lost,
            None => Recovery::Changed,
        })
    }

    /// Stores checkpoint `info` of session `session` with its (compressed)
    /// `data` for `ttl`, and lists it on the session. False if the session
    /// is gone.
    pub async fn store_checkpoint(
        &self,
        session: &str,
        info: &CheckpointInfo,
        data: &[u8],
        ttl: Duration,
    ) -> Result<bool, QueueError> {
        let info_json = serde_json::to_string(info).map_err(|e| QueueError::Protocol(e.to_string()))?;
        let stored: i64 = STORE_CHECKPOINT_SCRIPT
            .key(self.keys.session(session))
            .key(self.keys.checkpoint(&info.id))
            .arg(info_json)
            .arg(data)
            .arg(ttl.as_secs().max(1))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(stored == 1)
    }

    /// Reads checkpoint `id`, or None once it has expired.
    pub async fn load_checkpoint(&self, id: &str) -> Result<Option<Checkpoint>, QueueError> {
        type Fields = (Option<Vec<u8>>, Option<String>, Option<String>, Option<String>);
        let (data, owner, language, session): Fields = redis::cmd("HMGET")
            .arg(self.keys.checkpoint(id))
            .arg(&["data", "owner", "language", "session"])
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(data.map(|data| Checkpoint {
            owner: owner.unwrap_or_default(),
            language: language.and_then(|l| l.parse().ok()),
            session: session.unwrap_or_default(),
            data,
        }))
    }
}
