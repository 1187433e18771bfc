//! The `/v1/batches` handlers: many jobs submitted, read, streamed and
//! cancelled as one.
//!
//! A batch is validated whole (every bad job is reported with its index,
//! and then nothing is queued), signed job by job, and enqueued all or
//! none in one Redis script. Its jobs are ordinary jobs: they run, finish
//! and expire as jobs do, and `GET /v1/jobs/{id}` reads each one.
//!
//! Test-case mode is the same thing written shorter: one `program` and its
//! `cases`, each case a job made of the program plus the case's stdin,
//! args and expected output.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use runbox_common::{BatchJob, BatchRecord, Idempotency, Status, now_rfc3339};
use serde_json::json;

use crate::auth::Caller;
use crate::callback_urls;
use crate::error::{ApiError, BatchItemError};
use crate::jobs::CANCEL_CONFIRM;
use crate::pipeline::{self, RECHECK_EVERY, Signed, long_poll};
use crate::requests::{self, BatchRequest};
use crate::requests::{idempotency_key, json_body};
use crate::state::AppState;
use crate::views::{BatchStatus, BatchView, JobView};

/// Jobs per page of `GET /v1/batches/{id}`, by default and at most.
const DEFAULT_PAGE: usize = 100;
pub(crate) const MAX_PAGE: usize = 1000;

/// The largest `offset` of a page: far past any batch, and within the
/// 64-bit signed integers OpenAPI clients use.
pub(crate) const MAX_OFFSET: usize = u32::MAX as usize;

/// A batch's id, as `POST /v1/batches` returned it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct BatchId {
    id: String,
}

/// One page of a batch's jobs.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct Page {
    /// The first job of the page, from 0.
    #[param(minimum = 0, maximum = 4294967295_u64)]
    offset: Option<u64>,
    /// Jobs per page: 1 to 1000, 100 by default.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u64>,
}

/// Validates every job, then queues all of them or none.
#[utoipa::path(
    post,
    path = "/v1/batches",
    tag = "batches",
    params(crate::jobs::IdempotencyKey),
    request_body(content = BatchRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "Queued: the batch id and its job ids, in order.", body = crate::views::BatchAccepted),
        (status = 400, description = "`invalid_json`, `invalid_field`, `unknown_field`, or `invalid_batch` with each bad job in `error.jobs`.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 413, description = "`payload_too_large`.", body = crate::views::ErrorBody),
        (status = 415, description = "`unsupported_media_type`.", body = crate::views::ErrorBody),
        (status = 429, description = "`quota_exceeded`.", body = crate::views::ErrorBody),
        (status = 503, description = "`queue_full` or `unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let limits = &state.config.limits;
    let body = json_body(&headers, body, limits.max_batch_bytes)?;
    let batch = BatchRequest::parse(&body, limits.max_batch)?.validate(limits)?;
    let callback = callback_urls::check_url(&state.config.callbacks, &caller.0, batch.callback_url).await?;
    let (stop_on_failure, shared_runtime) = (batch.stop_on_first_failure, batch.shared_runtime);
    let total = batch.jobs.len();
    let mut specs = Vec::with_capacity(total);
    let mut errors = Vec::new();
    for (index, job) in batch.jobs.into_iter().enumerate() {
        match job {
            Ok(spec) => specs.push(spec),
            Err(error) => errors.push(BatchItemError::new(index, error)),
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::InvalidBatch { total, errors });
    }

    let batch_id = uuid::Uuid::new_v4().to_string();
    for spec in &mut specs {
        spec.shared_lane = requests::lane(spec, shared_runtime, &caller.0);
    }
    let mut jobs = Vec::with_capacity(specs.len());
    for spec in &specs {
        let Signed { id, payload, signature } = pipeline::sign(&state, &caller, spec)?;
        jobs.push(BatchJob { id, language: spec.language.as_str().to_owned(), payload, signature });
    }
    let idempotency = idempotency_key(&headers)?.map(|key| Idempotency { key, ttl: state.config.shared.result_ttl });
    let enqueued = state
        .queue
        .enqueue_batch(
            &batch_id,
            &caller.0,
            &now_rfc3339(),
            &jobs,
            stop_on_failure,
            limits.max_queue,
            idempotency,
            callback.as_deref(),
            state.config.quotas.of(&caller.0),
        )
        .await?;
    let (batch_id, job_ids) = match pipeline::admitted(&state, &caller, enqueued, &specs)? {
        None => {
            tracing::info!(id = %batch_id, jobs = jobs.len(), "batch queued");
            (batch_id, jobs.into_iter().map(|j| j.id).collect())
        }
        Some(first) => {
            tracing::info!(id = %first, "idempotency key reused: answering with the first batch");
            let job_ids = state.queue.get_batch(&first).await?.map(|b| b.job_ids).unwrap_or_default();
            (first, job_ids)
        }
    };
    Ok((StatusCode::ACCEPTED, Json(json!({ "id": batch_id, "job_ids": job_ids }))).into_response())
}

/// Reads a batch: counts, and one page of its jobs; with `wait`, waits
/// for every job to finish first.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}",
    tag = "batches",
    params(BatchId, crate::jobs::WaitParam, Page),
    responses(
        (status = 200, description = "The batch.", body = BatchView),
        (status = 400, description = "`invalid_wait` or `invalid_field` (offset, limit).", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 404, description = "`not_found`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<BatchView>, ApiError> {
    let wait = requests::wait_seconds(query.get("wait").map(String::as_str))?;
    let offset = page_param(&query, "offset", 0, MAX_OFFSET)?;
    let limit = page_param(&query, "limit", DEFAULT_PAGE, MAX_PAGE)?;
    let batch = wait_for_batch(&state, &id, &caller, Duration::from_secs(wait)).await?;
    Ok(Json(view(&state, batch, offset, limit).await?))
}

/// Cancels every job of the batch not yet final.
#[utoipa::path(
    delete,
    path = "/v1/batches/{id}",
    tag = "batches",
    params(BatchId),
    responses(
        (status = 200, description = "The batch after the cancel (first page).", body = BatchView),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 404, description = "`not_found`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<BatchView>, ApiError> {
    let batch = wait_for_batch(&state, &id, &caller, Duration::ZERO).await?;
    let summaries = state.queue.summaries(&batch.job_ids).await?;
    let ttl = state.config.shared.result_ttl;
    let mut cancelled = 0;
    for (job_id, summary) in batch.job_ids.iter().zip(&summaries) {
        // An expired job (no status) is long final.
        if summary.status.is_some_and(|status| !status.is_final()) {
            state.queue.cancel(job_id, &now_rfc3339(), ttl).await?;
            cancelled += 1;
        }
    }
    tracing::info!(%id, cancelled, "batch cancel requested");
    // Running jobs end when their workers have killed them; wait briefly.
    let batch = wait_for_batch(&state, &id, &caller, CANCEL_CONFIRM).await?;
    Ok(Json(view(&state, batch, 0, DEFAULT_PAGE).await?))
}

/// Streams each job of the batch as one NDJSON line once it is final, in
/// the order they finish, and ends when every job has been sent.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}/results",
    tag = "batches",
    params(BatchId),
    responses(
        (status = 200, description = "One job object per line as each finishes; a job that expired is `{\"id\", \"status\": null, \"expired\": true}`.", content_type = "application/x-ndjson", body = String),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 404, description = "`not_found`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn results(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let batch = wait_for_batch(&state, &id, &caller, Duration::ZERO).await?;
    let pending: Vec<String> = batch.job_ids;
    let stream = futures_util::stream::unfold(Some((state, id, pending)), |progress| async move {
        let (state, id, mut pending) = progress?;
        loop {
            // On shutdown the stream ends early; the batch can be read again.
            if pending.is_empty() || state.stopping.is_cancelled() {
                return None;
            }
            let registration = state.waiters.register(&id);
            let notified = registration.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let summaries = match state.queue.summaries(&pending).await {
                Ok(summaries) => summaries,
                Err(e) => return Some((Err(std::io::Error::other(e)), None)),
            };
            let finished: HashSet<&String> = pending
                .iter()
                .zip(&summaries)
                .filter(|(_, s)| s.status.is_none_or(Status::is_final))
                .map(|(job_id, _)| job_id)
                .collect();
            if !finished.is_empty() {
                let mut lines = Vec::new();
                for job_id in pending.iter().filter(|j| finished.contains(j)) {
                    let line = match state.queue.get(job_id).await {
                        Ok(Some(record)) => serde_json::to_vec(&JobView::from(record)),
                        Ok(None) => serde_json::to_vec(&json!({ "id": job_id, "status": null, "expired": true })),
                        Err(e) => return Some((Err(std::io::Error::other(e)), None)),
                    };
                    lines.extend(line.unwrap_or_default());
                    lines.push(b'\n');
                }
                let finished: HashSet<String> = finished.into_iter().cloned().collect();
                pending.retain(|j| !finished.contains(j));
                return Some((Ok(Bytes::from(lines)), Some((state, id, pending))));
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(RECHECK_EVERY) => {}
                () = state.stopping.cancelled() => {}
            }
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    Ok(response)
}

/// Reads batch `id` if the caller owns it, waiting up to `wait` for every
/// job in it to finish.
async fn wait_for_batch(state: &AppState, id: &str, caller: &Caller, wait: Duration) -> Result<BatchRecord, ApiError> {
    if uuid::Uuid::parse_str(id).is_err() {
        return Err(ApiError::NotFound);
    }
    let read = || async { state.queue.get_batch(id).await?.filter(|b| b.owner == caller.0).ok_or(ApiError::NotFound) };
    long_poll(state, id, wait, read, |batch: &BatchRecord| batch.done >= batch.job_ids.len() as u64).await
}

/// Batch `id` without its jobs, as a callback carries it; None if expired.
pub async fn summary(state: &AppState, id: &str) -> Result<Option<BatchView>, ApiError> {
    match state.queue.get_batch(id).await? {
        Some(batch) => Ok(Some(view(state, batch, 0, 0).await?)),
        None => Ok(None),
    }
}

async fn view(state: &AppState, batch: BatchRecord, offset: usize, limit: usize) -> Result<BatchView, ApiError> {
    let summaries = state.queue.summaries(&batch.job_ids).await?;
    let mut counts = BTreeMap::new();
    let mut verdicts = BTreeMap::new();
    for summary in &summaries {
        let status = summary.status.map_or("expired", Status::as_str);
        *counts.entry(status.to_owned()).or_insert(0) += 1;
        if let Some(verdict) = &summary.verdict {
            *verdicts.entry(verdict.clone()).or_insert(0) += 1;
        }
    }
    let size = batch.job_ids.len();
    let page: Vec<&String> = batch.job_ids.iter().skip(offset).take(limit).collect();
    let records = futures_util::future::try_join_all(page.iter().map(|id| state.queue.get(id))).await?;
    let jobs = records.into_iter().flatten().map(JobView::from).collect();
    let end = offset.saturating_add(limit);
    Ok(BatchView {
        status: if batch.done >= size as u64 { BatchStatus::Finished } else { BatchStatus::Running },
        size,
        done: batch.done,
        stop_on_first_failure: batch.stop_on_failure,
        created_at: batch.created_at,
        counts,
        verdicts,
        offset,
        limit,
        next_offset: (end < size).then_some(end),
        jobs,
        id: batch.id,
    })
}

fn page_param(query: &HashMap<String, String>, name: &str, default: usize, max: usize) -> Result<usize, ApiError> {
    match query.get(name) {
        None => Ok(default),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if n <= max && (name != "limit" || n > 0) => Ok(n),
            _ => {
                let min = usize::from(name == "limit");
                Err(ApiError::invalid(name, format!("{name} must be a whole number from {min} to {max}")))
            }
        },
    }
}
