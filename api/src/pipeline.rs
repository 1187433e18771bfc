//! The path every surface shares from a checked job to its answer: sign
//! and enqueue it ([`enqueue`]), then read it, waiting for it to finish
//! ([`wait_for`], over [`long_poll`]). `/v1/jobs`, batches, sessions, MCP and
//! the compatible APIs all go through here.

use std::time::Duration;

use runbox_common::{Enqueued, Idempotency, JobRecord, JobSpec, NewJob, now_rfc3339};
use tokio::time::Instant;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::requests;
use crate::state::AppState;

/// A waiter re-reads the job this often even without a notification, as a
/// backstop for a completion published while the subscription was down.
pub(crate) const RECHECK_EVERY: Duration = Duration::from_secs(5);

/// A job that is in the queue: its id, and whether it was queued by an
/// earlier request with the same idempotency key.
pub(crate) struct Queued {
    pub id: String,
    pub duplicate: bool,
}

/// Signs and queues a validated job for `caller`, within the queue cap and
/// the caller's quotas, with its callback, `Idempotency-Key` and a
/// compatible API's note, if any. Every surface that runs a job (`/v1/jobs`,
/// MCP, the compatible APIs) goes through here, so they share one path to
/// the workers, and one rule for where a job runs: the caller's long-lived
/// children or a fresh child, as `shared_runtime` (None on surfaces that
/// have no such field) and the language decide ([`requests::lane`]).
pub(crate) async fn enqueue(
    state: &AppState,
    caller: &Caller,
    spec: &JobSpec,
    shared_runtime: Option<bool>,
    idempotency_key: Option<&str>,
    callback: Option<&str>,
    compat: Option<&str>,
) -> Result<Queued, ApiError> {
    let placed = JobSpec { shared_lane: requests::lane(spec, shared_runtime, &caller.0), ..spec.clone() };
    let Signed { id, payload, signature } = sign(state, caller, &placed)?;
    let idempotency = idempotency_key.map(|key| Idempotency { key, ttl: state.config.shared.result_ttl });
    let created_at = now_rfc3339();
    let job = NewJob {
        id: &id,
        owner: &caller.0,
        language: spec.language.as_str(),
        payload: &payload,
        signature: &signature,
        created_at: &created_at,
        callback,
        compat,
    };
    let enqueued = state
        .queue
        .enqueue(&job, state.config.limits.max_queue, idempotency, state.config.quotas.of(&caller.0))
        .await?;
    match admitted(state, caller, enqueued, [spec])? {
        None => {
            tracing::info!(%id, language = %spec.language, "job queued");
            Ok(Queued { id, duplicate: false })
        }
        Some(first) => {
            tracing::info!(id = %first, "idempotency key reused: answering with the first job");
            Ok(Queued { id: first, duplicate: true })
        }
    }
}

/// Signs `spec`, a session's start job, and enqueues it on the stream
/// workers read into their session places, never their job slots; returns
/// its id. The session was admitted against the fleet's places already, so
/// only the caller's job quota can refuse it.
pub(crate) async fn enqueue_session_start(
    state: &AppState,
    caller: &Caller,
    spec: &JobSpec,
) -> Result<String, ApiError> {
    let Signed { id, payload, signature } = sign(state, caller, spec)?;
    let created_at = now_rfc3339();
    let job = NewJob {
        id: &id,
        owner: &caller.0,
        language: spec.language.as_str(),
        payload: &payload,
        signature: &signature,
        created_at: &created_at,
        callback: None,
        compat: None,
    };
    let enqueued = state.queue.enqueue_session_start(&job, state.config.quotas.of(&caller.0)).await?;
    admitted(state, caller, enqueued, [spec])?;
    tracing::info!(%id, language = %spec.language, "session start queued");
    Ok(id)
}

/// A job ready for the queue: a new id, the spec as the worker reads it,
/// and the signature over both that the worker checks before it runs it.
pub(crate) struct Signed {
    pub id: String,
    pub payload: String,
    pub signature: String,
}

/// Signs `spec` as a new job of `caller`, with the hosts the caller's jobs
/// may reach. Every job runbox queues (a single job, each job of a batch,
/// a session's step) is signed here.
pub(crate) fn sign(state: &AppState, caller: &Caller, spec: &JobSpec) -> Result<Signed, ApiError> {
    let id = uuid::Uuid::new_v4().to_string();
    let spec = JobSpec { egress: state.config.egress.of(&caller.0), ..spec.clone() };
    let payload = serde_json::to_string(&spec).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let signature = state.config.shared.signing_key.sign(&id, &payload);
    Ok(Signed { id, payload, signature })
}

/// What the queue said to `specs`, submitted as one by `caller`: queued
/// (None, and counted), an earlier submission with the same idempotency
/// key (its id), or refused (the 503 or 429 that says why).
pub(crate) fn admitted<'a>(
    state: &AppState,
    caller: &Caller,
    enqueued: Enqueued,
    specs: impl IntoIterator<Item = &'a JobSpec>,
) -> Result<Option<String>, ApiError> {
    match enqueued {
        Enqueued::Accepted => {
            for spec in specs {
                state.metrics.jobs_submitted.with_label_values(&[spec.language.as_str()]).inc();
            }
            Ok(None)
        }
        Enqueued::Duplicate(first) => Ok(Some(first)),
        Enqueued::Full => {
            state.metrics.queue_full.inc();
            Err(ApiError::QueueFull)
        }
        Enqueued::OverQuota(which) => Err(ApiError::over_quota(which, state.config.quotas.of(&caller.0))),
    }
}

/// A record the caller may see, or 404: another token's job is as good as
/// absent, so ids cannot be probed.
pub(crate) fn owned(record: Option<JobRecord>, caller: &Caller) -> Result<JobRecord, ApiError> {
    record.filter(|r| r.owner == caller.0).ok_or(ApiError::NotFound)
}

/// Reads job `id`, waiting up to `wait` for it to reach a final status.
pub(crate) async fn wait_for(state: &AppState, id: &str, wait: Duration) -> Result<Option<JobRecord>, ApiError> {
    if uuid::Uuid::parse_str(id).is_err() {
        return Ok(None);
    }
    let read = || async { Ok(state.queue.get(id).await?) };
    long_poll(state, id, wait, read, |record: &Option<JobRecord>| record.as_ref().is_none_or(|r| r.status.is_final()))
        .await
}

/// Reads with `read` until `done` holds for what it read, `wait` passes, or
/// the api is stopping; in between, sleeps until something is published
/// about `id` (a job, or a batch's progress). It listens before each read,
/// so what is published in between still wakes it.
pub(crate) async fn long_poll<T, Read>(
    state: &AppState,
    id: &str,
    wait: Duration,
    read: impl Fn() -> Read,
    done: impl Fn(&T) -> bool,
) -> Result<T, ApiError>
where
    Read: std::future::Future<Output = Result<T, ApiError>>,
{
    let deadline = Instant::now() + wait;
    let registration = state.waiters.register(id);
    state.metrics.waiters.set(i64::try_from(state.waiters.len()).unwrap_or(i64::MAX));
    loop {
        let notified = registration.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let value = read().await?;
        if done(&value) || Instant::now() >= deadline || state.stopping.is_cancelled() {
            return Ok(value);
        }
        let recheck = (Instant::now() + RECHECK_EVERY).min(deadline);
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep_until(recheck) => {}
            () = state.stopping.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A long-poll that is never satisfied, on a paused clock: how many
    /// reads it made, and how long it took.
    async fn poll(state: &AppState, wait: Duration, wake_after: Option<Duration>) -> (u32, Duration) {
        let reads = Arc::new(AtomicU32::new(0));
        let read = || {
            let reads = reads.clone();
            async move { Ok(reads.fetch_add(1, Ordering::SeqCst)) }
        };
        if let Some(after) = wake_after {
            let notify = state.waiters.register("job").notify.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                notify.notify_waiters();
            });
        }
        let started = Instant::now();
        long_poll(state, "job", wait, read, |_: &u32| false).await.expect("reads");
        (reads.load(Ordering::SeqCst), started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_poll_rereads_on_its_backstop_and_answers_at_its_deadline() {
        let state = AppState::for_tests("token-0123456789abcdef");
        // 30 s: the first read, one every RECHECK_EVERY (5 s), one at the deadline.
        let (reads, took) = poll(&state, Duration::from_secs(30), None).await;
        assert_eq!((reads, took), (7, Duration::from_secs(30)));
        // No wait: one read, at once.
        assert_eq!(poll(&state, Duration::ZERO, None).await, (1, Duration::ZERO));
        // A notification re-reads at once, between the backstop's reads.
        let (reads, took) = poll(&state, Duration::from_secs(6), Some(Duration::from_secs(1))).await;
        assert_eq!((reads, took), (3, Duration::from_secs(6)), "read at 0 s, at 1 s (woken) and at 6 s (the deadline)");
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_poll_answers_at_once_when_the_api_stops() {
        let state = AppState::for_tests("token-0123456789abcdef");
        let stopping = state.stopping.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            stopping.cancel();
        });
        let (reads, took) = poll(&state, Duration::from_secs(60), None).await;
        assert_eq!((reads, took), (2, Duration::from_secs(2)));
    }
}
