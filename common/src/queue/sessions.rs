//! The Redis operations of sessions (their types are `crate::session`'s).
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

use super::jobs::ttl_s;
use super::{Claimed, Decimal, Handover, Queue, QueueError, to_json};
use crate::config::millis;
use crate::{Checkpoint, CheckpointInfo, Language, Recovery, Sent, SessionRecord, SessionStatus};

// The scripts are files under `lua/` (see `jobs`), joined with their
// preludes at compile time.
static CREATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prefix.lua"),
        include_str!("../lua/now_ms.lua"),
        include_str!("../lua/session_prune.lua"),
        include_str!("../lua/session_create.lua"),
    ))
});
static READY_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("../lua/now_ms.lua"), include_str!("../lua/session_ready.lua"))));
static SEND_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("../lua/now_ms.lua"), include_str!("../lua/session_send.lua"))));
static IDLE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("../lua/now_ms.lua"), include_str!("../lua/session_idle.lua"))));
static END_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/session_end.lua")));
static RECOVER_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(include_str!("../lua/prefix.lua"), include_str!("../lua/session_recover.lua")))
});
static STORE_CHECKPOINT_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/store_checkpoint.lua")));

/// session_create.lua's argument table.
#[derive(serde::Serialize)]
struct CreateArgs<'a> {
    owner: &'a str,
    language: &'a str,
    idle_timeout_ms: Decimal,
    expires_at_ms: Decimal,
    created_at: &'a str,
    per_token: u64,
    ttl_s: Decimal,
    prefix: &'a str,
}

/// session_send.lua's argument table; the payload and signature follow it.
#[derive(serde::Serialize)]
struct SendArgs<'a> {
    worker: &'a str,
    id: &'a str,
    owner: &'a str,
    language: &'a str,
    created_at: &'a str,
    needs_idle: bool,
}

/// session_recover.lua's argument table.
#[derive(serde::Serialize)]
struct RecoverArgs<'a> {
    dead: &'a str,
    ttl_s: Decimal,
    prefix: &'a str,
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
        let args = CreateArgs {
            owner,
            language: language.as_str(),
            idle_timeout_ms: Decimal(millis(idle_timeout)),
            expires_at_ms: Decimal(expires_at_ms),
            created_at,
            per_token,
            ttl_s: ttl_s(ttl),
            prefix: &self.keys.prefix,
        };
        let created: i64 = CREATE_SCRIPT
            .key(self.keys.session(id))
            .key(self.keys.owner_sessions(owner))
            .arg(to_json(&args)?)
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
        let args = SendArgs { worker, id: job_id, owner, language: language.as_str(), created_at, needs_idle };
        let reply: String = SEND_SCRIPT
            .key(self.keys.session(id))
            .key(self.keys.job(job_id))
            .key(self.keys.inbox(worker))
            .arg(to_json(&args)?)
            .arg(payload)
            .arg(signature)
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

    /// Session job `id`, taken from its worker's inbox, ready for
    /// [`Queue::start`] and [`Queue::finish`]. None when its hash is gone.
    pub async fn claim_session_task(&self, id: &str) -> Result<Option<Claimed>, QueueError> {
        let (payload, signature): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(self.keys.job(id))
            .arg(&["payload", "sig"])
            .query_async(&mut self.conn.clone())
            .await?;
        let (Some(payload), Some(signature)) = (payload, signature) else { return Ok(None) };
        Ok(Some(Claimed { handover: Handover::Inbox, id: id.to_owned(), payload, signature, deliveries: 1 }))
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
        let args = RecoverArgs { dead, ttl_s: ttl_s(ttl), prefix: &self.keys.prefix };
        let reply: String = RECOVER_SCRIPT
            .key(self.keys.session(id))
            .key(self.keys.owner_sessions(owner))
            .arg(to_json(&args)?)
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
