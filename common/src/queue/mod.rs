//! The job queue on Redis: a stream per owner (api token) with one consumer
//! group each, one hash per job, and two pub/sub channels. Every multi-step
//! change is one Lua script, so a crash or a concurrent client never sees
//! half of it. The scripts are files under `src/lua/`, each opening with
//! its KEYS and ARGV; `tests/scripts/` runs each on a real `redis-server`.
//! A script with more than a few arguments takes them as one JSON table in
//! ARGV[1], read by name, built here from a `#[derive(Serialize)]` struct
//! of its own (`to_json`); what is already JSON or large (a payload, a
//! result) follows it positionally, so it is not escaped a second time.
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
//!    publishes the id on [`crate::keys::DONE_CHANNEL`].
//! 4. Entries whose worker died stay pending; [`Queue::reclaim`] hands them
//!    to a live worker after they have idled long enough.
//!
//! A batch ([`Queue::enqueue_batch`]) is many jobs enqueued in one script,
//! all or none, plus a batch hash. Each job hash names its batch; the
//! script that gives a job its final status (finish, or cancel while
//! queued) also counts it done in the batch, publishes the batch id on
//! [`crate::keys::DONE_CHANNEL`], and sets the batch's TTL once all are done.
//!
//! # Layout
//!
//! Each concept's `impl Queue` block, with its types, its scripts and the
//! parsing of its replies, is a file of its own; this file holds the handle,
//! connecting, the server check, and the reply parsing they share.
//!
//! - `jobs`: enqueue one job, claim, reclaim, start, finish, cancel and
//!   read jobs; the queue's depth and oldest age.
//! - `batches`: enqueue a batch, read it.
//! - `callbacks`: the stream of finished jobs and batches whose owner asked
//!   for a callback, and its deliverers' group.
//! - `workers`: the registry of live workers (heartbeats, forgetting).
//! - `sessions`: the Redis operations of sessions (see `crate::session`
//!   for their types).
//! - `live`: a running job's live output stream (see `crate::live`).

mod batches;
mod callbacks;
mod jobs;
mod live;
mod sandboxes;
mod sessions;
mod workers;

use std::time::Duration;

use redis::{AsyncCommands, RedisResult, Value};

pub use batches::{BatchJob, BatchRecord};
pub use callbacks::CallbackDue;
pub use jobs::{
    Cancelled, Claimed, Enqueued, Handover, Idempotency, JobRecord, JobSummary, NewJob, OverQuota, Quota, Timings,
};
pub use sandboxes::SandboxRecord;
pub use sessions::Admission;

use crate::connection::{Connection, RedisTarget, pubsub_client};
use crate::keys::QueueKeys;

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

/// A handle on the queue. Cheap to clone; clones share one multiplexed
/// connection that reconnects by itself.
#[derive(Clone)]
pub struct Queue {
    pub(crate) conn: Connection,
    /// Where pub/sub connections go.
    pubsub: redis::Client,
    pub(crate) keys: QueueKeys,
}

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
    pub(super) async fn create_group(&self, stream: &str, group: &str) -> Result<(), QueueError> {
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

    /// Every owner stream that may hold entries.
    async fn owner_streams(&self) -> Result<Vec<String>, QueueError> {
        Ok(self.conn.clone().smembers(self.keys.streams()).await?)
    }
}

/// `value` as JSON for a script: its argument table (ARGV[1]), or an array
/// that follows it.
fn to_json(value: &impl serde::Serialize) -> Result<String, QueueError> {
    serde_json::to_string(value).map_err(|e| QueueError::Protocol(e.to_string()))
}

/// An integer a script hands on to a Redis command (a TTL, a millisecond
/// time), in its argument table as a decimal string: cjson would decode a
/// JSON number as a double, exact only below 2^53, and Lua would print a
/// large one in exponent notation.
#[derive(Debug, Clone, Copy)]
struct Decimal(u64);

impl serde::Serialize for Decimal {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

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

/// Splits `[entry-id, [field, value, ...]]` into the id and the fields.
fn entry_fields(value: Value) -> Option<(String, Vec<(String, String)>)> {
    let Value::Array(mut parts) = value else { return None };
    let fields = flat_pairs(parts.pop()?);
    Some((as_string(parts.first()?)?, fields))
}

fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}
