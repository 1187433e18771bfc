//! The runbox api: a thin, stateless HTTP front for the job queue.
//!
//! It authenticates each request, validates and signs each job, enqueues
//! it in Redis (or answers 503 at once when the queue is full), and serves
//! results by poll and long-poll. It never runs code.
//!
//! # Layout
//!
//! From the bottom up; each module uses only those above it in this list.
//!
//! - `error`: every error, its one mapping to an HTTP response, and
//!   [`FieldError`](error::FieldError), a request field that is wrong.
//! - `tokens`, `quotas`, `callback_urls`: the bearer tokens (compared in
//!   constant time), what each token may queue and submit, and where a
//!   callback may go with which secret; `egress`, the hosts each token's
//!   jobs may reach (carried in its signed jobs) and the names of its secrets.
//! - `config`: settings, read from the environment once.
//! - `requests`: each request body as one type that parses it and
//!   documents it, and the checks that turn it into a job spec.
//! - `views`: the job, batch and session objects the native API answers.
//! - `metrics`, `waiters`, `state`: every metric, the long-poll and
//!   live-output fan-out over one subscription, and what handlers share.
//! - `auth`: the bearer check in front of every `/v1` route.
//! - `pipeline`: sign and enqueue a job, and wait for it: the one path of
//!   every surface.
//! - `jobs`, `events`, `batches`, `sessions`, `system`: the native routes
//!   (`/v1/jobs`, its live output as Server-Sent Events, `/v1/batches`,
//!   `/v1/sessions`, and `/healthz`, `/readyz`, `/v1/runtimes`, `/metrics`).
//! - `mcp`: `/mcp`, the same jobs and sessions as Model Context Protocol tools.
//! - `compat`: Judge0-, Piston-, SandboxFusion- and E2B-compatible APIs,
//!   translated into jobs and sessions.
//! - `callbacks`: signed delivery of finished jobs and batches to `callback_url`.
//! - `openapi`: `/openapi.json`, the native API described from these types.
//! - `page`: `/`, a page for people to run code from a browser.

mod auth;
mod batches;
mod callback_urls;
mod callbacks;
mod compat;
mod config;
mod egress;
mod error;
mod events;
mod files;
#[cfg(test)]
mod handler_tests;
mod jobs;
mod mcp;
mod metrics;
mod openapi;
mod page;
mod pipeline;
mod quotas;
mod requests;
mod sessions;
mod state;
mod system;
mod tokens;
mod views;
mod waiters;

use std::future::Future;

use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::routing::get;
use axum::{Router, middleware};

pub use config::{ApiConfig, ApiLimits, McpHosts};
pub use error::ApiError;
pub use metrics::Metrics;
pub use state::AppState;

/// After SIGTERM, how long requests in flight may take before the api
/// exits anyway. Long-polls answer at once with the current state.
pub const SHUTDOWN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The whole HTTP surface.
pub fn app(state: AppState) -> Router {
    let batches = Router::new()
        .route("/v1/batches", axum::routing::post(batches::submit))
        .route("/v1/batches/{id}", get(batches::get).delete(batches::cancel))
        .route("/v1/batches/{id}/results", get(batches::results))
        .layer(DefaultBodyLimit::max(state.config.limits.max_batch_bytes));
    // A file's upload is its body, up to the per-file cap (one byte more,
    // so that an upload past it is refused as that, not cut).
    let files = Router::new()
        .route("/v1/sessions/{id}/files", get(files::list))
        .route("/v1/sessions/{id}/files/{*path}", get(files::get).put(files::put).delete(files::delete))
        .layer(DefaultBodyLimit::max(runbox_common::MAX_SESSION_FILE_BYTES + 1));
    let v1 = Router::new()
        .route("/v1/jobs", axum::routing::post(jobs::submit))
        .route("/v1/jobs/{id}", get(jobs::get).delete(jobs::cancel))
        .route("/v1/jobs/{id}/events", get(events::stream))
        .route("/v1/sessions", get(sessions::list).post(sessions::create))
        .route("/v1/sessions/{id}", get(sessions::get).delete(sessions::destroy))
        .route("/v1/sessions/{id}/exec", axum::routing::post(sessions::exec))
        .route("/v1/sessions/{id}/checkpoints", axum::routing::post(sessions::checkpoint))
        .route("/v1/sessions/{id}/fork", axum::routing::post(sessions::fork))
        .route("/v1/runtimes", get(system::runtimes))
        .route("/metrics", get(system::metrics))
        .layer(DefaultBodyLimit::max(state.config.limits.max_body_bytes()))
        .merge(batches)
        .merge(files)
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_token));
    // rmcp enforces its own body limit (the same as a job's), so axum's is
    // not layered on here.
    let mcp = Router::new()
        .route_service("/mcp", mcp::service(state.clone()))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_token));
    Router::new()
        .merge(v1)
        .merge(mcp)
        .merge(compat::router(&state))
        .route("/healthz", get(system::healthz))
        .route("/readyz", get(system::readyz))
        .route("/openapi.json", get(openapi::serve))
        .route("/", get(page::index))
        .fallback(|method: Method, uri: Uri| async move {
            ApiError::NoRoute(format!("{method} {}", compat::redacted_path(uri.path())))
        })
        .method_not_allowed_fallback(|method: Method| async move { ApiError::MethodNotAllowed(method.to_string()) })
        .layer(tower_http::trace::TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
            // A Piston or SandboxFusion path carries a token: only its redacted form is recorded.
            let path = compat::redacted_path(request.uri().path());
            tracing::info_span!("request", method = %request.method(), path = %path, caller = tracing::field::Empty)
        }))
        .with_state(state)
}

/// Serves the api on `listener` until `shutdown` resolves, then stops
/// accepting, answers long-polls with the current state, and gives the
/// requests in flight up to [`SHUTDOWN_DEADLINE`] to finish.
pub async fn run(
    config: ApiConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), std::io::Error> {
    let state = AppState::new(config).map_err(std::io::Error::other)?;
    state.queue.check_server().await.map_err(std::io::Error::other)?;
    if let Err(e) = state.queue.ensure_callback_group().await {
        tracing::warn!(error = %e, "could not create the callback group yet; the deliverer will retry");
    }
    tokio::spawn(callbacks::run(state.clone()));
    tracing::info!(addr = %listener.local_addr()?, "api listening");
    let stopping = state.stopping.clone();
    tokio::spawn({
        let stopping = stopping.clone();
        async move {
            shutdown.await;
            // Before the log line: stopping must not depend on stderr.
            stopping.cancel();
            tracing::info!("shutting down: answering long-polls, finishing requests");
        }
    });
    let server = axum::serve(listener, app(state)).with_graceful_shutdown(stopping.clone().cancelled_owned());
    tokio::select! {
        served = server => served,
        () = async { stopping.cancelled().await; tokio::time::sleep(SHUTDOWN_DEADLINE).await } => {
            tracing::warn!(deadline = ?SHUTDOWN_DEADLINE, "requests still open at the shutdown deadline; closing them");
            Ok(())
        }
    }
}
