//! The job queue on Redis: a stream per owner (api token) with one consumer
//! group each, one hash per job, and two pub/sub channels. Every multi-step
//! change is one Lua script, so a crash or a concurrent client never sees
//! half of it. The scripts are files under `src/lua/`, each opening with
//! its KEYS and ARGV; `tests/scripts/` runs each on a real `redis-server`.
//!
//! Life of a job:
//!
//! 1. [`Queue::enqueue`] checks the depth cap, writes the job hash
//!    (`queued`), appends the signed payload to its owner's stream and puts
//!    the owner in the ready ring, atomically.
//! 2. A worker [`Queue::claim`]s entries, one from each ready owner in
//!    turn, verifies them, and [`Queue::start`]s each (`running`), unless it
//!    was cancelled meanwhile. Taking turns is what keeps one owner's
//!    thousands of jobs from delaying another owner's few: with `k` owners
//!    waiting, each gets every `k`-th claim.
//! 3. [`Queue::finish`] writes the final status and result once (a second
//!    write is a no-op), sets the TTL, acks and deletes the entry, and
//!    publishes the id on [`keys::DONE_CHANNEL`].
//! 4. Entries whose worker died stay pending; [`Queue::reclaim`] hands them
//!    to a live worker after they have idled long enough.
//!
//! A batch ([`Queue::enqueue_batch`]) is many jobs enqueued in one script,
//! all or none, plus a batch hash. Each job hash names its batch; the
//! script that gives a job its final status (finish, or cancel while
//! queued) also counts it done in the batch, publishes the batch id on
//! [`keys::DONE_CHANNEL`], and sets the batch's TTL once all are done.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{AsyncCommands, RedisResult, Script, Value};

use crate::connection::{Connection, RedisTarget, pubsub_client};
use crate::keys::QueueKeys;
use crate::{Language, Outcome, Status, WorkerInfo, keys};

/// A Redis failure. The queue never panics on what Redis returns.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
    /// The server answers but cannot keep runbox's data safely.
    #[error("{0}")]
    Unsuitable(String),
}

/// The oldest Redis runbox works with: `XAUTOCLAIM` and `LMOVE` came in 6.2.
const MIN_REDIS_VERSION: (u32, u32) = (6, 2);

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

/// A stream entry a worker has claimed.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The owner stream it is in.
    pub stream: String,
    /// The stream entry id, needed to ack it.
    pub entry: String,
    pub id: String,
    pub payload: String,
    pub signature: String,
    /// How many times the entry has been delivered, this time included.
    pub deliveries: u64,
}

/// One job of a batch, signed and ready to enqueue.
#[derive(Debug, Clone)]
pub struct BatchJob {
    pub id: String,
    pub language: String,
    pub payload: String,
    pub signature: String,
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

/// One batch as stored.
#[derive(Debug, Clone)]
pub struct BatchRecord {
    pub id: String,
    pub owner: String,
    pub created_at: Option<String>,
    /// Jobs that have a final status.
    pub done: u64,
    /// The first failed job cancels the ones not yet started.
    pub stop_on_failure: bool,
    /// Its jobs' ids, in submission order.
    pub job_ids: Vec<String>,
}

/// A finished job or batch whose owner asked for a callback.
#[derive(Debug, Clone)]
pub struct CallbackDue {
    /// The entry in the queue's callback stream: also the delivery's stable id.
    pub entry: String,
    /// [`CallbackDue::JOB`] or [`CallbackDue::BATCH`].
    pub kind: String,
    pub id: String,
}

impl CallbackDue {
    pub const JOB: &str = "job";
    pub const BATCH: &str = "batch";
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

/// A handle on the queue. Cheap to clone; clones share one multiplexed
/// connection that reconnects by itself.
#[derive(Clone)]
pub struct Queue {
    pub(crate) conn: Connection,
    /// Where pub/sub connections go.
    pubsub: redis::Client,
    pub(crate) keys: QueueKeys,
}

/// Wake-up tokens kept for blocked workers: enough for every worker slot
/// of a large pool; a worker that finds none waits out its block time.
const WAKE_TOKENS: u64 = 256;

// The scripts are files under `lua/`, each opening with what it does, its
// KEYS and its ARGV. A script that needs shared functions (a prelude) is
// its preludes and its own file joined at compile time; `prefix.lua`, when
// there, comes first, as it reads the last ARGV.
static ENQUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/prefix.lua"),
        include_str!("lua/owner_streams.lua"),
        include_str!("lua/quota.lua"),
        include_str!("lua/enqueue.lua"),
    ))
});
static ENQUEUE_BATCH_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/prefix.lua"),
        include_str!("lua/owner_streams.lua"),
        include_str!("lua/quota.lua"),
        include_str!("lua/enqueue_batch.lua"),
    ))
});
static CLAIM_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/claim.lua")));
static DEPTH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/owner_streams.lua"), include_str!("lua/depth.lua"))));
static START_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/now_ms.lua"), include_str!("lua/start.lua"))));
static FINISH_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/prefix.lua"),
        include_str!("lua/now_ms.lua"),
        include_str!("lua/quota.lua"),
        include_str!("lua/queue_callback.lua"),
        include_str!("lua/batch_progress.lua"),
        include_str!("lua/cancel_queued.lua"),
        include_str!("lua/stop_batch.lua"),
        include_str!("lua/finish.lua"),
    ))
});
static CANCEL_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/prefix.lua"),
        include_str!("lua/quota.lua"),
        include_str!("lua/queue_callback.lua"),
        include_str!("lua/batch_progress.lua"),
        include_str!("lua/cancel_queued.lua"),
        include_str!("lua/cancel.lua"),
    ))
});

/// Time for one Redis reply. A blocking claim adds its own block time.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

impl Queue {
    /// A queue named `queue` on the Redis (server or cluster) at `target`.
    /// Connects lazily, so it can be made while Redis is down; each command
    /// reconnects if needed.
    pub fn connect(target: &RedisTarget, queue: &str) -> Result<Queue, QueueError> {
        Queue::connect_with_timeout(target, queue, RESPONSE_TIMEOUT)
    }

    /// Like [`Queue::connect`], for a connection that also makes blocking
    /// reads of up to `block`.
    pub fn connect_blocking(target: &RedisTarget, queue: &str, block: Duration) -> Result<Queue, QueueError> {
        Queue::connect_with_timeout(target, queue, RESPONSE_TIMEOUT + block)
    }

    fn connect_with_timeout(
        target: &RedisTarget,
        queue: &str,
        response_timeout: Duration,
    ) -> Result<Queue, QueueError> {
        let conn = Connection::new(target, response_timeout)?;
        Ok(Queue { conn, pubsub: pubsub_client(target)?, keys: QueueKeys::new(queue) })
    }

    /// A new pub/sub connection, subscribed to `channels`.
    pub async fn subscribe(&self, channels: &[&str]) -> Result<redis::aio::PubSub, QueueError> {
        let mut pubsub = self.pubsub.get_async_pubsub().await?;
        for channel in channels {
            pubsub.subscribe(*channel).await?;
        }
        Ok(pubsub)
    }

    /// Checks, at start-up, that the server is recent enough and never
    /// evicts keys (an evicted job hash or stream entry is a job lost):
    /// [`QueueError::Unsuitable`] says what to change. What it cannot check
    /// (a provider that disables `CONFIG`, or a Redis not reachable yet,
    /// which `/readyz` keeps watching) is logged as a warning.
    pub async fn check_server(&self) -> Result<(), QueueError> {
        match self.server_problems().await {
            Ok(warnings) => warnings.iter().for_each(|w| tracing::warn!("{w}")),
            Err(e @ QueueError::Unsuitable(_)) => return Err(e),
            Err(e) => tracing::warn!(error = %e, "could not check the Redis server yet"),
        }
        Ok(())
    }

    async fn server_problems(&self) -> Result<Vec<String>, QueueError> {
        let info: String = redis::cmd("INFO").arg("server").query_async(&mut self.conn.clone()).await?;
        let version = info.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or("").trim().to_owned();
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if (major, minor) < MIN_REDIS_VERSION {
            let (want_major, want_minor) = MIN_REDIS_VERSION;
            return Err(QueueError::Unsuitable(format!(
                "Redis {version} is too old: runbox needs {want_major}.{want_minor} or newer"
            )));
        }
        let policy: RedisResult<Vec<String>> =
            redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").query_async(&mut self.conn.clone()).await;
        match policy {
            Ok(pair) => match pair.get(1).map(String::as_str) {
                Some("noeviction") => Ok(Vec::new()),
                Some(other) => Err(QueueError::Unsuitable(format!(
                    "Redis maxmemory-policy is {other}: under memory pressure it would evict queued jobs and \
                     results. Set it to noeviction (`CONFIG SET maxmemory-policy noeviction`, redis.conf, or \
                     your provider's settings); runbox answers 503 when the queue is full instead"
                ))),
                None => Ok(vec!["Redis did not report its maxmemory-policy; make sure it is noeviction".into()]),
            },
            Err(e) => Ok(vec![format!(
                "could not read Redis's maxmemory-policy ({e}); make sure it is noeviction, or jobs can be evicted"
            )]),
        }
    }

    pub async fn ping(&self) -> Result<(), QueueError> {
        let _: String = redis::cmd("PING").query_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Creates `stream` and its consumer `group` unless they exist.
    async fn create_group(&self, stream: &str, group: &str) -> Result<(), QueueError> {
        let created: RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream)
            .arg(group)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.conn.clone())
            .await;
        match created {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => Ok(other?),
        }
    }

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
        invocation.arg(cap).arg(id).arg(payload).arg(signature).arg(owner).arg(language).arg(created_at);
        invocation.arg(idempotency.map_or(0, |i| i.ttl.as_secs().max(1)));
        invocation.arg(callback.unwrap_or("")).arg(quota.max_active).arg(quota.per_second);
        invocation.arg(keys::GROUP).arg(WAKE_TOKENS).arg(compat.unwrap_or("")).arg(&keys.prefix);
        enqueued(invocation.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Adds all of `jobs` as batch `batch_id`, or none of them if queued
    /// plus running jobs would pass `cap` or `idempotency`'s key was used.
    #[allow(clippy::too_many_arguments)]
    pub async fn enqueue_batch(
        &self,
        batch_id: &str,
        owner: &str,
        created_at: &str,
        jobs: &[BatchJob],
        stop_on_failure: bool,
        cap: u64,
        idempotency: Option<Idempotency<'_>>,
        callback: Option<&str>,
        quota: Quota,
    ) -> Result<Enqueued, QueueError> {
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let ids = serde_json::to_string(&ids).map_err(|e| QueueError::Protocol(e.to_string()))?;
        let keys = &self.keys;
        let mut invocation = ENQUEUE_BATCH_SCRIPT.key(keys.jobs_stream(owner));
        invocation.key(keys.streams()).key(keys.ready_owners()).key(keys.wake()).key(keys.batch(batch_id));
        for job in jobs {
            invocation.key(keys.job(&job.id));
        }
        if let Some(idempotency) = idempotency {
            invocation.key(keys.idempotency("batch", owner, idempotency.key));
        }
        invocation.arg(cap).arg(owner).arg(created_at).arg(batch_id).arg(ids).arg(jobs.len());
        for job in jobs {
            invocation.arg(&job.id).arg(&job.payload).arg(&job.signature).arg(&job.language);
        }
        invocation.arg(if stop_on_failure { "1" } else { "0" });
        invocation.arg(idempotency.map_or(0, |i| i.ttl.as_secs().max(1)));
        invocation.arg(callback.unwrap_or("")).arg(quota.max_active).arg(quota.per_second);
        invocation.arg(keys::GROUP).arg(WAKE_TOKENS).arg(&keys.prefix);
        enqueued(invocation.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Reads batch `id`, or None if it does not exist (or expired).
    pub async fn get_batch(&self, id: &str) -> Result<Option<BatchRecord>, QueueError> {
        let fields: std::collections::HashMap<String, String> = self.conn.clone().hgetall(self.keys.batch(id)).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let job_ids = fields.get("jobs").and_then(|j| serde_json::from_str::<Vec<String>>(j).ok());
        let job_ids = job_ids.ok_or_else(|| QueueError::Protocol(format!("batch {id} has no job list")))?;
        Ok(Some(BatchRecord {
            id: id.to_owned(),
            owner: fields.get("owner").cloned().unwrap_or_default(),
            created_at: fields.get("created_at").cloned(),
            done: fields.get("done").and_then(|d| d.parse().ok()).unwrap_or(0),
            stop_on_failure: fields.get("stop_on_failure").is_some_and(|f| f == "1"),
            job_ids,
        }))
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

    /// Every owner stream that may hold entries.
    async fn owner_streams(&self) -> Result<Vec<String>, QueueError> {
        Ok(self.conn.clone().smembers(self.keys.streams()).await?)
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
        let mut claimed = Vec::new();
        for stream in self.owner_streams().await? {
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
                let deliveries = self.deliveries(&stream, &entry.entry).await?;
                claimed.push(Claimed { deliveries, ..entry });
            }
        }
        Ok(claimed)
    }

    /// Creates the callback stream and its deliverers' group if needed.
    pub async fn ensure_callback_group(&self) -> Result<(), QueueError> {
        self.create_group(&self.keys.callbacks(), keys::CALLBACK_GROUP).await
    }

    /// Callbacks for `consumer` to deliver: up to `count` that another
    /// deliverer left pending longer than `stale` (it died), else new ones,
    /// waiting up to `block` for the first.
    pub async fn due_callbacks(
        &self,
        consumer: &str,
        count: usize,
        block: Duration,
        stale: Duration,
    ) -> Result<Vec<CallbackDue>, QueueError> {
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(self.keys.callbacks())
            .arg(keys::CALLBACK_GROUP)
            .arg(consumer)
            .arg(u64::try_from(stale.as_millis()).unwrap_or(u64::MAX))
            .arg("0-0")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.conn.clone())
            .await?;
        if let Value::Array(parts) = reply
            && let Some(Value::Array(entries)) = parts.into_iter().nth(1)
            && !entries.is_empty()
        {
            return Ok(entries.into_iter().filter_map(parse_callback).collect());
        }
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(keys::CALLBACK_GROUP)
            .arg(consumer)
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(u64::try_from(block.as_millis()).unwrap_or(u64::MAX))
            .arg("STREAMS")
            .arg(self.keys.callbacks())
            .arg(">")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(read_entries(reply).into_iter().filter_map(parse_callback).collect())
    }

    /// Ends a callback's delivery, whether it got through or was given up.
    pub async fn callback_done(&self, entry: &str) -> Result<(), QueueError> {
        let mut pipe = redis::pipe();
        let stream = self.keys.callbacks();
        pipe.cmd("XACK").arg(&stream).arg(keys::CALLBACK_GROUP).arg(entry).ignore();
        pipe.cmd("XDEL").arg(&stream).arg(entry).ignore();
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The owner and callback URL of the job or batch a callback is for;
    /// None if it has expired.
    pub async fn callback_target(&self, due: &CallbackDue) -> Result<Option<(String, String)>, QueueError> {
        let key = if due.kind == CallbackDue::BATCH { self.keys.batch(&due.id) } else { self.keys.job(&due.id) };
        let (owner, url): (Option<String>, Option<String>) =
            redis::cmd("HMGET").arg(key).arg("owner").arg("callback").query_async(&mut self.conn.clone()).await?;
        Ok(owner.zip(url))
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
            .arg(&entry.entry)
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
        let (id, entry) = (&claimed.id, &claimed.entry);
        let write_ms: i64 = FINISH_SCRIPT
            .key(self.keys.job(id))
            .key(&claimed.stream)
            .arg(outcome.status.as_str())
            .arg(result)
            .arg(finished_at)
            .arg(ttl.as_secs().max(1))
            .arg(keys::GROUP)
            .arg(entry)
            .arg(keys::DONE_CHANNEL)
            .arg(id)
            .arg(u64::try_from(boot.as_millis()).unwrap_or(u64::MAX))
            .arg(ended_ms)
            .arg(outcome.verdict.map_or("", |v| v.as_str()))
            .arg(self.keys.batch_prefix())
            .arg(if outcome.failed() { "1" } else { "0" })
            .arg(self.keys.job_prefix())
            .arg(CANCELLED_RESULT.as_str())
            .arg(&self.keys.prefix)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(Duration::from_millis(u64::try_from(write_ms).unwrap_or(0)))
    }

    /// Cancels job `id`: a queued job ends at once; a running one is flagged
    /// and its worker told on [`keys::CANCEL_CHANNEL`].
    pub async fn cancel(&self, id: &str, finished_at: &str, ttl: Duration) -> Result<Cancelled, QueueError> {
        let result = CANCELLED_RESULT.as_str();
        let reply: String = CANCEL_SCRIPT
            .key(self.keys.job(id))
            .arg(finished_at)
            .arg(result)
            .arg(ttl.as_secs().max(1))
            .arg(keys::GROUP)
            .arg(keys::DONE_CHANNEL)
            .arg(id)
            .arg(keys::CANCEL_CHANNEL)
            .arg(self.keys.batch_prefix())
            .arg(&self.keys.prefix)
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
        let created_ms: u64 = entry.entry.split('-').next().and_then(|ms| ms.parse().ok()).unwrap_or(now_ms);
        Ok(Some(Duration::from_millis(now_ms.saturating_sub(created_ms))))
    }

    /// Records that a worker is alive, with what it reports about itself.
    pub async fn heartbeat(&self, info: &WorkerInfo) -> Result<(), QueueError> {
        let json = serde_json::to_string(info).map_err(|e| QueueError::Protocol(e.to_string()))?;
        let _: i64 = self.conn.clone().hset(keys::WORKERS, &info.name, json).await?;
        Ok(())
    }

    /// Removes worker `name` from the live set.
    pub async fn forget_worker(&self, name: &str) -> Result<(), QueueError> {
        let _: i64 = self.conn.clone().hdel(keys::WORKERS, name).await?;
        Ok(())
    }

    /// Forgets every worker whose last heartbeat (`seen_at_ms` in what it
    /// reported) is older than `dead_before_ms` and that holds no entry:
    /// its consumer leaves the group and its entry the workers hash. One
    /// that still holds entries is left until they are taken over.
    pub async fn forget_dead_workers(&self, dead_before_ms: u64) -> Result<Vec<String>, QueueError> {
        let all: std::collections::HashMap<String, String> = self.conn.clone().hgetall(keys::WORKERS).await?;
        let silent: Vec<String> = all
            .into_iter()
            .filter(|(_, info)| {
                serde_json::from_str::<WorkerInfo>(info).map_or(0, |info| info.seen_at_ms) < dead_before_ms
            })
            .map(|(name, _)| name)
            .collect();
        if silent.is_empty() {
            return Ok(Vec::new());
        }
        let streams = self.owner_streams().await?;
        let mut forgotten = Vec::new();
        for name in silent {
            let mut holds_entries = false;
            for stream in &streams {
                let pending: RedisResult<Value> = redis::cmd("XPENDING")
                    .arg(stream)
                    .arg(keys::GROUP)
                    .arg("-")
                    .arg("+")
                    .arg(1)
                    .arg(&name)
                    .query_async(&mut self.conn.clone())
                    .await;
                holds_entries |= matches!(&pending, Ok(Value::Array(rows)) if !rows.is_empty());
            }
            if holds_entries {
                continue;
            }
            for stream in &streams {
                // A stream without the group has no consumer to delete.
                let _: RedisResult<Value> = redis::cmd("XGROUP")
                    .arg("DELCONSUMER")
                    .arg(stream)
                    .arg(keys::GROUP)
                    .arg(&name)
                    .query_async(&mut self.conn.clone())
                    .await;
            }
            let _: i64 = self.conn.clone().hdel(keys::WORKERS, &name).await?;
            forgotten.push(name);
        }
        Ok(forgotten)
    }

    /// What every registered worker last reported. An entry that does not
    /// parse (a worker of another version) is left out.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>, QueueError> {
        let all: std::collections::HashMap<String, String> = self.conn.clone().hgetall(keys::WORKERS).await?;
        Ok(all.values().filter_map(|info| serde_json::from_str(info).ok()).collect())
    }
}

/// Reads an enqueue script's reply: 1, 0, or the id an idempotency key holds.
fn enqueued(reply: Value) -> Result<Enqueued, QueueError> {
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

fn as_string(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn flat_pairs(value: Value) -> Vec<(String, String)> {
    let Value::Array(items) = value else { return Vec::new() };
    items.chunks(2).filter_map(|kv| Some((as_string(kv.first()?)?, as_string(kv.get(1)?)?))).collect()
}

/// The entries of an `XREADGROUP` reply: nil, or
/// `[[stream, [[entry, [field, value, ...]], ...]], ...]`.
fn read_entries(reply: Value) -> Vec<Value> {
    let Value::Array(streams) = reply else { return Vec::new() };
    let mut entries = Vec::new();
    for stream in streams {
        let Value::Array(mut parts) = stream else { continue };
        if let Some(Value::Array(found)) = parts.pop() {
            entries.extend(found);
        }
    }
    entries
}

/// Splits `[entry-id, [field, value, ...]]` into the id and the fields.
fn entry_fields(value: Value) -> Option<(String, Vec<(String, String)>)> {
    let Value::Array(mut parts) = value else { return None };
    let fields = flat_pairs(parts.pop()?);
    Some((as_string(parts.first()?)?, fields))
}

fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// Parses a callback entry, `[entry-id, [kind, k, id, i]]`.
fn parse_callback(value: Value) -> Option<CallbackDue> {
    let (entry, fields) = entry_fields(value)?;
    Some(CallbackDue { entry, kind: field(&fields, "kind")?, id: field(&fields, "id")? })
}

/// Parses `[entry-id, [field, value, ...]]`, an entry of `stream`; None
/// only for a malformed reply. A deleted entry (no fields) or a foreign one (other fields) comes
/// back with empty strings: its signature cannot verify, so the worker ends
/// it as `rejected` instead of leaving it pending forever.
fn parse_entry(value: Value, stream: &str, deliveries: u64) -> Option<Claimed> {
    let (entry, fields) = entry_fields(value)?;
    Some(Claimed {
        stream: stream.to_owned(),
        entry,
        id: field(&fields, "id").unwrap_or_default(),
        payload: field(&fields, "payload").unwrap_or_default(),
        signature: field(&fields, "sig").unwrap_or_default(),
        deliveries,
    })
}
