//! APIs compatible with other code runners, so that code written for them
//! runs against runbox unchanged:
//!
//! - `e2b`: E2B's sandboxes and code interpreter, under `/e2b`, for E2B's
//!   SDKs. It is built on sessions rather than jobs, and keeps a record of
//!   its own per sandbox (see its module).
//! - `judge0`: Judge0 CE 1.13.1, under `/judge0`.
//! - `piston`: Piston v2, under `/piston/{token}`.
//! - `sandbox_fusion`: SandboxFusion's `run_code` and `run_jupyter`, under
//!   `/sandbox-fusion/{token}`.
//!
//! Each only translates: a request becomes native job fields, checked,
//! signed and queued by the functions `POST /v1/jobs` uses, and an answer
//! is built from the job record. Each maps errors to its API's shapes in
//! one adapter (`Judge0Error`, `PistonError`, `FusionError`) over
//! [`crate::ApiError`]. Piston and SandboxFusion carry the token in the
//! path, so [`redacted_path`] is the only form of a path that is logged.

pub mod e2b;
pub mod judge0;
pub mod piston;
pub mod sandbox_fusion;

use std::borrow::Cow;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::Next;
use axum::response::Response;
use runbox_common::JobRecord;

use crate::auth::{bearer, identify};
use crate::state::AppState;

/// Every compatible API's routes, each with its own token check.
pub fn router(state: &AppState) -> Router<AppState> {
    let limits = &state.config.limits;
    // A Judge0 batch carries up to 20 submissions in one body.
    let judge0 = judge0::router(state).layer(DefaultBodyLimit::max(limits.max_batch_bytes));
    let piston = piston::router(state).layer(DefaultBodyLimit::max(limits.max_body_bytes()));
    let sandbox_fusion = sandbox_fusion::router(state).layer(DefaultBodyLimit::max(limits.max_body_bytes()));
    Router::new().nest("/e2b", e2b::router(state)).nest("/judge0", judge0).merge(piston).merge(sandbox_fusion)
}

/// The path as it may be logged or shown: a token in the path (Piston's,
/// SandboxFusion's) replaced by `***`.
pub fn redacted_path(path: &str) -> Cow<'_, str> {
    match piston::redacted_path(path) {
        Cow::Borrowed(path) => sandbox_fusion::redacted_path(path),
        redacted => redacted,
    }
}

/// Lets a request to a compatible API that carries its token in the path
/// through as that token's caller: a bearer header if there is one, else
/// `from_path`. Anything else gets `refused`.
async fn admit(
    state: &AppState,
    mut request: Request,
    next: Next,
    from_path: Option<String>,
    refused: impl FnOnce() -> Response,
) -> Response {
    let presented = bearer(request.headers()).map(str::to_owned).or(from_path);
    match identify(state, presented.as_deref()) {
        Some(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        None => refused(),
    }
}

/// The body of a finished job's callback when a compatible API submitted
/// it: Judge0 PUTs the submission, in its own shape. None for native jobs.
pub fn callback_body(record: &JobRecord) -> Option<Vec<u8>> {
    judge0::callback_body(record)
}
