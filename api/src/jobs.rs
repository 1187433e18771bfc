//! The `/v1/jobs` handlers.

use std::collections::HashMap;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use runbox_common::{Status, now_rfc3339};
use serde_json::json;

use crate::auth::Caller;
use crate::callback_urls;
use crate::error::ApiError;
use crate::pipeline::{Queued, enqueue, owned, wait_for};
use crate::requests::{self, JobRequest};
use crate::requests::{idempotency_key, json_body};
use crate::state::AppState;
use crate::views::JobView;

/// How long a DELETE waits for the worker to confirm the kill.
pub(crate) const CANCEL_CONFIRM: Duration = Duration::from_secs(2);

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
        (status = 202, description = "Queued (or still running after `wait`).", body = crate::views::Accepted),
        (status = 400, description = "`invalid_json`, `invalid_field`, `unknown_field` or `invalid_wait`.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 413, description = "`payload_too_large`, `code_too_large`, `stdin_too_large`, `expected_stdout_too_large` or `files_too_large`.", body = crate::views::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: send application/json.", body = crate::views::ErrorBody),
        (status = 429, description = "`quota_exceeded`; see Retry-After.", body = crate::views::ErrorBody),
        (status = 503, description = "`queue_full` or `unavailable`; see Retry-After.", body = crate::views::ErrorBody),
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
    let callback = callback_urls::check_url(&state.config.callbacks, &caller.0, callback_url).await?;

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

/// Reads a job; with `wait`, waits for it to finish first.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(JobId, WaitParam),
    responses(
        (status = 200, description = "The job, finished or not.", body = JobView),
        (status = 400, description = "`invalid_wait`.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 404, description = "`not_found`: no such job, expired, or another token's.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::views::ErrorBody),
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
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 404, description = "`not_found`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::views::ErrorBody),
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
