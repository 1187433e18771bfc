//! The worker's handle: what every job and session task runs with (the
//! settings, the runner, Redis, the metrics, the jobs and sessions held
//! here, the shutdown tokens), and the two Redis writes both the job
//! service and the sessions make: a job's result ([`Worker::finish`]) and
//! any write that must not be lost ([`Worker::until_written`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runbox_common::{Claimed, Outcome, Queue, QueueError, now_rfc3339, now_unix_ms};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::backoff::Backoff;
use crate::config::WorkerConfig;
use crate::held_sessions::Sessions;
use crate::metrics::Metrics;
use crate::sandbox::Runner;

/// The jobs this worker holds, by id: their stream entries, kept claimed
/// on every heartbeat, and how to kill their children on a cancel.
type Running = Arc<Mutex<HashMap<String, RunningJob>>>;

/// A job or session exec running here.
pub(crate) struct RunningJob {
    /// The owner stream and the entry id in it; none for a session's exec,
    /// which has no stream entry.
    pub(crate) entry: Option<(String, String)>,
    pub(crate) cancel: CancellationToken,
}

/// What every job and session task on this worker runs with.
pub(crate) struct Worker {
    pub(crate) config: WorkerConfig,
    pub(crate) runner: Runner,
    pub(crate) queue: Queue,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) running: Running,
    /// The sessions this worker holds.
    pub(crate) sessions: Sessions,
    /// Cancelled on shutdown: no new jobs, and sessions end.
    pub(crate) stopping: CancellationToken,
    /// Cancelled when the shutdown grace has passed: kills what still runs.
    pub(crate) kill: CancellationToken,
}

impl Worker {
    /// Writes the result, retrying while Redis is away. If it never gets
    /// through (shutdown first), the entry stays pending and another worker
    /// runs the job again: at least once, never lost.
    pub(crate) async fn finish(&self, entry: &Claimed, ran: &Ran) {
        let ttl = self.config.shared.result_ttl;
        let write =
            || async move { self.queue.finish(entry, &ran.outcome, &now_rfc3339(), ttl, ran.boot, ran.ended_ms).await };
        if let Some(write_back) = self.until_written("write the result", write).await {
            self.metrics.write_back.observe(write_back.as_secs_f64());
        }
    }

    /// Runs the Redis write `op` until it succeeds, retrying with backoff
    /// and counting each failure in `redis_errors` (`what` names it in the
    /// log); None once the worker is killed, which ends the job anyway.
    pub(crate) async fn until_written<T, F, Fut>(&self, what: &str, mut op: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, QueueError>>,
    {
        let mut backoff = Backoff::new();
        loop {
            match op().await {
                Ok(value) => return Some(value),
                Err(e) => {
                    self.metrics.redis_errors.inc();
                    let delay = backoff.next();
                    warn!(error = %e, retry_in = ?delay, "could not {what}; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.kill.cancelled() => return None,
                    }
                }
            }
        }
    }
}

/// A job's outcome with what it cost around the run.
pub(crate) struct Ran {
    pub(crate) outcome: Outcome,
    pub(crate) boot: Duration,
    /// When the child ended, in Unix milliseconds.
    pub(crate) ended_ms: u64,
}

impl Ran {
    /// An ending decided without running a child.
    pub(crate) fn without_child(outcome: Outcome) -> Ran {
        Ran { outcome, boot: Duration::ZERO, ended_ms: now_unix_ms() }
    }
}
