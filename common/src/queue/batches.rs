//! Batches: many jobs enqueued in one script, all or none, plus a batch
//! hash. Each job hash names its batch; the script that gives a job its
//! final status (finish, or cancel while queued, in `jobs`) also counts it
//! done in the batch.

use std::sync::LazyLock;

use redis::{AsyncCommands, Script};

use super::jobs::{Admission, enqueued};
use super::{Enqueued, Idempotency, Queue, QueueError, Quota, to_json};

/// One job of a batch, signed and ready to enqueue.
#[derive(Debug, Clone)]
pub struct BatchJob {
    pub id: String,
    pub language: String,
    pub payload: String,
    pub signature: String,
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

// Its preludes and its own file, joined at compile time (see `jobs`).
static ENQUEUE_BATCH_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/prefix.lua"),
        include_str!("../lua/owner_streams.lua"),
        include_str!("../lua/quota.lua"),
        include_str!("../lua/enqueue_batch.lua"),
    ))
});

/// enqueue_batch.lua's argument table; the jobs and their ids follow it.
#[derive(serde::Serialize)]
struct EnqueueBatchArgs<'a> {
    #[serde(flatten)]
    admission: Admission<'a>,
    batch_id: &'a str,
    stop_on_failure: bool,
}

/// One job of enqueue_batch.lua's array of jobs.
#[derive(serde::Serialize)]
struct BatchScriptJob<'a> {
    id: &'a str,
    language: &'a str,
    payload: &'a str,
    signature: &'a str,
}

impl Queue {
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
        let script_jobs: Vec<BatchScriptJob<'_>> = jobs
            .iter()
            .map(|j| BatchScriptJob { id: &j.id, language: &j.language, payload: &j.payload, signature: &j.signature })
            .collect();
        let keys = &self.keys;
        let mut invocation = ENQUEUE_BATCH_SCRIPT.key(keys.jobs_stream(owner));
        invocation.key(keys.streams()).key(keys.ready_owners()).key(keys.wake()).key(keys.batch(batch_id));
        for job in jobs {
            invocation.key(keys.job(&job.id));
        }
        if let Some(idempotency) = idempotency {
            invocation.key(keys.idempotency("batch", owner, idempotency.key));
        }
        let admission = Admission::new(keys, owner, created_at, cap, idempotency, callback, quota);
        let args = EnqueueBatchArgs { admission, batch_id, stop_on_failure };
        invocation.arg(to_json(&args)?).arg(to_json(&script_jobs)?).arg(to_json(&ids)?);
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
}
