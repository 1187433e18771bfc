//! The Redis operations of sessions (their types are `crate::session`'s).
//!
//! Every step of a session is a signed job, so the worker trusts a session
//! exactly as far as it trusts a job:
//!
//! - **create** admits a session only within its owner's share and the
//!   fleet's session places ([`Queue::create_session`]), counted in one
//!   set of every live session; past either it is refused at once.
//! - **start** is a job on a stream of its own, the session-starts stream
//!   ([`Queue::enqueue_session_start`]), which a worker reads only while it
//!   has a session place free ([`Queue::claim_session_starts`]), apart
//!   from its job slots; a start whose worker died is taken over like a
//!   job ([`Queue::reclaim_session_starts`]). The worker that claims it
//!   boots the session's child, restores a checkpoint if asked, marks the
//!   session `idle` on itself ([`Queue::session_ready`]) and keeps the
//!   place for as long as the session lives.
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

use redis::{AsyncCommands, RedisResult, Script, Value};

use super::jobs::{enqueued, parse_entry, ttl_s};
use super::{Claimed, Decimal, Enqueued, Handover, NewJob, Queue, QueueError, Quota, to_json};
use crate::config::millis;
use crate::{Checkpoint, CheckpointInfo, Language, Recovery, Sent, SessionRecord, SessionStatus, keys};

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
static START_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prefix.lua"),
        include_str!("../lua/quota.lua"),
        include_str!("../lua/session_start.lua"),
    ))
});
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
    capacity: u64,
    ttl_s: Decimal,
    prefix: &'a str,
}

/// session_start.lua's argument table; the payload and signature follow it.
#[derive(serde::Serialize)]
struct StartArgs<'a> {
    id: &'a str,
    owner: &'a str,
    language: &'a str,
    created_at: &'a str,
    quota_max_active: u64,
    quota_per_second: u64,
    group: &'a str,
    prefix: &'a str,
}

/// Whether a session was admitted ([`Queue::create_session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Created,
    /// Its owner holds its share of live sessions already.
    OverShare,
    /// Every session place of the fleet is taken.
    Full,
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
    /// holds `per_token` live sessions (0: no cap) or `capacity` sessions
    /// are live in all.
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
        capacity: u64,
        ttl: Duration,
    ) -> Result<Admission, QueueError> {
        let args = CreateArgs {
            owner,
            language: language.as_str(),
            idle_timeout_ms: Decimal(millis(idle_timeout)),
            expires_at_ms: Decimal(expires_at_ms),
            created_at,
            per_token,
            capacity,
            ttl_s: ttl_s(ttl),
            prefix: &self.keys.prefix,
        };
        let created: i64 = CREATE_SCRIPT
            .key(self.keys.session(id))
            .key(self.keys.owner_sessions(owner))
            .key(self.keys.live_sessions())
            .arg(to_json(&args)?)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match created {
            1 => Admission::Created,
            0 => Admission::OverShare,
            _ => Admission::Full,
        })
    }

    /// Enqueues `job`, the start job of a session, on the session-starts
    /// stream, within its owner's job `quota`.
    pub async fn enqueue_session_start(&self, job: &NewJob<'_>, quota: Quota) -> Result<Enqueued, QueueError> {
        let args = StartArgs {
            id: job.id,
            owner: job.owner,
            language: job.language,
            created_at: job.created_at,
            quota_max_active: quota.max_active,
            quota_per_second: quota.per_second,
            group: keys::GROUP,
            prefix: &self.keys.prefix,
        };
        let reply: Value = START_SCRIPT
            .key(self.keys.session_starts())
            .key(self.keys.job(job.id))
            .arg(to_json(&args)?)
            .arg(job.payload)
            .arg(job.signature)
            .invoke_async(&mut self.conn.clone())
            .await?;
        enqueued(reply)
    }

    /// Claims up to `count` session start jobs for `consumer`, waiting up
    /// to `block` for one; for a worker with that many session places free.
    pub async fn claim_session_starts(
        &self,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Vec<Claimed>, QueueError> {
        let stream = self.keys.session_starts();
        let read: RedisResult<Value> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(keys::GROUP)
            .arg(consumer)
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(millis(block).max(1))
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .query_async(&mut self.conn.clone())
            .await;
        let reply = match read {
            // No start was ever enqueued, or Redis lost the group (a restart
            // without persistence): make it, and read again next time.
            Err(e) if e.code() == Some("NOGROUP") => {
                self.create_group(&stream, keys::GROUP).await?;
                return Ok(Vec::new());
            }
            other => other?,
        };
        // Reply: nil, or [[stream, [[entry, [field, value, ...]], ...]]]
        let Value::Array(streams) = reply else { return Ok(Vec::new()) };
        let mut claimed = Vec::new();
        for item in streams {
            let Value::Array(mut parts) = item else { return Err(QueueError::Protocol("XREADGROUP".into())) };
            if let Some(Value::Array(entries)) = parts.pop() {
                claimed.extend(entries.into_iter().filter_map(|entry| parse_entry(entry, &stream, 1)));
            }
        }
        Ok(claimed)
    }

    /// Takes over up to `count` session start jobs pending longer than
    /// `min_idle` (their worker died while opening them), for `consumer`.
    pub async fn reclaim_session_starts(
        &self,
        consumer: &str,
        min_idle: Duration,
        count: usize,
    ) -> Result<Vec<Claimed>, QueueError> {
        self.reclaim_from(vec![self.keys.session_starts()], consumer, min_idle, count).await
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
            .key(self.keys.live_sessions())
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
            .key(self.keys.live_sessions())
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
