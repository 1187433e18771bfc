//! The `/v1/jobs` handlers.

use std::collections::HashMap;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use runbox_common::{
    Enqueued, Idempotency, JobRecord, JobSpec, Language, NewJob, OutputFile, Status, Timings, Verdict, now_rfc3339,
};
use serde::Serialize;
use serde_json::json;
use tokio::time::Instant;

use crate::AppState;
use crate::auth::Caller;
use crate::callbacks;
use crate::error::ApiError;
use crate::requests::{self, JobRequest};

/// How long a DELETE waits for the worker to confirm the kill.
pub(crate) const CANCEL_CONFIRM: Duration = Duration::from_secs(2);

/// A waiter re-reads the job this often even without a notification, as a
/// backstop for a completion published while the subscription was down.
pub(crate) const RECHECK_EVERY: Duration = Duration::from_secs(5);

/// The job object every route returns.
#[derive(Serialize, utoipa::ToSchema)]
pub struct JobView {
    id: String,
    status: Status,
    language: Option<Language>,
    stdout: Option<String>,
    stderr: Option<String>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<Verdict>,
    duration_ms: Option<u64>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files: Vec<OutputFile>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    files_truncated: bool,
    /// The job ran in one of its owner's long-lived children that had
    /// already run another of the owner's jobs (false until it has run).
    warm: bool,
    /// CPU time (user + system) the job used, in milliseconds, measured by
    /// runbox (null until it has run, or where nothing ran).
    cpu_ms: Option<u64>,
    /// The job's peak memory in bytes, measured by runbox; what each lane
    /// counts is in docs/api.md ("What each lane measures").
    peak_memory_bytes: Option<u64>,
    created_at: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    timings: Timings,
}

impl From<JobRecord> for JobView {
    fn from(record: JobRecord) -> Self {
        let outcome = record.outcome;
        JobView {
            id: record.id,
            status: record.status,
            language: record.language,
            stdout: outcome.as_ref().map(|o| o.stdout.clone()),
            stderr: outcome.as_ref().map(|o| o.stderr.clone()),
            exit_code: outcome.as_ref().and_then(|o| o.exit_code),
            signal: outcome.as_ref().and_then(|o| o.signal),
            verdict: outcome.as_ref().and_then(|o| o.verdict),
            duration_ms: outcome.as_ref().map(|o| o.duration_ms),
            stdout_truncated: outcome.as_ref().is_some_and(|o| o.stdout_truncated),
            stderr_truncated: outcome.as_ref().is_some_and(|o| o.stderr_truncated),
            files: outcome.as_ref().map(|o| o.files.clone()).unwrap_or_default(),
            files_truncated: outcome.as_ref().is_some_and(|o| o.files_truncated),
            warm: outcome.as_ref().is_some_and(|o| o.warm),
            cpu_ms: outcome.as_ref().and_then(|o| o.cpu_ms),
            peak_memory_bytes: outcome.as_ref().and_then(|o| o.peak_memory_bytes),
            created_at: record.created_at,
            started_at: record.started_at,
            finished_at: record.finished_at,
            timings: record.timings,
        }
    }
}

/// The `wait` query parameter of every route that can long-poll.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct WaitParam {
    /// Seconds to wait for the job (or batch) to finish before answering;
    /// 0 (the default) answers at once.
    #[param(minimum = 0, maximum = 60)]
    wait: Option<u64>,
}

/// The `Idempotency-Key` header: a retry with the same key answers with
/// the first job (or batch) instead of queuing another.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub(crate) struct IdempotencyKey {
    /// 1 to 255 printable ASCII characters without spaces.
    #[param(rename = "Idempotency-Key", min_length = 1, max_length = 255, pattern = "^[!-~]+$")]
    idempotency_key: Option<String>,
}

/// A job's id, as `POST /v1/jobs` returned it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct JobId {
    id: String,
}

/// Longest `Idempotency-Key` accepted.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The request's `Idempotency-Key`, if any: 1 to 255 printable ASCII characters.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    match value.to_str() {
        Ok(key) if !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY && key.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(Some(key))
        }
        _ => Err(ApiError::invalid(
            "Idempotency-Key",
            format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters without spaces"),
        )),
    }
}

/// The body of a JSON request, or the error that says what is wrong with it.
pub(crate) fn json_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::UnsupportedMediaType);
    }
    body.map_err(|rejection| ApiError::TooLarge {
        code: "payload_too_large",
        message: format!("request body rejected ({rejection}); the limit is {limit} bytes"),
    })
}

/// Validates, signs and queues a job; with `wait`, answers with the
/// finished job if it ends in time.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    params(WaitParam, IdempotencyKey),
    request_body(content = JobRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The job finished within `wait` (or an earlier request with the same Idempotency-Key queued it and it has finished).", body = JobView),
        (status = 202, description = "Queued (or still running after `wait`).", body = crate::openapi::Accepted),
        (status = 400, description = "`invalid_json`, `invalid_field`, `unknown_field` or `invalid_wait`.", body = crate::openapi::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::openapi::ErrorBody),
        (status = 413, description = "`payload_too_large`, `code_too_large`, `stdin_too_large`, `expected_stdout_too_large` or `files_too_large`.", body = crate::openapi::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: send application/json.", body = crate::openapi::ErrorBody),
        (status = 429, description = "`quota_exceeded`; see Retry-After.", body = crate::openapi::ErrorBody),
        (status = 503, description = "`queue_full` or `unavailable`; see Retry-After.", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let wait = requests::wait_seconds(query.get("wait").map(String::as_str))?;
    let body = json_body(&headers, body, state.config.limits.max_body_bytes())?;
    let (program, callback_url, shared_runtime) = requests::parse::<JobRequest>(&body)?.split();
    let spec = program.validate(&state.config.limits)?;
    let callback = callbacks::check_url(&state, &caller.0, callback_url).await?;

    let key = idempotency_key(&headers)?;
    let Queued { id, duplicate } =
        enqueue(&state, &caller, &spec, shared_runtime, key, callback.as_deref(), None).await?;

    // A retried request answers with the first job as it is now.
    let mut status = Status::Queued;
    if (wait > 0 || duplicate)
        && let Some(record) = wait_for(&state, &id, Duration::from_secs(wait)).await?
    {
        if record.status.is_final() {
            return Ok((StatusCode::OK, Json(JobView::from(record))).into_response());
        }
        status = record.status;
    }
    Ok((StatusCode::ACCEPTED, Json(json!({ "id": id, "status": status }))).into_response())
}

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
    let id = uuid::Uuid::new_v4().to_string();
    let placed = JobSpec { shared_lane: requests::lane(spec, shared_runtime, &caller.0), ..spec.clone() };
    let payload = serde_json::to_string(&placed).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let signature = state.config.shared.signing_key.sign(&id, &payload);
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
    match enqueued {
        Enqueued::Accepted => {
            state.metrics.jobs_submitted.with_label_values(&[spec.language.as_str()]).inc();
            tracing::info!(%id, language = %spec.language, "job queued");
            Ok(Queued { id, duplicate: false })
        }
        Enqueued::Full => {
            state.metrics.queue_full.inc();
            Err(ApiError::QueueFull)
        }
        Enqueued::Duplicate(first) => {
            tracing::info!(id = %first, "idempotency key reused: answering with the first job");
            Ok(Queued { id: first, duplicate: true })
        }
        Enqueued::OverQuota(which) => Err(ApiError::over_quota(which, state.config.quotas.of(&caller.0))),
    }
}

/// Reads a job; with `wait`, waits for it to finish first.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(JobId, WaitParam),
    responses(
        (status = 200, description = "The job, finished or not.", body = JobView),
        (status = 400, description = "`invalid_wait`.", body = crate::openapi::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::openapi::ErrorBody),
        (status = 404, description = "`not_found`: no such job, expired, or another token's.", body = crate::openapi::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<JobView>, ApiError> {
    let wait = requests::wait_seconds(query.get("wait").map(String::as_str))?;
    let record = wait_for(&state, &id, Duration::from_secs(wait)).await?;
    Ok(Json(owned(record, &caller)?.into()))
}

/// Cancels a queued or running job and answers with it, final if the
/// worker confirmed in time.
#[utoipa::path(
    delete,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(JobId),
    responses(
        (status = 200, description = "The job after the cancel; a job already final is unchanged.", body = JobView),
        (status = 401, description = "`unauthorized`.", body = crate::openapi::ErrorBody),
        (status = 404, description = "`not_found`.", body = crate::openapi::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    owned(state.queue.get(&id).await?, &caller)?;
    let ttl = state.config.shared.result_ttl;
    let cancelled = state.queue.cancel(&id, &now_rfc3339(), ttl).await?;
    tracing::info!(%id, ?cancelled, "cancel requested");
    // A running job ends when its worker has killed the child; wait briefly
    // for that so the answer shows the final state.
    let record = wait_for(&state, &id, CANCEL_CONFIRM).await?;
    Ok(Json(owned(record, &caller)?.into()))
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
