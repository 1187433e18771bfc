//! Jobs on their own: enqueued, claimed (or taken over from a worker that
//! died), started, finished, cancelled and read; and what the queue holds
//! (its depth, its oldest unclaimed job).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{AsyncCommands, RedisResult, Script, Value};

use super::{Decimal, Queue, QueueError, as_string, entry_fields, field, flat_pairs, to_json};
use crate::{Language, Outcome, Status, keys};

/// How an enqueue went.
#[derive(Debug, PartialEq, Eq)]
pub enum Enqueued {
    Accepted,
    /// Queued plus running jobs already reached the cap.
    Full,
    /// The idempotency key was used before, for this job or batch id;
    /// nothing new was queued.
    Duplicate(String),
    /// The owner's quota would be passed; nothing was queued.
    OverQuota(OverQuota),
}

/// What one owner may have queued and submit; 0 means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    /// Queued plus running jobs.
    pub max_active: u64,
    /// Submissions (a job, or a whole batch) per second.
    pub per_second: u64,
}

/// Which quota a submission would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverQuota {
    Active,
    Rate,
}

/// An `Idempotency-Key` and how long to remember it.
#[derive(Debug, Clone, Copy)]
pub struct Idempotency<'a> {
    pub key: &'a str,
    pub ttl: Duration,
}

/// How a cancel request went.
#[derive(Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// It was queued and will never run.
    WhileQueued,
    /// It is running; its worker was told to kill it.
    Requested,
    /// It had already finished.
    AlreadyFinal,
    NotFound,
}

/// A job a worker has claimed.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// Where it was handed over from.
    pub handover: Handover,
    pub id: String,
    pub payload: String,
    pub signature: String,
    /// How many times the entry has been delivered, this time included.
    pub deliveries: u64,
}

/// Where a claimed job was handed to its worker from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handover {
    /// Entry `entry` of an owner's stream: the worker's group holds it until
    /// the job is final, then it is acknowledged and deleted.
    Stream { stream: String, entry: String },
    /// A session worker's inbox, a list of job ids: there is nothing to
    /// acknowledge, and the session, not a group, holds the task.
    Inbox,
}

impl Claimed {
    /// The stream and entry id, for a job claimed from a stream.
    pub fn stream_entry(&self) -> Option<(&str, &str)> {
        match &self.handover {
            Handover::Stream { stream, entry } => Some((stream, entry)),
            Handover::Inbox => None,
        }
    }
}

/// One job to enqueue on its own (not in a batch), signed.
#[derive(Debug, Clone, Copy)]
pub struct NewJob<'a> {
    pub id: &'a str,
    pub owner: &'a str,
    pub language: &'a str,
    pub payload: &'a str,
    pub signature: &'a str,
    pub created_at: &'a str,
    /// Where to deliver the finished job, if anywhere.
    pub callback: Option<&'a str>,
    /// Kept with the job for a compatible API (see [`JobRecord::compat`]).
    pub compat: Option<&'a str>,
}

/// What counting a batch needs of each job, without its output.
#[derive(Debug, Clone, Default)]
pub struct JobSummary {
    /// None when the job hash has expired.
    pub status: Option<Status>,
    pub verdict: Option<String>,
}

/// One job as stored.
#[derive(Debug, Clone)]
pub struct JobRecord {
    pub id: String,
    pub owner: String,
    /// None only for a forged entry's record, which names none.
    pub language: Option<Language>,
    pub status: Status,
    pub created_at: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub worker: Option<String>,
    /// Present once the job has a final status.
    pub outcome: Option<Outcome>,
    /// Where the time went, filled in as the job progresses.
    pub timings: Timings,
    /// What a compatible API (Judge0) stored with the job at submission to
    /// answer in its own shape later; None for native jobs.
    pub compat: Option<String>,
}

/// Where a job's time went, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Timings {
    /// From enqueue until a worker started it.
    pub queue_ms: Option<u64>,
    /// Booting its child; 0 when a warm child was ready.
    pub boot_ms: Option<u64>,
    /// The program's run, as `duration_ms`.
    pub run_ms: Option<u64>,
    /// From the child's end until the result was stored.
    pub write_ms: Option<u64>,
}

/// Wake-up tokens kept for blocked workers: enough for every worker slot
/// of a large pool; a worker that finds none waits out its block time.
pub(super) const WAKE_TOKENS: u64 = 256;

// The scripts are files under `lua/`, each opening with what it does, its
// KEYS and its ARGV. A script that needs shared functions (a prelude) is
// its preludes and its own file joined at compile time; `prefix.lua`, when
// there, comes first, as the preludes after it use the prefix it reads from
// the argument table.
static ENQUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prefix.lua"),
        include_str!("../lua/owner_streams.lua"),
        include_str!("../lua/quota.lua"),
        include_str!("../lua/enqueue.lua"),
    ))
});
static CLAIM_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/claim.lua")));
static DEPTH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("../lua/owner_streams.lua"), include_str!("../lua/depth.lua"))));
static START_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("../lua/now_ms.lua"), include_str!("../lua/start.lua"))));
static FINISH_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prefix.lua"),
        include_str!("../lua/now_ms.lua"),
        include_str!("../lua/quota.lua"),
        include_str!("../lua/queue_callback.lua"),
        include_str!("../lua/batch_progress.lua"),
        include_str!("../lua/cancel_queued.lua"),
        include_str!("../lua/stop_batch.lua"),
        include_str!("../lua/finish.lua"),
    ))
});
static CANCEL_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prefix.lua"),
        include_str!("../lua/quota.lua"),
        include_str!("../lua/queue_callback.lua"),
        include_str!("../lua/batch_progress.lua"),
        include_str!("../lua/cancel_queued.lua"),
        include_str!("../lua/cancel.lua"),
    ))
});

/// enqueue.lua's argument table; the payload, signature and compat note
/// follow it.
#[derive(serde::Serialize)]
struct EnqueueArgs<'a> {
    #[serde(flatten)]
    admission: Admission<'a>,
    id: &'a str,
    language: &'a str,
}

/// What enqueue.lua and enqueue_batch.lua both read to admit a submission
/// of `owner`'s: the depth cap, the idempotency key's TTL, the callback, the
/// owner's quota, and where to queue and wake.
#[derive(serde::Serialize)]
pub(super) struct Admission<'a> {
    cap: u64,
    owner: &'a str,
    created_at: &'a str,
    /// Only with an idempotency key.
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotency_ttl_s: Option<Decimal>,
    #[serde(skip_serializing_if = "Option::is_none")]
    callback: Option<&'a str>,
    quota_max_active: u64,
    quota_per_second: u64,
    group: &'a str,
    wake_tokens: u64,
    prefix: &'a str,
}

impl<'a> Admission<'a> {
    pub(super) fn new(
        keys: &'a keys::QueueKeys,
        owner: &'a str,
        created_at: &'a str,
        cap: u64,
        idempotency: Option<Idempotency<'_>>,
        callback: Option<&'a str>,
        quota: Quota,
    ) -> Admission<'a> {
        Admission {
            cap,
            owner,
            created_at,
            idempotency_ttl_s: idempotency.map(|i| ttl_s(i.ttl)),
            callback: callback.filter(|c| !c.is_empty()),
            quota_max_active: quota.max_active,
            quota_per_second: quota.per_second,
            group: keys::GROUP,
            wake_tokens: WAKE_TOKENS,
            prefix: &keys.prefix,
        }
    }
}

/// finish.lua's argument table; the result and the cancelled result follow it.
#[derive(serde::Serialize)]
struct FinishArgs<'a> {
    status: &'a str,
    finished_at: &'a str,
    ttl_s: Decimal,
    group: &'a str,
    /// Absent for a job from a session's inbox, which has no entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<&'a str>,
    done_channel: &'a str,
    id: &'a str,
    boot_ms: Decimal,
    ended_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<&'a str>,
    batch_prefix: &'a str,
    failed: bool,
    job_prefix: &'a str,
    prefix: &'a str,
}

/// cancel.lua's argument table; the cancelled result follows it.
#[derive(serde::Serialize)]
struct CancelArgs<'a> {
    finished_at: &'a str,
    ttl_s: Decimal,
    group: &'a str,
    done_channel: &'a str,
    id: &'a str,
    cancel_channel: &'a str,
    batch_prefix: &'a str,
    prefix: &'a str,
}

/// A TTL as the scripts take it: whole seconds, at least one.
pub(super) fn ttl_s(ttl: Duration) -> Decimal {
    Decimal(ttl.as_secs().max(1))
}

impl Queue {
    /// Adds a job unless queued plus running jobs already reach `cap`, or
    /// `idempotency`'s key was used before.
    pub async fn enqueue(
        &self,
        job: &NewJob<'_>,
        cap: u64,
        idempotency: Option<Idempotency<'_>>,
        quota: Quota,
    ) -> Result<Enqueued, QueueError> {
        let NewJob { id, owner, language, payload, signature, created_at, callback, compat } = *job;
        let keys = &self.keys;
        let mut invocation = ENQUEUE_SCRIPT.key(keys.jobs_stream(owner));
        invocation.key(keys.streams()).key(keys.ready_owners()).key(keys.wake()).key(keys.job(id));
        if let Some(idempotency) = idempotency {
            invocation.key(keys.idempotency("job", owner, idempotency.key));
        }
        let admission = Admission::new(keys, owner, created_at, cap, idempotency, callback, quota);
        let args = EnqueueArgs { admission, id, language };
        invocation.arg(to_json(&args)?).arg(payload).arg(signature).arg(compat.unwrap_or(""));
        enqueued(invocation.invoke_async(&mut self.conn.clone()).await?)
    }

    /// The status and verdict of each of `ids`, in order, in one round trip.
    pub async fn summaries(&self, ids: &[String]) -> Result<Vec<JobSummary>, QueueError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET").arg(self.keys.job(id)).arg("status").arg("verdict");
        }
        let rows: Vec<(Option<String>, Option<String>)> = pipe.query_async(&mut self.conn.clone()).await?;
        Ok(rows
            .into_iter()
            .map(|(status, verdict)| JobSummary { status: status.and_then(|s| s.parse().ok()), verdict })
            .collect())
    }

    /// Claims up to `count` new entries for `consumer`, one from each owner
    /// with jobs waiting in turn (see `lua/claim.lua`). With none waiting, waits up
    /// to `block` for an enqueue's wake-up token and tries once more.
    pub async fn claim(&self, consumer: &str, count: usize, block: Duration) -> Result<Vec<Claimed>, QueueError> {
        let claimed = self.claim_now(consumer, count).await?;
        if !claimed.is_empty() {
            return Ok(claimed);
        }
        let _: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(self.keys.wake())
            .arg(block.as_secs_f64())
            .query_async(&mut self.conn.clone())
            .await?;
        self.claim_now(consumer, count).await
    }

    async fn claim_now(&self, consumer: &str, count: usize) -> Result<Vec<Claimed>, QueueError> {
        let reply: Value = CLAIM_SCRIPT
            .key(self.keys.ready_owners())
            .arg(self.keys.jobs_stream_prefix())
            .arg(keys::GROUP)
            .arg(consumer)
            .arg(count)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let Value::Array(items) = reply else { return Err(QueueError::Protocol("claim".into())) };
        let mut claimed = Vec::new();
        for item in items {
            let Value::Array(mut parts) = item else { return Err(QueueError::Protocol("claim".into())) };
            let entry = parts.pop();
            if let (Some(stream), Some(entry)) = (parts.first().and_then(as_string), entry) {
                claimed.extend(parse_entry(entry, &stream, 1));
            }
        }
        Ok(claimed)
    }

    /// Resets the idle time of `entries` (stream, entry id), which
    /// `consumer` holds, so that [`Queue::reclaim`] leaves them alone while
    /// their worker lives.
    pub async fn keep_claimed(&self, consumer: &str, entries: &[(String, String)]) -> Result<(), QueueError> {
        let mut by_stream: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
        for (stream, entry) in entries {
            by_stream.entry(stream).or_default().push(entry);
        }
        if by_stream.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (stream, ids) in by_stream {
            pipe.cmd("XCLAIM").arg(stream).arg(keys::GROUP).arg(consumer).arg(0).arg(ids).arg("JUSTID").ignore();
        }
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Takes over up to `count` entries that have been pending longer than
    /// `min_idle` (their worker died or hung), for `consumer`.
    pub async fn reclaim(&self, consumer: &str, min_idle: Duration, count: usize) -> Result<Vec<Claimed>, QueueError> {
        self.reclaim_from(self.owner_streams().await?, consumer, min_idle, count).await
    }

    /// [`Queue::reclaim`] from `streams`.
    pub(super) async fn reclaim_from(
        &self,
        streams: Vec<String>,
        consumer: &str,
        min_idle: Duration,
        count: usize,
    ) -> Result<Vec<Claimed>, QueueError> {
        let mut claimed = Vec::new();
        for stream in streams {
            if claimed.len() >= count {
                break;
            }
            let reply: RedisResult<Value> = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(keys::GROUP)
                .arg(consumer)
                .arg(u64::try_from(min_idle.as_millis()).unwrap_or(u64::MAX))
                .arg("0-0")
                .arg("COUNT")
                .arg(count - claimed.len())
                .query_async(&mut self.conn.clone())
                .await;
            let reply = match reply {
                // A stream whose group is gone holds nothing anyone claimed.
                Err(e) if e.code() == Some("NOGROUP") => continue,
                other => other?,
            };
            // Reply: [next-cursor, [[entry, [field, value, ...]], ...], [deleted ids]]
            let Value::Array(parts) = reply else { return Err(QueueError::Protocol("XAUTOCLAIM".into())) };
            let Some(Value::Array(entries)) = parts.into_iter().nth(1) else { continue };
            for entry in entries.into_iter().filter_map(|e| parse_entry(e, &stream, 0)) {
                let Some((_, id)) = entry.stream_entry() else { continue };
                let deliveries = self.deliveries(&stream, id).await?;
                claimed.push(Claimed { deliveries, ..entry });
            }
        }
        Ok(claimed)
    }

    async fn deliveries(&self, stream: &str, entry: &str) -> Result<u64, QueueError> {
        let reply: Value = redis::cmd("XPENDING")
            .arg(stream)
            .arg(keys::GROUP)
            .arg(entry)
            .arg(entry)
            .arg(1)
            .query_async(&mut self.conn.clone())
            .await?;
        // Reply: [[entry, consumer, idle-ms, deliveries]]
        if let Value::Array(rows) = reply
            && let Some(Value::Array(row)) = rows.into_iter().next()
            && let Some(Value::Int(n)) = row.get(3)
        {
            return Ok(u64::try_from(*n).unwrap_or(0));
        }
        Ok(0)
    }

    /// Marks the job of `entry` running on `worker` and returns how long it
    /// waited in the queue. None when it must not run: it was cancelled,
    /// already finished, or its hash is gone.
    pub async fn start(&self, entry: &Claimed, worker: &str, started_at: &str) -> Result<Option<Duration>, QueueError> {
        let queued_ms: i64 = START_SCRIPT
            .key(self.keys.job(&entry.id))
            .arg(worker)
            .arg(started_at)
            .arg(entry.stream_entry().map_or("", |(_, id)| id))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(u64::try_from(queued_ms).ok().map(Duration::from_millis))
    }

    /// Records the final `outcome` of the job of `claimed` (first write
    /// wins), removes its stream entry and tells waiters. `boot` is what
    /// booting its child cost, `ended_ms` when the child ended (Unix ms).
    /// Returns the time from the child's end until the result was stored.
    pub async fn finish(
        &self,
        claimed: &Claimed,
        outcome: &Outcome,
        finished_at: &str,
        ttl: Duration,
        boot: Duration,
        ended_ms: u64,
    ) -> Result<Duration, QueueError> {
        let result = serde_json::to_string(outcome).map_err(|e| QueueError::Protocol(e.to_string()))?;
        let (batch_prefix, job_prefix) = (self.keys.batch_prefix(), self.keys.job_prefix());
        let args = FinishArgs {
            status: outcome.status.as_str(),
            finished_at,
            ttl_s: ttl_s(ttl),
            group: keys::GROUP,
            entry: claimed.stream_entry().map(|(_, id)| id),
            done_channel: keys::DONE_CHANNEL,
            id: &claimed.id,
            boot_ms: Decimal(u64::try_from(boot.as_millis()).unwrap_or(u64::MAX)),
            ended_ms,
            verdict: outcome.verdict.map(|v| v.as_str()),
            batch_prefix: &batch_prefix,
            failed: outcome.failed(),
            job_prefix: &job_prefix,
            prefix: &self.keys.prefix,
        };
        let mut invocation = FINISH_SCRIPT.key(self.keys.job(&claimed.id));
        if let Some((stream, _)) = claimed.stream_entry() {
            invocation.key(stream);
        }
        let write_ms: i64 = invocation
            .arg(to_json(&args)?)
            .arg(result)
            .arg(CANCELLED_RESULT.as_str())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(Duration::from_millis(u64::try_from(write_ms).unwrap_or(0)))
    }

    /// Cancels job `id`: a queued job ends at once; a running one is flagged
    /// and its worker told on [`keys::CANCEL_CHANNEL`].
    pub async fn cancel(&self, id: &str, finished_at: &str, ttl: Duration) -> Result<Cancelled, QueueError> {
        let batch_prefix = self.keys.batch_prefix();
        let args = CancelArgs {
            finished_at,
            ttl_s: ttl_s(ttl),
            group: keys::GROUP,
            done_channel: keys::DONE_CHANNEL,
            id,
            cancel_channel: keys::CANCEL_CHANNEL,
            batch_prefix: &batch_prefix,
            prefix: &self.keys.prefix,
        };
        let reply: String = CANCEL_SCRIPT
            .key(self.keys.job(id))
            .arg(to_json(&args)?)
            .arg(CANCELLED_RESULT.as_str())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match reply.as_str() {
            "queued" => Cancelled::WhileQueued,
            "running" => Cancelled::Requested,
            "final" => Cancelled::AlreadyFinal,
            _ => Cancelled::NotFound,
        })
    }

    /// For each of `ids`, whether a cancel was requested while it ran.
    pub async fn cancel_requested(&self, ids: &[String]) -> Result<Vec<bool>, QueueError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hget(self.keys.job(id), "cancel");
        }
        let flags: Vec<Option<String>> = pipe.query_async(&mut self.conn.clone()).await?;
        Ok(flags.into_iter().map(|flag| flag.as_deref() == Some("1")).collect())
    }

    /// Reads job `id`, or None if it does not exist (or expired).
    pub async fn get(&self, id: &str) -> Result<Option<JobRecord>, QueueError> {
        let fields: std::collections::HashMap<String, String> = self.conn.clone().hgetall(self.keys.job(id)).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let field = |name: &str| fields.get(name).cloned();
        let status = field("status").unwrap_or_default();
        let status: Status = status.parse().map_err(|e| QueueError::Protocol(format!("job {id}: {e}")))?;
        let outcome = field("result").and_then(|r| serde_json::from_str::<Outcome>(&r).ok());
        let number = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
        let timings = Timings {
            queue_ms: number("queue_ms"),
            boot_ms: number("boot_ms"),
            run_ms: outcome.as_ref().map(|o| o.duration_ms),
            write_ms: number("write_ms"),
        };
        Ok(Some(JobRecord {
            id: id.to_owned(),
            owner: field("owner").unwrap_or_default(),
            language: field("language").and_then(|l| l.parse().ok()),
            status,
            created_at: field("created_at"),
            started_at: field("started_at"),
            finished_at: field("finished_at"),
            worker: field("worker"),
            outcome,
            timings,
            compat: field("compat"),
        }))
    }

    /// Queued plus running jobs.
    pub async fn depth(&self) -> Result<u64, QueueError> {
        Ok(DEPTH_SCRIPT.key(self.keys.streams()).invoke_async(&mut self.conn.clone()).await?)
    }

    /// Age of the oldest job no worker has claimed yet, if any.
    pub async fn oldest_queued_age(&self, now_ms: u64) -> Result<Option<Duration>, QueueError> {
        let mut oldest = None;
        for stream in self.owner_streams().await? {
            oldest = oldest.max(self.oldest_unclaimed(&stream, now_ms).await?);
        }
        Ok(oldest)
    }

    async fn oldest_unclaimed(&self, stream: &str, now_ms: u64) -> Result<Option<Duration>, QueueError> {
        // Entries after the group's last-delivered id are the unclaimed ones;
        // an entry id starts with its creation time in milliseconds.
        let groups: RedisResult<Value> =
            redis::cmd("XINFO").arg("GROUPS").arg(stream).query_async(&mut self.conn.clone()).await;
        let groups = match groups {
            // A stream that is gone (no such key) has nothing waiting.
            Err(e) if e.code().is_some() => return Ok(None),
            other => other?,
        };
        let mut last_delivered = None;
        if let Value::Array(groups) = groups {
            for group in groups {
                let pairs = flat_pairs(group);
                if pairs.iter().any(|(k, v)| k == "name" && v == keys::GROUP) {
                    last_delivered = pairs.into_iter().find(|(k, _)| k == "last-delivered-id").map(|(_, v)| v);
                }
            }
        }
        let start = last_delivered.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        let first: Value = redis::cmd("XRANGE")
            .arg(stream)
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut self.conn.clone())
            .await?;
        let Value::Array(entries) = first else { return Ok(None) };
        let Some(entry) = entries.into_iter().next().and_then(|e| parse_entry(e, stream, 0)) else { return Ok(None) };
        let Some((_, id)) = entry.stream_entry() else { return Ok(None) };
        let created_ms: u64 = id.split('-').next().and_then(|ms| ms.parse().ok()).unwrap_or(now_ms);
        Ok(Some(Duration::from_millis(now_ms.saturating_sub(created_ms))))
    }
}

/// Reads an enqueue script's reply: 1, 0, or the id an idempotency key holds.
pub(super) fn enqueued(reply: Value) -> Result<Enqueued, QueueError> {
    match reply {
        Value::Int(1) => Ok(Enqueued::Accepted),
        Value::Int(0) => Ok(Enqueued::Full),
        Value::Int(-1) => Ok(Enqueued::OverQuota(OverQuota::Active)),
        Value::Int(-2) => Ok(Enqueued::OverQuota(OverQuota::Rate)),
        other => as_string(&other)
            .map(Enqueued::Duplicate)
            .ok_or_else(|| QueueError::Protocol(format!("enqueue replied {other:?}"))),
    }
}

/// The stored result of a job cancelled before it ran, made once: every
/// finish passes it, for a batch that stops on its first failure.
static CANCELLED_RESULT: LazyLock<String> = LazyLock::new(|| {
    let outcome = Outcome { status: Status::Cancelled, ..Outcome::internal_error("") };
    // A plain struct of strings, numbers and options always serializes.
    serde_json::to_string(&outcome).unwrap_or_default()
});

/// Parses `[entry-id, [field, value, ...]]`, an entry of `stream`; None
/// only for a malformed reply. A deleted entry (no fields) or a foreign one (other fields) comes
/// back with empty strings: its signature cannot verify, so the worker ends
/// it as `rejected` instead of leaving it pending forever.
pub(super) fn parse_entry(value: Value, stream: &str, deliveries: u64) -> Option<Claimed> {
    let (entry, fields) = entry_fields(value)?;
    Some(Claimed {
        handover: Handover::Stream { stream: stream.to_owned(), entry },
        id: field(&fields, "id").unwrap_or_default(),
        payload: field(&fields, "payload").unwrap_or_default(),
        signature: field(&fields, "sig").unwrap_or_default(),
        deliveries,
    })
}
