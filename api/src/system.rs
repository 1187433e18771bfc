//! The service's own routes: liveness, readiness, what it runs
//! (`/v1/runtimes`) and its metrics.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use runbox_common::{Language, WorkerInfo, now_unix_ms};

use crate::auth::Caller;
use crate::config::MAX_WAIT_S;
use crate::error::ApiError;
use crate::state::AppState;
use crate::views::{ErrorBody, Health};

/// Liveness: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "service",
    security(()),
    responses((status = 200, description = "`{\"status\": \"ok\"}`.", body = Health)),
)]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".into() })
}

/// Readiness: Redis answers.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "service",
    security(()),
    responses(
        (status = 200, description = "`{\"status\": \"ready\"}`.", body = Health),
        (status = 503, description = "`{\"status\": \"redis unreachable\"}`.", body = Health),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match state.queue.ping().await {
        Ok(()) => (StatusCode::OK, Json(Health { status: "ready".into() })),
        Err(e) => {
            tracing::warn!(error = %e, "not ready: redis unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "redis unreachable".into() }))
        }
    }
}

/// The languages, the limits, and the live workers.
#[utoipa::path(
    get,
    path = "/v1/runtimes",
    tag = "service",
    responses(
        (status = 200, description = "What can run, within which limits.", body = runbox_common::Runtimes),
        (status = 401, description = "`unauthorized`.", body = ErrorBody),
        (status = 503, description = "`unavailable`.", body = ErrorBody),
    ),
)]
pub async fn runtimes(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<runbox_common::Runtimes>, ApiError> {
    let workers = live_workers(&state).await?;
    let limits = &state.config.limits;
    Ok(Json(runbox_common::Runtimes {
        languages: Language::ALL.to_vec(),
        limits: runbox_common::RuntimeLimits {
            default_timeout_ms: limits.timeouts.default_ms(),
            max_timeout_ms: limits.timeouts.max_ms(),
            max_code_bytes: limits.max_code_bytes,
            max_stdin_bytes: limits.max_stdin_bytes,
            max_files_bytes: limits.max_files_bytes,
            max_queue: limits.max_queue,
            max_batch: limits.max_batch,
            max_batch_bytes: limits.max_batch_bytes,
            max_wait_s: MAX_WAIT_S,
        },
        workers,
        egress: state.config.egress.grant(&caller.0),
    }))
}

/// Prometheus metrics, in the text exposition format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "service",
    responses(
        (status = 200, description = "Prometheus text format.", content_type = "text/plain", body = String),
        (status = 401, description = "`unauthorized`.", body = ErrorBody),
        (status = 503, description = "`unavailable`.", body = ErrorBody),
    ),
)]
pub async fn metrics(State(state): State<AppState>) -> Result<String, ApiError> {
    let m = &state.metrics;
    m.queue_depth.set(i64::try_from(state.queue.depth().await?).unwrap_or(i64::MAX));
    let oldest = state.queue.oldest_queued_age(now_unix_ms()).await?;
    m.oldest_queued_age_seconds.set(oldest.map_or(0, |age| i64::try_from(age.as_secs()).unwrap_or(i64::MAX)));
    m.workers.set(i64::try_from(live_workers(&state).await?.len()).unwrap_or(i64::MAX));
    m.waiters.set(i64::try_from(state.waiters.len()).unwrap_or(i64::MAX));
    Ok(m.render())
}

/// What each worker with a recent heartbeat reports about itself.
pub(crate) async fn live_workers(state: &AppState) -> Result<Vec<WorkerInfo>, ApiError> {
    let now = now_unix_ms();
    Ok(state.queue.workers().await?.into_iter().filter(|w| w.is_live(now)).collect())
}
